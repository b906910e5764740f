package window

import (
	"testing"
	"time"
)

// The stage's fetch timing (source.FetchMaxWait, source.FetchRetryBackoff)
// and the end freshness it derives from them (pipeline: 2 × max wait +
// retry back-off).
const (
	fetchMaxWait      = 500 * time.Millisecond
	fetchRetryBackoff = 500 * time.Millisecond
	endFresh          = 2*fetchMaxWait + fetchRetryBackoff
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
			w := NewWatermarks([]int{0, 1, 2}, true, L*time.Millisecond, time.Millisecond, endFresh, func() time.Time { return now })
			for i, s := range tc.steps {
				for p, ms := range s.observe {
					w.Observe(p, ms)
				}
				for p, ms := range s.caughtUp {
					w.CaughtUpAt(p, ms)
				}
				wm, _, ok := w.Current()
				if ok != s.wantOK || (ok && wm != s.wantWM) {
					t.Errorf("step %d: watermark (%d, %v), want (%d, %v)", i, wm, ok, s.wantWM, s.wantOK)
				}
			}
		})
	}
	// Event mode ignores caught-up times and lets idle partitions go.
	w := NewWatermarks([]int{0, 1}, false, L*time.Millisecond, time.Second, endFresh, func() time.Time { return now })
	w.Observe(0, 90_000)
	w.CaughtUpAt(1, 99_000)
	if _, _, ok := w.Current(); ok {
		t.Error("event mode: a live partition without events must hold the watermark")
	}
}

// TestEventWatermarkIdle: with watermark event a partition silent for the
// idle timeout stops holding the watermark only when it is known to be read
// to its end: never while its fetches fail (a leader move), while it has
// unread records or records held back by an open transaction, before a
// fetch first came back at its end, or once its fetch loop stopped
// answering (issue 16, 1c). The idle timeout here (300ms) is shorter than
// the fetch retry back-off (500ms): the back-off never counts toward it.
func TestEventWatermarkIdle(t *testing.T) {
	const idle = 300 * time.Millisecond
	if idle >= fetchRetryBackoff {
		t.Fatal("the test needs an idle timeout below the retry back-off")
	}
	type step struct {
		advance  time.Duration
		caughtUp bool // partition 1's fetch came back at the high watermark
		behind   bool // … ended below it (lag or an open transaction)
		failing  *bool
		wantIdle bool
	}
	yes, no := true, false
	tests := []struct {
		name  string
		steps []step
	}{
		{"read to its end and silent: idle", []step{
			{caughtUp: true, wantIdle: false},
			{advance: idle, caughtUp: true, wantIdle: true},
		}},
		{"never read to its end: not idle", []step{
			{advance: 10 * idle, wantIdle: false},
		}},
		{"failing through the back-off: not idle", []step{
			{caughtUp: true},
			{advance: idle, caughtUp: true, wantIdle: true},
			{failing: &yes, wantIdle: false},
			{advance: fetchRetryBackoff, wantIdle: false},
			{advance: fetchRetryBackoff, wantIdle: false},
			{failing: &no, wantIdle: false}, // fetching again, not yet at the end
			{caughtUp: true, wantIdle: true},
		}},
		{"held at an open transaction's LSO: not idle", []step{
			{caughtUp: true},
			{advance: idle, behind: true, wantIdle: false},
			{advance: 10 * idle, behind: true, wantIdle: false},
			{caughtUp: true, wantIdle: true}, // the transaction ended, read to the end
		}},
		{"fetch loop stopped answering: not idle", []step{
			{caughtUp: true},
			{advance: idle, wantIdle: true},
			{advance: endFresh, wantIdle: false},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := time.UnixMilli(100_000)
			w := NewWatermarks([]int{0, 1}, false, 0, idle, endFresh, func() time.Time { return now })
			w.Observe(1, 50_000)
			w.Observe(0, 90_000)
			for i, s := range tc.steps {
				now = now.Add(s.advance)
				w.Observe(0, 90_000+now.UnixMilli()-100_000) // partition 0 stays live
				if s.failing != nil {
					w.SetFailing(1, *s.failing)
				}
				if s.caughtUp {
					w.CaughtUpAt(1, now.UnixMilli())
				}
				if s.behind {
					w.SetUnread(1)
				}
				wm, _, ok := w.Current()
				if gotIdle := ok && wm != 50_000; gotIdle != s.wantIdle {
					t.Errorf("step %d: watermark %d (ok %v): partition 1 idle %v, want %v", i, wm, ok, gotIdle, s.wantIdle)
				}
				if got := w.Idle(1); got != s.wantIdle {
					t.Errorf("step %d: Idle(1) = %v, want %v", i, got, s.wantIdle)
				}
				if idle, l, ok := w.IdleLatest(1); !ok || l != 50_000 || idle != s.wantIdle {
					t.Errorf("step %d: IdleLatest(1) = %v, %d, %v; want %v, 50000", i, idle, l, ok, s.wantIdle)
				}
				if _, _, ok := w.IdleLatest(7); ok {
					t.Errorf("step %d: IdleLatest of an untracked partition", i)
				}
				if w.Idle(0) || w.Idle(7) {
					t.Errorf("step %d: the live partition 0, or the untracked 7, idle", i)
				}
			}
		})
	}
}
