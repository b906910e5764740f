package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dpstage/stage/internal/e2e"
)

// addPartitions grows the harness's input topic to n partitions.
func addPartitions(h *e2e.Harness, n int32) {
	h.T.Helper()
	cl := txnClient(h, "")
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = "events-"+h.Name, n
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		h.T.Fatal(err)
	}
	if c := resp.Topics[0].ErrorCode; c != 0 {
		h.T.Fatalf("create partitions: error code %d", c)
	}
}

// TestPartitionsAddedMidStream (issue 16, 1b): the input topic grows from 4
// to 6 partitions while the stage runs, and events for open windows go to
// the new partitions at once, followed at once by an event that closes
// those windows (watermark event). No window may be released without the
// new partitions: the releaser holds windows while the topic has partitions
// the generation was not assigned, the next generation reads them, and
// every release is exact (no event silently lost, none late). The new
// partitions' events are all FR/search/desktop, which no other event is, so
// a release missing them is visibly wrong.
func TestPartitionsAddedMidStream(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	run := h.Start(cfg)
	// Window 0 only: no partition's watermark passes window 0 before the
	// flush, so window 0 is open when the partitions are added (an event
	// time watermark past it would make the new partitions' window-0
	// events rightly late).
	before := users("before", 700, 0, cycle(e2e.Pages), cycle([]string{"US", "DE"}), cycle(e2e.Devices))
	h.ProduceEvents(before)
	st := run.Stage.Stats()
	e2e.WaitFor(t, "the condition", 20*time.Second, func() bool { return st.Decoded.Load() >= int64(len(before)) })

	addPartitions(h, 6)
	added := users("added", 550, 0, fixed("search"), fixed("FR"), fixed("desktop"))
	added = append(added, users("added1", 550, 1, fixed("search"), fixed("FR"), fixed("desktop"))...)
	produceToParts(h, added, 4, 5)
	h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))
	checkReleases(h, append(before, added...))
	if l := st.Late.Load(); l != 0 {
		t.Errorf("%d events late: windows closed without the new partitions", l)
	}
}

// produceTo writes evs round-robin to the given partitions (kgo, which
// looks the topic's partitions up afresh).
func produceToParts(h *e2e.Harness, evs []e2e.Event, parts ...int32) {
	h.T.Helper()
	cl := txnClient(h, "", kgo.RecordPartitioner(kgo.ManualPartitioner()))
	recs := records(evs)
	for i, r := range recs {
		r.Partition = parts[i%len(parts)]
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		h.T.Fatal(err)
	}
}

// TestPartitionsAddedMidStreamArrival: the same with watermark arrival and
// wall-clock windows: partitions are added, and written to, just before a
// window's end, so that the window's arrival cutoff passes on the old
// partitions before a generation including the new ones could start.
// Every event counts in its own window, exactly; none is late.
func TestPartitionsAddedMidStreamArrival(t *testing.T) {
	t.Parallel()
	const size, lateness = 3 * time.Second, 200 * time.Millisecond
	h := e2e.New(t)
	cfg := h.ArrivalConfig(size, lateness)
	run := h.Start(cfg)
	st := run.Stage.Stats()
	// Start right after a window begins.
	e2e.WaitPast(time.Now().Truncate(size).Add(size + 50*time.Millisecond))
	before := h.ProduceBulk("before", 400)
	e2e.WaitFor(t, "the condition", 10*time.Second, func() bool { return st.Decoded.Load() >= int64(len(before)) })
	end := before[0].At.Truncate(size).Add(size)
	e2e.WaitPast(end.Add(-150 * time.Millisecond))
	addPartitions(h, 6)
	at := time.Now().Truncate(time.Millisecond)
	added := make([]e2e.Event, 600)
	for i := range added {
		added[i] = e2e.Event{User: fmt.Sprintf("added-%d", i), At: at, Page: "search", Country: "FR", Device: "desktop"}
	}
	produceToParts(h, added, 4, 5)
	e2e.WaitPast(at.Truncate(size).Add(size + 2*lateness + 3*time.Second))
	if l := st.Late.Load(); l != 0 {
		t.Errorf("%d events late: a window closed without the new partitions", l)
	}
	out := h.ReadOutput(0, 10*time.Second, time.Second)
	checkDevices(t, out, deviceTruth(append(before, added...), size))
}
