package pipeline

import (
	"testing"
	"time"
)

// TestArrivalWatermark: with watermark arrival the stage's watermark is the
// smallest partition frontier minus the lateness, where a frontier is the
// largest record time read or, for a partition read to its end, the fetch's
// send time minus the lateness. A partition with neither holds every window.
func TestArrivalWatermark(t *testing.T) {
	const L = 500 // ms
	now := time.UnixMilli(100_000)
	type step struct {
		observe  map[int]int64 // partition → record time
		caughtUp map[int]int64 // partition → fetch send time
		wantOK   bool
		wantWM   int64
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"nothing read: no watermark", []step{{wantOK: false}}},
		{"one partition silent: holds", []step{
			{observe: map[int]int64{0: 90_000, 1: 91_000}, wantOK: false},
		}},
		{"record times: the minimum", []step{
			{observe: map[int]int64{0: 90_000, 1: 91_000, 2: 95_000}, wantOK: true, wantWM: 90_000 - L},
			{observe: map[int]int64{0: 96_000}, wantOK: true, wantWM: 91_000 - L},
		}},
		{"caught up advances by the wall clock", []step{
			{observe: map[int]int64{0: 90_000, 1: 91_000}, caughtUp: map[int]int64{2: 99_000}, wantOK: true, wantWM: 90_000 - L},
			{caughtUp: map[int]int64{0: 99_000, 1: 99_000}, wantOK: true, wantWM: 99_000 - 2*L},
		}},
		{"an older caught-up time never lowers the frontier", []step{
			{observe: map[int]int64{0: 95_000, 1: 95_000, 2: 95_000}, caughtUp: map[int]int64{0: 90_000}, wantOK: true, wantWM: 95_000 - L},
		}},
		{"a lagging partition holds the others", []step{
			{caughtUp: map[int]int64{1: 99_000, 2: 99_000}, observe: map[int]int64{0: 50_000}, wantOK: true, wantWM: 50_000 - L},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWatermarks([]int{0, 1, 2}, true, L*time.Millisecond, time.Millisecond, func() time.Time { return now })
			for i, s := range tc.steps {
				for p, ms := range s.observe {
					w.observe(p, ms)
				}
				for p, ms := range s.caughtUp {
					w.caughtUpAt(p, ms)
				}
				wm, _, ok := w.current()
				if ok != s.wantOK || (ok && wm != s.wantWM) {
					t.Errorf("step %d: watermark (%d, %v), want (%d, %v)", i, wm, ok, s.wantWM, s.wantOK)
				}
			}
		})
	}
	// Event mode ignores caught-up times and lets idle partitions go.
	w := newWatermarks([]int{0, 1}, false, L*time.Millisecond, time.Second, func() time.Time { return now })
	w.observe(0, 90_000)
	w.caughtUpAt(1, 99_000)
	if _, _, ok := w.current(); ok {
		t.Error("event mode: a live partition without events must hold the watermark")
	}
}

// TestEventWatermarkFailingPartitionIsNotIdle: with watermark event a
// partition silent for the idle timeout stops holding the watermark — but
// not while its fetches fail (a leader move), since it may hold unread
// events (issue 16, 1c).
func TestEventWatermarkFailingPartitionIsNotIdle(t *testing.T) {
	now := time.UnixMilli(100_000)
	clock := func() time.Time { return now }
	w := newWatermarks([]int{0, 1}, false, 0, time.Second, clock)
	w.observe(0, 90_000)
	w.observe(1, 50_000)
	now = now.Add(500 * time.Millisecond)
	w.observe(0, 95_000)
	if wm, _, _ := w.current(); wm != 50_000 {
		t.Fatalf("both live: watermark %d, want 50000", wm)
	}
	w.setFailing(1, true)
	now = now.Add(2 * time.Second)
	w.observe(0, 96_000)
	if wm, _, _ := w.current(); wm != 50_000 {
		t.Errorf("partition 1 silent but failing: watermark %d, want 50000 (held)", wm)
	}
	w.setFailing(1, false)
	if wm, _, _ := w.current(); wm != 96_000 {
		t.Errorf("partition 1 silent and fetching: watermark %d, want 96000 (idle)", wm)
	}
}
