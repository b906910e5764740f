package distributed_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// TestSwitchBackSeeksByTime (issue 28 item 4): switching from the
// distributed mode back to the single-process one, the single-process
// mode reads each input partition from the first record whose time can
// count in the windows from the release log's resume window on (record
// time ≥ resume − events.max_future, window.watermark arrival), as the
// distributed mode's first start does — not from the earliest offset (on
// main it read the input's whole retention again: no record skipped). The
// window after the switch is still released exactly.
func TestSwitchBackSeeksByTime(t *testing.T) {
	t.Parallel() // its own broker and state; waits on the clock (CI time)
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	mk := func(single bool) *config.Config {
		cfg := distRunConfig(t, h, completeSize, completeLateness)
		cfg.Events.MaxFuture = config.Duration(time.Second)
		if single {
			cfg.Kafka.Distributed = config.Distributed{}
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfgA, cfgB := mk(false), mk(true)
	a := h.Start(cfgA)
	e2e.WaitFor(t, "a first release", 30*time.Second, func() bool { return a.Stage.Stats().Releases.Load() > 0 })
	// Events of an early window, released by the distributed mode.
	const old = 6
	wOld := time.Now().Truncate(completeSize).Add(completeSize)
	e2e.WaitPast(wOld.Add(50 * time.Millisecond))
	var evs []e2e.Event
	for i := range old {
		evs = append(evs, searchView(fmt.Sprintf("old-%d", i), wOld.Add(100*time.Millisecond)))
	}
	produceKeyed(t, h, evs)
	e2e.CheckExact(t, "the early window", releaseOf(t, h, wOld, 30*time.Second), []float64{0, old, 0, 0, 0})
	e2e.WaitPast(time.Now().Add(3 * completeSize)) // the resume window moves max_future past them
	a.Stop(t)

	w := time.Now().Truncate(completeSize).Add(completeSize)
	e2e.WaitPast(w.Add(50 * time.Millisecond))
	produceKeyed(t, h, []e2e.Event{searchView("u1", w.Add(100*time.Millisecond)), searchView("u2", w.Add(200*time.Millisecond))})
	e2e.WaitPast(w.Add(completeSize + completeLateness + 200*time.Millisecond))

	b := h.Start(cfgB)
	got := releaseOf(t, h, w, 30*time.Second)
	e2e.CheckExact(t, e2e.ReleaseKey(got), got, []float64{0, 2, 0, 0, 0})
	if n := b.Stage.Stats().FirstStartSkipped.Load(); n < old {
		t.Errorf("the single-process mode skipped %d input records older than its resume window − max_future, want at least the %d of the early window", n, old)
	}
}
