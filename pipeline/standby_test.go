package pipeline_test

import (
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"

	"github.com/dpstage/stage/pipeline"
)

// TestStandbyTakesOver: a second instance sharing state.dir waits as a
// standby while the first is active, then takes over where it stopped: every
// window released exactly once, counts exact.
func TestStandbyTakesOver(t *testing.T) {
	h := newHarness(t)
	cfg := h.config("gaussian", 1e7)
	cfg.Kafka.SessionTimeout = cfg.Window.IdlePartitionTimeout * 2 // 1s
	evs := stream(4, 100)
	// The first flush event (2m01s) lands in window 2, which is released later.
	flushEv := event{User: "flush", At: base.Add(2*time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"}
	tr := computeTruth(append(append([]event{}, evs...), flushEv))
	var first, second []event
	for _, e := range evs {
		if e.At.Before(base.Add(2 * time.Minute)) {
			first = append(first, e)
		} else {
			second = append(second, e)
		}
	}
	h.produceEvents(first)
	active := h.start(cfg)
	h.produce(flush(base.Add(2*time.Minute + time.Second)))
	h.readOutput(2*(len(groups)+1), 60*time.Second, 0)

	standby := h.start(cfg)
	time.Sleep(1500 * time.Millisecond)
	if standby.stage.Readiness().StateLoaded {
		t.Fatal("the standby loaded the state while the active instance holds it")
	}
	active.stop(t)
	h.produceEvents(second)
	h.produce(flush(base.Add(4*time.Minute + time.Second)))
	out := h.readOutput(4*(len(groups)+1), 60*time.Second, 2*time.Second)
	if len(out.Releases) != 4*(len(groups)+1) {
		t.Fatalf("got %d releases, want %d", len(out.Releases), 4*(len(groups)+1))
	}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := key(r.Histogram, r.Group, ws)
		checkExact(t, k, r, tr[k])
	}
	for id, copies := range out.Raw {
		for _, c := range copies[1:] {
			if c != copies[0] {
				t.Errorf("release %s republished with different values", id)
			}
		}
	}
}

// TestFreshLedgerRefused: an instance whose state.dir is empty refuses to
// start when the output topic already holds releases (the state was lost or
// lives elsewhere), unless state.allow_fresh_ledger says it is deliberate.
func TestFreshLedgerRefused(t *testing.T) {
	h := newHarness(t)
	cfg := h.config("gaussian", 1e7)
	h.produceEvents(stream(1, 20))
	run := h.start(cfg)
	h.produce(flush(base.Add(time.Minute + time.Second)))
	h.readOutput(len(groups)+1, 60*time.Second, 0)
	run.stop(t)

	other := *cfg
	other.State.Dir = t.TempDir()
	st, err := pipeline.New(pipeline.Options{Config: &other})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	if err := st.Run(ctx); !errors.Is(err, pipeline.ErrStateLost) {
		t.Fatalf("run with an empty state.dir next to a used output topic: got %v, want ErrStateLost", err)
	}

	other.State.AllowFreshLedger = true
	st, err = pipeline.New(pipeline.Options{Config: &other})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := contextWithTimeout(3 * time.Second)
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
	released := func(withEarly bool) map[string]bool {
		h := newHarness(t)
		cfg := h.config("gaussian", 1e7)
		cfg.Window.Start = base.Add(time.Minute).Format(time.RFC3339)
		evs := stream(3, 30)[0:0]
		for _, e := range stream(3, 30) {
			if !e.At.Before(base.Add(time.Minute)) {
				evs = append(evs, e)
			}
		}
		if withEarly {
			evs = append([]event{{User: "victim", At: base.Add(30 * time.Second), Page: "home", Country: "US", Device: "mobile"}}, evs...)
		}
		h.produceEvents(evs)
		run := h.start(cfg)
		h.produce(flush(base.Add(3*time.Minute + time.Second)))
		out := h.readOutput(2*(len(groups)+1), 60*time.Second, 2*time.Second)
		got := map[string]bool{}
		for _, r := range out.Releases {
			got[r.Histogram+"/"+r.Group+"/"+r.WindowStart] = true
		}
		if withEarly && run.stage.Stats().Late.Load() < 1 {
			t.Errorf("the early event was not counted as late")
		}
		return got
	}
	a, b := released(false), released(true)
	if len(a) != 2*(len(groups)+1) || len(b) != len(a) {
		t.Fatalf("released %d windows×groups without the early event and %d with it, want %d both", len(a), len(b), 2*(len(groups)+1))
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
	h := newHarness(t)
	cfg := h.config("gaussian", 1e7)
	evs := stream(2, 30)
	tr := computeTruth(evs)
	far := time.Now().Add(48 * time.Hour)
	h.produce(kafka.Message{Key: []byte("forger"), Value: event{User: "forger", At: far, Page: "home", Country: "US", Device: "mobile"}.json()})
	h.produceEvents(evs)
	run := h.start(cfg)
	h.produce(flush(base.Add(2*time.Minute + time.Second)))
	out := h.readOutput(2*(len(groups)+1), 60*time.Second, time.Second)
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := key(r.Histogram, r.Group, ws)
		checkExact(t, k, r, tr[k])
	}
	if got := run.stage.Stats().Dropped()["time_too_far_ahead"]; got != 1 {
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
	h := newHarness(t)
	cfg := h.config("concentrated", 10)
	cfg.Window.Start = ""
	cfg.Window.Size = config.Duration(time.Second)
	cfg.Window.Watermark = config.WatermarkArrival
	cfg.Window.CloseAfter = config.Duration(200 * time.Millisecond)
	cfg.Privacy.Budget.Period = config.Duration(time.Minute)
	start := time.Now()
	h.start(cfg)
	out := h.readOutput(3*(len(groups)+1), 20*time.Second, 0)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("three windows took %v on a 1s schedule", took)
	}
	for _, r := range out.Releases {
		checkSimplex(t, r, r.Bins)
	}
}

// TestRestartAfterPruning: a restart that prunes old releases from the ledger
// (state.retain) still never releases a window twice: it resumes after the
// last window, and events for pruned windows are late.
func TestRestartAfterPruning(t *testing.T) {
	h := newHarness(t)
	cfg := h.config("gaussian", 1e7)
	h.produceEvents(stream(4, 20))
	run := h.start(cfg)
	h.produce(flush(base.Add(4*time.Minute + time.Second)))
	h.readOutput(4*(len(groups)+1), 60*time.Second, 0)
	run.stop(t)

	cfg.State.Retain = config.Duration(time.Minute)
	h.produce(kafka.Message{Key: []byte("old"), Value: event{User: "old", At: base.Add(30 * time.Second), Page: "home", Country: "US", Device: "mobile"}.json()})
	h.produceEvents(stream(6, 20)[len(stream(5, 20)):]) // window 5's events
	run = h.start(cfg)
	h.produce(flush(base.Add(6*time.Minute + time.Second)))
	out := h.readOutput(6*(len(groups)+1), 60*time.Second, 2*time.Second)
	if len(out.Raw) != 6*(len(groups)+1) {
		t.Fatalf("%d distinct releases, want %d", len(out.Raw), 6*(len(groups)+1))
	}
	for id, copies := range out.Raw {
		if len(copies) != 1 {
			t.Errorf("release %s published %d times", id, len(copies))
		}
	}
	if run.stage.Stats().Late.Load() < 1 {
		t.Error("the event for a pruned window was not late")
	}
	run.stop(t)
	// Pruned at the restart: windows 0 and 1 (more than 1m behind window 3).
	l, err := ledger.Open(cfg.State.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := 0
	_ = l.Units(func(*ledger.Unit) bool { n++; return true })
	if n != 4*2 {
		t.Errorf("ledger holds %d units after pruning, want 8 (windows 2–5)", n)
	}
}
