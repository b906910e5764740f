package pipeline_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dpstage/stage/internal/e2e"
)

// TestSoftStopDrainsRelease: a soft stop while a release is being published
// (the output topic refuses writes for a while) lets the publish finish
// within the drain timeout and commits its offsets, so the next start does
// not re-read the released windows' events (they would be dropped as late:
// counted twice, once in the release and once as late). The partition
// consumers, which exit first on a soft stop, used to end kafka-go's
// generation and with it the publish.
func TestSoftStopDrainsRelease(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	evs := e2e.Stream(2, 50)
	h.ProduceEvents(evs)
	run := h.Start(cfg)
	st := run.Stage.Stats()
	// Window 0 closes once every partition has delivered window 1's
	// events; window 1 waits for the flush.
	per := int64(len(e2e.Groups) + 1)
	e2e.WaitFor(t, "the condition", 20*time.Second, func() bool { return st.Releases.Load() >= per })
	fault := h.Broker.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "out-" + h.Name,
		Err: kerr.NotLeaderForPartition, Count: -1})
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	e2e.WaitFor(t, "the condition", 20*time.Second, func() bool { return fault.Hits() >= 1 }) // window 1 recorded, publishing
	stopped := make(chan struct{})
	go func() { run.Stop(t); close(stopped) }()
	time.Sleep(500 * time.Millisecond)
	fault.Remove() // the publish goes through within the drain timeout (5 s)
	<-stopped
	if r := st.Releases.Load(); r != 2*per {
		t.Fatalf("%d release messages acknowledged before the stop, want %d", r, 2*per)
	}

	run = h.Start(cfg)
	time.Sleep(3 * time.Second)
	if l := run.Stage.Stats().Late.Load(); l != 0 {
		t.Errorf("%d events of released windows re-read as late after the restart: the stop did not commit them", l)
	}
}
