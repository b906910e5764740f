package window_test

import (
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/window"
)

// probeStage drives the real window.Watermarks and window.Rule the way the
// stage does (consume/consume.go, single/release.go) for one partition:
// a broker-set record time moves the frontier (capped at the wall clock), a
// producer-set one does not, a fetch at the high watermark moves it by its
// send time, and the releaser closes every window whose end is at or below
// the watermark. A record counts iff Rule.Decide lets it and its window is
// still open.
type probeStage struct {
	t    *testing.T
	wm   *window.Watermarks
	rule window.Rule
	next int64 // the first window not closed
}

const (
	probeSize = 60_000 // ms
	probeL    = 5_000  // allowed lateness, ms
)

func newProbe(t *testing.T, margin time.Duration) *probeStage {
	return &probeStage{
		t:    t,
		wm:   window.NewWatermarks([]int{0}, true, probeL*time.Millisecond, time.Second, time.Second, time.Now).WithClockSkewMargin(margin),
		rule: window.Rule{Arrival: true, SizeMs: probeSize, LatenessMs: probeL, MaxFutureMs: 3_600_000},
	}
}

// release closes the windows the watermark has passed.
func (s *probeStage) release() {
	wm, _, ok := s.wm.Current()
	for ok && s.next+probeSize <= wm {
		s.next += probeSize
	}
}

// read handles one record of event time ev and record time rec, read at
// wall time wall; broker: the record time is the broker's (LogAppendTime).
// It reports whether the record was counted.
func (s *probeStage) read(ev, rec, wall int64, broker bool) bool {
	if broker {
		s.wm.Observe(0, min(rec, wall))
	}
	s.release()
	w, reason := s.rule.Decide(ev, rec, 0)
	return reason == decode.ReasonNone && w >= s.next
}

// caughtUp is a fetch sent at wall time sent that came back at the high
// watermark.
func (s *probeStage) caughtUp(sent int64) {
	s.wm.CaughtUpAt(0, sent)
	s.release()
}

// TestProbeCreateTimeDependsOnLoad is the review's probe of issue 21 item 3:
// window [0, 60 s), L = 5 s, a record whose record time b is before the
// window's end + L but that is appended at end + 3L. With producer-set
// times (CreateTime, accepted only under window.record_times: producer)
// whether it counts depends on whether other users' backlog kept the
// partition from being read to its end before the append: counted with a
// backlog, late without. With broker times (LogAppendTime) the record time
// is the append time and the outcome is the same both ways.
func TestProbeCreateTimeDependsOnLoad(t *testing.T) {
	const end = probeSize
	const ev = end - 1_000     // its event time: in window [0, end)
	const b = end + probeL - 1 // its CreateTime: before end + L
	const appended = end + 3*probeL
	margin := config.DefaultClockSkewMargin.D()
	for _, tc := range []struct {
		name    string
		broker  bool // LogAppendTime: the record time is the append time
		backlog bool // other users' records keep the partition from its end until the record is read
		want    bool
	}{
		{"CreateTime, others' backlog: counted", false, true, true},
		{"CreateTime, no backlog: late", false, false, false},
		{"LogAppendTime, others' backlog: late", true, true, false},
		{"LogAppendTime, no backlog: late", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newProbe(t, margin)
			s.caughtUp(end - 10_000) // read to its end before the window ended
			rec := int64(b)
			if tc.broker {
				rec = appended
			}
			if !tc.backlog {
				// Polled at the end every 500 ms up to the append: each
				// fetch comes back at the high watermark.
				for sent := int64(end); sent < appended; sent += 500 {
					s.caughtUp(sent)
				}
			}
			// With a backlog every fetch ended below the high watermark
			// (no CaughtUpAt) until the record is read, at wall time
			// appended + 1 s.
			if got := s.read(ev, rec, appended+1_000, tc.broker); got != tc.want {
				t.Errorf("counted = %v, want %v (window closed up to %d)", got, tc.want, s.next)
			}
		})
	}
}

// TestProbeBrokerTimeRegression is the review's probe of issue 21 item 4:
// user a's record, broker time end + L + 100 ms, is read before a leader
// change to a broker whose clock is 1 s behind; user b's record after it
// carries broker time end + L − 900 ms, which the rule says counts. With the
// default clock-skew margin b counts whether or not a's record came first;
// with margin 0 a's record closes the window and b is dropped as late.
//
// The caught-up clause has the same problem when the stage host's clock
// runs ahead of the brokers' by more than L (here 6 s): a fetch sent at
// stage time end + 2L + 100 ms (broker time end + L − 900 ms) comes back at
// the end and closes the window with margin 0, and b, appended a moment
// later at broker time end + L − 800 ms, is late.
func TestProbeBrokerTimeRegression(t *testing.T) {
	const end = probeSize
	const wall = end + 10*probeL // the stage's clock at the reads: no cap
	aTime := int64(end + probeL + 100)
	def := config.DefaultClockSkewMargin.D()
	for _, tc := range []struct {
		name   string
		margin time.Duration
		withA  bool // a's record first (before the leader change)
		hostUp bool // a caught-up fetch sent by a stage clock 6 s ahead first
		bTime  int64
		want   bool
	}{
		{"default margin, a then b: b counts", def, true, false, end + probeL - 900, true},
		{"default margin, b alone: counts", def, false, false, end + probeL - 900, true},
		{"default margin, host clock 6 s ahead: b counts", def, false, true, end + probeL - 800, true},
		{"margin 0, a then b: b late", 0, true, false, end + probeL - 900, false},
		{"margin 0, b alone: counts", 0, false, false, end + probeL - 900, true},
		{"margin 0, host clock 6 s ahead: b late", 0, false, true, end + probeL - 800, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newProbe(t, tc.margin)
			if tc.withA {
				s.read(end-500, aTime, wall, true) // a: late by its own rule; moves the frontier
			}
			if tc.hostUp {
				s.caughtUp(end + 2*probeL + 100)
			}
			if w, r := s.rule.Decide(end-500, tc.bTime, 0); w != 0 || r != decode.ReasonNone {
				t.Fatalf("the rule must let b count in window 0: %d, %v", w, r)
			}
			if got := s.read(end-500, tc.bTime, wall, true); got != tc.want {
				t.Errorf("b counted = %v, want %v (windows closed up to %d)", got, tc.want, s.next)
			}
		})
	}
}
