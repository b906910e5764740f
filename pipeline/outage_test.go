package pipeline_test

import (
	"testing"
	"time"
)

// TestEndToEndBrokerOutage: the broker goes away mid-stream and comes back on
// the same port with its data. The stage retries (no crash, no release lost)
// and the final output equals what a run without the outage releases: with
// near-zero noise, exactly the true bounded histograms of every window, each
// released once.
func TestEndToEndBrokerOutage(t *testing.T) {
	h := newHarness(t)
	cfg := h.config("gaussian", 1e7)
	cfg.Kafka.SessionTimeout = cfg.Window.IdlePartitionTimeout * 4 // 2s
	evs := stream(6, 100)
	tr := computeTruth(evs)
	var first, second []event
	for _, e := range evs {
		if e.At.Before(base.Add(3 * time.Minute)) {
			first = append(first, e)
		} else {
			second = append(second, e)
		}
	}
	h.produceEvents(first)
	run := h.start(cfg)
	h.readOutput(2*(len(groups)+1), 60*time.Second, 0) // windows 0 and 1 released

	if err := h.broker.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // longer than the session timeout
	if err := h.broker.Restart(); err != nil {
		t.Fatal(err)
	}
	h.produceEvents(second)
	h.produce(flush(base.Add(6*time.Minute + time.Second)))

	want := 6 * (len(groups) + 1)
	out := h.readOutput(want, 90*time.Second, 2*time.Second)
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
		k := key(r.Histogram, r.Group, ws)
		checkExact(t, k, r, tr[k])
	}
	_ = run
}

// TestEndToEndBrokerDownAtStart: the stage starts while the broker is away,
// retries (no crash), and releases everything once the broker is back.
func TestEndToEndBrokerDownAtStart(t *testing.T) {
	h := newHarness(t)
	cfg := h.config("gaussian", 1e7)
	evs := stream(2, 50)
	tr := computeTruth(evs)
	h.produceEvents(evs)
	if err := h.broker.Stop(); err != nil {
		t.Fatal(err)
	}
	run := h.start(cfg)
	time.Sleep(2 * time.Second)
	if run.stage.Readiness().Ready() {
		t.Fatal("ready while the broker is down")
	}
	if err := h.broker.Restart(); err != nil {
		t.Fatal(err)
	}
	h.produce(flush(base.Add(2*time.Minute + time.Second)))
	out := h.readOutput(2*(len(groups)+1), 90*time.Second, time.Second)
	if len(out.Releases) != 2*(len(groups)+1) {
		t.Fatalf("got %d releases, want %d", len(out.Releases), 2*(len(groups)+1))
	}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := key(r.Histogram, r.Group, ws)
		checkExact(t, k, r, tr[k])
	}
}
