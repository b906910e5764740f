package distributed_test

import (
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/release"
)

// TestDistFreshStartCountsOpenLongWindow (the privacy review's probe): a
// partition without progress (here a new internal_topic_prefix over the
// same release log) starts counting at the start of the longest histogram
// window open at the log's resume window (countFrom), so it must also read
// the input from there (minus events.max_future), not from the resume
// window: two users' views at the 8 s window's start, counted by the old
// deployment, which stopped 3 s into that window, are counted again by the
// new one and released exactly (before the fix: skipped as "could not
// count", the long window released uniform with full coverage).
func TestDistFreshStartCountsOpenLongWindow(t *testing.T) {
	t.Parallel() // its own broker and state; waits on the clock (CI time)
	const long = 8 * time.Second
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	mk := func(p string) *config.Config {
		cfg := distRunConfig(t, h, completeSize, completeLateness)
		cfg.Kafka.Distributed.InternalTopicPrefix = p
		cfg.Events.MaxFuture = config.Duration(time.Second)
		for _, hc := range cfg.Histograms {
			if hc.Name == "pages" {
				c := hc
				c.Name, c.Window = "pages8", config.Duration(long)
				cfg.Histograms = append(cfg.Histograms, c)
				break
			}
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfgA, cfgB := mk("a."), mk("b.")
	a := h.Start(cfgA)
	e2e.WaitFor(t, "a first release", 30*time.Second, func() bool { return a.Stage.Stats().Releases.Load() > 0 })
	l0 := time.Now().Truncate(long).Add(long)
	e2e.WaitPast(l0.Add(50 * time.Millisecond))
	produceKeyed(t, h, []e2e.Event{searchView("u1", l0.Add(100*time.Millisecond)), searchView("u2", l0.Add(200*time.Millisecond))})
	e2e.WaitPast(l0.Add(3*time.Second + completeLateness + 500*time.Millisecond))
	a.Stop(t)
	b := h.Start(cfgB)
	_ = b
	var got release.Release
	e2e.WaitFor(t, "the long release", 40*time.Second, func() bool {
		out := h.ReadOutput(1, 2*time.Second, time.Second)
		for _, r := range out.Releases {
			if ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart); ws.Equal(l0) && r.Histogram == "pages8" && r.Group == e2e.Groups[0] {
				got = r
				return true
			}
		}
		return false
	})
	t.Logf("pages8 %s: %v coverage %+v skipped %d", got.WindowStart, got.Probabilities, got.Coverage, b.Stage.Stats().FirstStartSkipped.Load())
	e2e.CheckExact(t, e2e.ReleaseKey(got), got, []float64{0, 2, 0, 0, 0}) // u1 and u2, one search each
}
