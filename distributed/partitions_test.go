package distributed_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/pipeline"
)

// TestDistPartitionsAdded (issue 22 item 2, "partitions added"): after
// partitions are added to the input topic, a distributed stage on the old
// internal topics refuses with ErrConfigChanged and a message that names
// the recovery: the release log pinned (state.ledger_topic) and a new
// internal_topic_prefix. Started so, it keeps the period's spend (restored
// from the release log) and releases the next window exactly, with the
// events of the added partitions.
func TestDistPartitionsAdded(t *testing.T) {
	t.Parallel()
	const size, lateness = 2 * time.Second, 300 * time.Millisecond
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	cfg := distRunConfig(t, h, size, lateness)
	per := int64(len(e2e.Groups) + 1)
	produceWindow := func() ([]e2e.Event, time.Time) {
		at := time.Now().Truncate(size).Add(size)
		e2e.WaitPast(at.Add(50 * time.Millisecond))
		batch := e2e.StreamFrom(at.Add(50*time.Millisecond), size/2, 1, 60)
		// A transport of its own (produceWith): kafka-go's default one
		// caches the topic's metadata (4 partitions) for seconds.
		produceWith(t, h, batch, kafka.Murmur2Balancer{Consistent: true})
		return batch, at
	}
	first := h.Start(cfg)
	time.Sleep(time.Second) // the groups settle
	produceWindow()
	e2e.WaitFor(t, "the first window's releases", 30*time.Second, func() bool { return first.Stage.Stats().Releases.Load() >= per })
	spent := 0.0
	for _, b := range first.Stage.Budget() {
		spent += b.SpentEpsilon
	}
	if spent <= 0 {
		t.Fatalf("no spend before the partitions were added: %+v", first.Stage.Budget())
	}

	addInputPartitions(t, h, 2)
	// The running stage stops (a bounder sees the count change), and a
	// new one refuses at its start (the progress topic has 4 partitions).
	for i, r := range []*e2e.Running{first, nil} {
		if r == nil {
			r = h.Start(cfg)
		}
		select {
		case err := <-r.Done():
			r.Cancel()
			t.Logf("%d: %v", i, err)
			if !errors.Is(err, pipeline.ErrConfigChanged) {
				t.Fatalf("%d: got %v, want ErrConfigChanged", i, err)
			}
			for _, want := range []string{"has 6 partitions", "bounded among 4", "state.ledger_topic: " + cfg.State.LedgerTopic,
				"kafka.distributed.internal_topic_prefix: " + cfg.Kafka.GroupID + ".p6."} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%d: the refusal does not say %q", i, want)
				}
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%d: a stage on the old internal topics still runs 20s after partitions were added", i)
		}
	}

	// The recovery the message gives.
	cfg.Kafka.Distributed.InternalTopicPrefix = cfg.Kafka.GroupID + ".p6."
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	again := h.Start(cfg)
	e2e.WaitFor(t, "the recovered stage to release", 30*time.Second, func() bool { return again.Stage.Readiness().Releasing })
	kept := 0.0
	for _, b := range again.Stage.Budget() {
		kept += b.SpentEpsilon
	}
	if kept < spent {
		t.Errorf("the period's spend after the recovery %v, before %v", kept, spent)
	}
	evs, at := produceWindow()
	parts := map[int]bool{}
	for _, e := range evs {
		parts[e2e.Murmur2Partition(e.User, 6)] = true
	}
	if !parts[4] && !parts[5] {
		t.Fatal("no event on an added partition: the test does not test them")
	}
	tr := e2e.ComputeTruthIn(evs, size, 1, 1, 0)
	e2e.WaitPast(at.Add(size + lateness + 500*time.Millisecond))
	// The output holds the first stage's releases of many windows: wait
	// for this window's (a loaded machine releases it late), not a count.
	out := waitReleased(t, h, at, int(per), 30*time.Second)
	e2e.CheckWindowsExact(t, out.Releases, tr, at)
}
