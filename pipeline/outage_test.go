package pipeline_test

import (
	"testing"
	"time"

	"github.com/dpstage/stage/internal/e2e"
)

// TestEndToEndBrokerOutage: the broker goes away mid-stream and comes back on
// the same port with its data. The stage retries (no crash, no release lost)
// and the final output equals what a run without the outage releases: with
// near-zero noise, exactly the true bounded histograms of every window, each
// released once.
func TestEndToEndBrokerOutage(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	cfg.Kafka.SessionTimeout = cfg.Window.IdlePartitionTimeout * 4 // 2s
	evs := e2e.Stream(6, 100)
	tr := e2e.ComputeTruth(evs)
	var first, second []e2e.Event
	for _, e := range evs {
		if e.At.Before(e2e.Base.Add(3 * time.Minute)) {
			first = append(first, e)
		} else {
			second = append(second, e)
		}
	}
	h.ProduceEvents(first)
	run := h.Start(cfg)
	h.ReadOutput(2*(len(e2e.Groups)+1), 60*time.Second, 0) // windows 0 and 1 released

	if err := h.Broker.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // longer than the session timeout
	if err := h.Broker.Restart(); err != nil {
		t.Fatal(err)
	}
	h.ProduceEvents(second)
	h.Produce(e2e.Flush(e2e.Base.Add(6*time.Minute + time.Second)))

	want := 6 * (len(e2e.Groups) + 1)
	out := h.ReadOutput(want, 90*time.Second, 2*time.Second)
	if len(out.Releases) != want {
		t.Fatalf("got %d releases after the outage, want %d", len(out.Releases), want)
	}
	for id, copies := range out.Raw {
		for _, c := range copies[1:] {
			if c != copies[0] {
				t.Errorf("release %s republished with different values", id)
			}
		}
	}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := e2e.Key(r.Histogram, r.Group, ws)
		e2e.CheckExact(t, k, r, tr[k])
	}
	_ = run
}

// TestEndToEndBrokerDownAtStart: the stage starts while the broker is away,
// retries (no crash), and releases everything once the broker is back.
func TestEndToEndBrokerDownAtStart(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	evs := e2e.Stream(2, 50)
	tr := e2e.ComputeTruth(evs)
	h.ProduceEvents(evs)
	if err := h.Broker.Stop(); err != nil {
		t.Fatal(err)
	}
	run := h.Start(cfg)
	time.Sleep(2 * time.Second)
	if run.Stage.Readiness().Ready() {
		t.Fatal("ready while the broker is down")
	}
	if err := h.Broker.Restart(); err != nil {
		t.Fatal(err)
	}
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	out := h.ReadOutput(2*(len(e2e.Groups)+1), 90*time.Second, time.Second)
	if len(out.Releases) != 2*(len(e2e.Groups)+1) {
		t.Fatalf("got %d releases, want %d", len(out.Releases), 2*(len(e2e.Groups)+1))
	}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := e2e.Key(r.Histogram, r.Group, ws)
		e2e.CheckExact(t, k, r, tr[k])
	}
}
