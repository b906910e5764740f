package pipeline_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestSoftStopDrainsRelease: a soft stop while a release is being published
// (the output topic refuses writes for a while) lets the publish finish
// within the drain timeout and commits its offsets, so the next start does
// not re-read the released windows' events (they would be dropped as late:
// counted twice, once in the release and once as late). The partition
// consumers, which exit first on a soft stop, used to end kafka-go's
// generation and with it the publish.
func TestSoftStopDrainsRelease(t *testing.T) {
	h := newHarness(t)
	cfg := h.config("gaussian", 1e7)
	evs := stream(2, 50)
	h.produceEvents(evs)
	run := h.start(cfg)
	st := run.stage.Stats()
	// Window 0 closes once every partition has delivered window 1's
	// events; window 1 waits for the flush.
	per := int64(len(groups) + 1)
	waitFor(t, 20*time.Second, func() bool { return st.Releases.Load() >= per })
	fault := h.broker.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "out-" + h.name,
		Err: kerr.NotLeaderForPartition, Count: -1})
	h.produce(flush(base.Add(2*time.Minute + time.Second)))
	waitFor(t, 20*time.Second, func() bool { return fault.Hits() >= 1 }) // window 1 recorded, publishing
	stopped := make(chan struct{})
	go func() { run.stop(t); close(stopped) }()
	time.Sleep(500 * time.Millisecond)
	fault.Remove() // the publish goes through within the drain timeout (5 s)
	<-stopped
	if r := st.Releases.Load(); r != 2*per {
		t.Fatalf("%d release messages acknowledged before the stop, want %d", r, 2*per)
	}

	run = h.start(cfg)
	time.Sleep(3 * time.Second)
	if l := run.stage.Stats().Late.Load(); l != 0 {
		t.Errorf("%d events of released windows re-read as late after the restart: the stop did not commit them", l)
	}
}
