package pipeline_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// TestFailingPartitionHoldsWindows (issue 16, 1c): with watermark event and
// an idle timeout (300ms) shorter than the fetch retry back-off (500ms), one
// partition's fetches fail (NOT_LEADER_FOR_PARTITION, as during a leader
// move) for 3 s while events for window 1 are written to it (it had
// delivered window 0's) and an event that would close windows 0 and 1
// reaches another partition. The failing partition is not idle — it has
// unread events — so no window closes until they are read, and the
// releases are exact with nothing late.
func TestFailingPartitionHoldsWindows(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	cfg.Window.IdlePartitionTimeout = config.Duration(300 * time.Millisecond)
	run := h.Start(cfg)
	st := run.Stage.Stats()
	before := users("before", 400, 0, cycle(e2e.Pages), cycle([]string{"US", "DE"}), cycle(e2e.Devices))
	h.ProduceEvents(before)
	e2e.WaitFor(t, "the condition", 20*time.Second, func() bool { return st.Decoded.Load() >= int64(len(before)) })

	flushPart := (&kafka.Hash{}).Balance(kafka.Message{Key: []byte("flush")}, 0, 1, 2, 3)
	failPart := int32((flushPart + 1) % 4)
	fault := h.Broker.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "events-" + h.Name,
		Partitions: []int32{failPart}, Err: kerr.NotLeaderForPartition, Count: -1})
	// The stage has seen the failure (a fetch at the end is outstanding for
	// up to the max wait first).
	e2e.WaitFor(t, "the condition", 10*time.Second, func() bool { return fault.Hits() >= 2 })
	held := users("held", 600, 1, fixed("search"), fixed("FR"), fixed("desktop"))
	produceToParts(h, held, failPart)
	h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))
	time.Sleep(3 * time.Second)
	if r := st.Releases.Load(); r != 0 {
		t.Errorf("%d release messages while a partition with unread events was failing", r)
	}
	fault.Remove()
	checkReleases(h, append(before, held...))
	if l := st.Late.Load(); l != 0 {
		t.Errorf("%d events late: the failing partition counted as idle", l)
	}
}

// TestLeaderMovesLoseNothing (issue 16, 1c, as measured there): with an
// idle timeout (500ms) equal to the fetch retry back-off, partition 1's
// leadership moves to the other broker right after a quiet second, events
// for the open window are written to it at once, and an event of a later
// window reaches partition 2 — four times. Partition 1's next fetch fails
// (NOT_LEADER_FOR_PARTITION) and it waits out the back-off: it has unread
// events, so it is not idle, and the windows wait for it. Every release is
// exact and no event is late.
func TestLeaderMovesLoseNothing(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	c := h.Broker.Cluster()
	node, _, err := c.AddNode(-1, 0)
	if err != nil {
		t.Fatal(err)
	}
	topic := "events-" + h.Name
	for p := int32(0); p < 4; p++ {
		if err := c.MoveTopicPartition(topic, p, 0); err != nil {
			t.Fatal(err)
		}
	}
	run := h.Start(cfg)
	st := run.Stage.Stats()
	all := users("first", 400, 0, cycle(e2e.Pages), cycle([]string{"US", "DE"}), cycle(e2e.Devices))
	h.ProduceEvents(all)
	e2e.WaitFor(t, "the condition", 20*time.Second, func() bool { return st.Decoded.Load() >= int64(len(all)) })
	for r := range 4 {
		time.Sleep(time.Second) // every partition silent for twice the idle timeout
		to := node
		if r%2 == 1 {
			to = 0
		}
		if err := c.MoveTopicPartition(topic, 1, to); err != nil {
			t.Fatal(err)
		}
		moved := users(fmt.Sprintf("moved%d", r), 150, r+1, fixed("search"), fixed("FR"), fixed("desktop"))
		produceToParts(h, moved, 1)
		all = append(all, moved...)
		tick := users(fmt.Sprintf("tick%d", r), 1, r+2, fixed("home"), fixed("US"), fixed("mobile"))
		produceToParts(h, tick, 2)
		all = append(all, tick...)
	}
	h.Produce(e2e.Flush(e2e.Base.Add(7*time.Minute + time.Second)))
	out := h.ReadOutput(5*(len(e2e.Groups)+1), 60*time.Second, time.Second)
	tr := e2e.ComputeTruth(all)
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		if ws.Before(e2e.Base.Add(5 * time.Minute)) {
			k := e2e.Key(r.Histogram, r.Group, ws)
			e2e.CheckExact(t, k, r, tr[k])
		}
	}
	if l := st.Late.Load(); l != 0 {
		t.Errorf("%d events late after leader moves", l)
	}
}
