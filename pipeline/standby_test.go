package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger"

	"github.com/dpstage/stage/pipeline"
)

// TestStandbyTakesOver: a second instance sharing state.dir waits as a
// standby while the first is active, then takes over where it stopped: every
// window released exactly once, counts exact.
func TestStandbyTakesOver(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	cfg.Kafka.SessionTimeout = cfg.Window.IdlePartitionTimeout * 2 // 1s
	evs := e2e.Stream(4, 100)
	// The first flush event (2m01s) lands in window 2, which is released later.
	flushEv := e2e.Event{User: "flush", At: e2e.Base.Add(2*time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"}
	tr := e2e.ComputeTruth(append(append([]e2e.Event{}, evs...), flushEv))
	var first, second []e2e.Event
	for _, e := range evs {
		if e.At.Before(e2e.Base.Add(2 * time.Minute)) {
			first = append(first, e)
		} else {
			second = append(second, e)
		}
	}
	h.ProduceEvents(first)
	active := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	h.ReadOutput(2*(len(e2e.Groups)+1), 60*time.Second, 0)

	standby := h.Start(cfg)
	time.Sleep(1500 * time.Millisecond)
	if standby.Stage.Readiness().StateLoaded {
		t.Fatal("the standby loaded the state while the active instance holds it")
	}
	active.Stop(t)
	h.ProduceEvents(second)
	h.Produce(e2e.Flush(e2e.Base.Add(4*time.Minute + time.Second)))
	out := h.ReadOutput(4*(len(e2e.Groups)+1), 60*time.Second, 2*time.Second)
	if len(out.Releases) != 4*(len(e2e.Groups)+1) {
		t.Fatalf("got %d releases, want %d", len(out.Releases), 4*(len(e2e.Groups)+1))
	}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := e2e.Key(r.Histogram, r.Group, ws)
		e2e.CheckExact(t, k, r, tr[k])
	}
	for id, copies := range out.Raw {
		for _, c := range copies[1:] {
			if c != copies[0] {
				t.Errorf("release %s republished with different values", id)
			}
		}
	}
}

// TestStandbyTakesOverArrival is TestStandbyTakesOver with watermark
// arrival (the default): windows of 2s on the wall clock, each window's
// events written at its start with their event times as record times;
// windows close when the partitions are read to their end. Every window
// from the first written to the last is released exactly once, counts
// exact (empty windows uniform), whichever instance released it.
func TestStandbyTakesOverArrival(t *testing.T) {
	t.Parallel()
	const size, lateness = 2 * time.Second, 300 * time.Millisecond
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	cfg := h.ArrivalConfig(size, lateness)
	cfg.Kafka.SessionTimeout = config.Duration(time.Second)
	var evs []e2e.Event
	var first, last time.Time
	// produceWindow writes one window of events (100 users, some with a
	// second event, bounded away) just after the next window starts.
	produceWindow := func() {
		at := time.Now().Truncate(size).Add(size)
		e2e.WaitPast(at.Add(50 * time.Millisecond))
		batch := e2e.StreamFrom(at.Add(50*time.Millisecond), size/2, 1, 100)
		h.ProduceEvents(batch)
		evs = append(evs, batch...)
		if first.IsZero() {
			first = at
		}
		last = at
	}
	active := h.Start(cfg)
	e2e.WaitFor(t, "the active instance to be assigned", 30*time.Second, func() bool { return active.Stage.Readiness().Assigned })
	produceWindow()
	produceWindow()
	e2e.WaitFor(t, "the active instance to release both windows", 30*time.Second, func() bool {
		return active.Stage.Stats().Releases.Load() >= int64(2*(len(e2e.Groups)+1))
	})

	standby := h.Start(cfg)
	time.Sleep(1500 * time.Millisecond)
	if standby.Stage.Readiness().StateLoaded {
		t.Fatal("the standby loaded the state while the active instance holds it")
	}
	active.Stop(t)
	e2e.WaitFor(t, "the standby to be assigned", 30*time.Second, func() bool { return standby.Stage.Readiness().Assigned })
	produceWindow()
	produceWindow()
	e2e.WaitPast(last.Add(size + lateness + 500*time.Millisecond))
	tr := e2e.ComputeTruthIn(evs, size, 1, 1, 0)
	n := int(last.Sub(first)/size) + 1
	out := h.ReadOutput(n*(len(e2e.Groups)+1), 60*time.Second, time.Second)
	e2e.CheckWindowsExact(t, out.Releases, tr, e2e.WindowsFrom(first, last, size)...)
	for id, copies := range out.Raw {
		for _, c := range copies[1:] {
			if c != copies[0] {
				t.Errorf("release %s republished with different values", id)
			}
		}
	}
	if late := standby.Stage.Stats().Late.Load(); late != 0 {
		t.Errorf("%d events late", late)
	}
}

// TestFreshLedgerRefused: an instance whose state.dir is empty refuses to
// start when the output topic already holds releases (the state was lost or
// lives elsewhere), unless state.allow_fresh_ledger says it is deliberate.
func TestFreshLedgerRefused(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	h.ProduceEvents(e2e.Stream(1, 20))
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(time.Minute + time.Second)))
	h.ReadOutput(len(e2e.Groups)+1, 60*time.Second, 0)
	run.Stop(t)

	other := *cfg
	other.State.Dir = t.TempDir()
	st, err := pipeline.New(pipeline.Options{Config: &other})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.Run(ctx); !errors.Is(err, pipeline.ErrStateLost) {
		t.Fatalf("run with an empty state.dir next to a used output topic: got %v, want ErrStateLost", err)
	}

	other.State.AllowFreshLedger = true
	st, err = pipeline.New(pipeline.Options{Config: &other})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	if err := st.Run(ctx2); err != nil {
		t.Fatalf("run with state.allow_fresh_ledger: %v", err)
	}
}

// TestFirstWindowIsNotChosenByData: which windows are released never depends
// on the data. An event before the configured first window (window.start) —
// a user who happens to be early, or a forged ts — does not make the stage
// release an earlier window: it is late, and the released windows are the
// same with or without it.
func TestFirstWindowIsNotChosenByData(t *testing.T) {
	t.Parallel()
	released := func(withEarly bool) map[string]bool {
		h := e2e.New(t)
		cfg := h.Config("gaussian", 1e7)
		cfg.Window.Start = e2e.Base.Add(time.Minute).Format(time.RFC3339)
		evs := e2e.Stream(3, 30)[0:0]
		for _, e := range e2e.Stream(3, 30) {
			if !e.At.Before(e2e.Base.Add(time.Minute)) {
				evs = append(evs, e)
			}
		}
		if withEarly {
			evs = append([]e2e.Event{{User: "victim", At: e2e.Base.Add(30 * time.Second), Page: "home", Country: "US", Device: "mobile"}}, evs...)
		}
		h.ProduceEvents(evs)
		run := h.Start(cfg)
		h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))
		out := h.ReadOutput(2*(len(e2e.Groups)+1), 60*time.Second, 2*time.Second)
		got := map[string]bool{}
		for _, r := range out.Releases {
			got[r.Histogram+"/"+r.Group+"/"+r.WindowStart] = true
		}
		if withEarly && run.Stage.Stats().Late.Load() < 1 {
			t.Errorf("the early event was not counted as late")
		}
		return got
	}
	a, b := released(false), released(true)
	if len(a) != 2*(len(e2e.Groups)+1) || len(b) != len(a) {
		t.Fatalf("released %d windows×groups without the early event and %d with it, want %d both", len(a), len(b), 2*(len(e2e.Groups)+1))
	}
	for k := range a {
		if !b[k] {
			t.Errorf("%s released without the early event but not with it", k)
		}
	}
}

// TestForgedFutureTimestamp: an event stamped far ahead of the wall clock is
// dropped (time_too_far_ahead) and does not close the open windows early:
// later on-time events still count.
func TestForgedFutureTimestamp(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	evs := e2e.Stream(2, 30)
	tr := e2e.ComputeTruth(evs)
	far := time.Now().Add(48 * time.Hour)
	h.Produce(kafka.Message{Key: []byte("forger"), Value: e2e.Event{User: "forger", At: far, Page: "home", Country: "US", Device: "mobile"}.JSON()})
	h.ProduceEvents(evs)
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	out := h.ReadOutput(2*(len(e2e.Groups)+1), 60*time.Second, time.Second)
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := e2e.Key(r.Histogram, r.Group, ws)
		e2e.CheckExact(t, k, r, tr[k])
	}
	if got := run.Stage.Stats().Dropped()["time_too_far_ahead"]; got != 1 {
		t.Errorf("time_too_far_ahead = %d, want 1", got)
	}
}

// TestWallClockClosing: with watermark arrival (here with close_after, the
// older name of its lateness) windows close on the wall clock's schedule
// when there is no input at all (empty partitions read to their end advance
// with the wall clock), and every
// declared (histogram, group) is still released for each window as its time
// comes, from the prior.
func TestWallClockClosing(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("concentrated", 10)
	cfg.Window.Start = ""
	cfg.Window.Size = config.Duration(time.Second)
	cfg.Window.Watermark = config.WatermarkArrival
	cfg.Window.CloseAfter = config.Duration(200 * time.Millisecond)
	cfg.Privacy.Budget.Period = config.Duration(time.Minute)
	start := time.Now()
	h.Start(cfg)
	out := h.ReadOutput(3*(len(e2e.Groups)+1), 20*time.Second, 0)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("three windows took %v on a 1s schedule", took)
	}
	for _, r := range out.Releases {
		e2e.CheckSimplex(t, r, r.Bins)
	}
}

// TestRestartAfterPruning: a restart that prunes old releases from the ledger
// (state.retain) still never releases a window twice: it resumes after the
// last window, and events for pruned windows are late.
func TestRestartAfterPruning(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	h.ProduceEvents(e2e.Stream(4, 20))
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(4*time.Minute + time.Second)))
	h.ReadOutput(4*(len(e2e.Groups)+1), 60*time.Second, 0)
	run.Stop(t)

	cfg.State.Retain = config.Duration(time.Minute)
	h.Produce(kafka.Message{Key: []byte("old"), Value: e2e.Event{User: "old", At: e2e.Base.Add(30 * time.Second), Page: "home", Country: "US", Device: "mobile"}.JSON()})
	h.ProduceEvents(e2e.Stream(6, 20)[len(e2e.Stream(5, 20)):]) // window 5's events
	run = h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(6*time.Minute + time.Second)))
	out := h.ReadOutput(6*(len(e2e.Groups)+1), 60*time.Second, 2*time.Second)
	if len(out.Raw) != 6*(len(e2e.Groups)+1) {
		t.Fatalf("%d distinct releases, want %d", len(out.Raw), 6*(len(e2e.Groups)+1))
	}
	for id, copies := range out.Raw {
		if len(copies) != 1 {
			t.Errorf("release %s published %d times", id, len(copies))
		}
	}
	if run.Stage.Stats().Late.Load() < 1 {
		t.Error("the event for a pruned window was not late")
	}
	run.Stop(t)
	// Pruned at the restart (windows 0 and 1, more than 1m behind window 3)
	// and while running (pruneRunning: windows 2 and 3, more than 1m
	// behind window 5): windows 4 and 5 remain, both histograms.
	l, err := ledger.Open(cfg.State.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := 0
	_ = l.Units(func(u *ledger.Unit) bool {
		n++
		if w := u.WindowStart - e2e.Base.UnixMilli(); w < 4*time.Minute.Milliseconds() {
			t.Errorf("ledger still holds the unit of window %d ms after the base, behind the retention", w)
		}
		return true
	})
	if n != 2*2 {
		t.Errorf("ledger holds %d units after pruning, want 4 (windows 4–5)", n)
	}
}
