package distributed_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// distRunConfig is the harness's arrival config (near-noiseless Gaussian) in
// the distributed mode: internal topics created by the stage, the release
// log on Kafka, 1s sessions.
func distRunConfig(t *testing.T, h *e2e.Harness, size, lateness time.Duration) *config.Config {
	t.Helper()
	cfg := h.ArrivalConfig(size, lateness)
	cfg.Kafka.SessionTimeout = config.Duration(time.Second)
	cfg.Kafka.Distributed = config.Distributed{Enabled: true, Partitioner: config.PartitionerMurmur2, CreateTopics: true}
	cfg.State.Ledger, cfg.State.LedgerTopic = config.LedgerKafka, "ledger-"+h.Name
	cfg.Contribution.MaxTrackedUsers = 0
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestDistributedThreeInstances: three stages in the distributed mode
// share the input's 4 partitions; one of them (whichever) is soft-stopped
// after two windows, the others go on. Every (histogram, group, window) of
// the stream is released, exactly the bounded truth worked out from the
// events alone (near-noiseless Gaussian), copies of a release_id are
// identical, and no event is late or dropped as wrong_partition.
func TestDistributedThreeInstances(t *testing.T) {
	t.Parallel() // its own broker and state; waits on the clock (CI time)
	const size, lateness = 2 * time.Second, 300 * time.Millisecond
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	cfg := distRunConfig(t, h, size, lateness)
	var evs []e2e.Event
	var first, last time.Time
	produceWindow := func() {
		at := time.Now().Truncate(size).Add(size)
		e2e.WaitPast(at.Add(50 * time.Millisecond))
		batch := e2e.StreamFrom(at.Add(50*time.Millisecond), size/2, 1, 100)
		produceKeyed(t, h, batch)
		evs = append(evs, batch...)
		if first.IsZero() {
			first = at
		}
		last = at
	}
	stages := []*e2e.Running{h.Start(cfg), h.Start(cfg), h.Start(cfg)}
	per := int64(len(e2e.Groups) + 1)
	released := func() int64 {
		n := int64(0)
		for _, s := range stages {
			n += s.Stage.Stats().Releases.Load()
		}
		return n
	}
	time.Sleep(2 * time.Second) // the groups settle
	produceWindow()
	produceWindow()
	e2e.WaitFor(t, "the first two windows' releases", 60*time.Second, func() bool { return released() >= 2*per })
	stages[0].Stop(t)
	produceWindow()
	produceWindow()
	e2e.WaitPast(last.Add(size + lateness + 500*time.Millisecond))
	tr := e2e.ComputeTruthIn(evs, size, 1, 1, 0)
	n := int(last.Sub(first)/size) + 1
	out := h.ReadOutput(n*int(per), 60*time.Second, 2*time.Second)
	e2e.CheckWindowsExact(t, out.Releases, tr, e2e.WindowsFrom(first, last, size)...)
	for id, copies := range out.Raw {
		for _, c := range copies[1:] {
			if c != copies[0] {
				t.Errorf("release %s republished with different values", id)
			}
		}
	}
	// The consumer group's committed offsets show the bounders' progress
	// (informational: lag tools read them).
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Broker.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e2e.WaitFor(t, "the group's committed offsets of every input partition", 10*time.Second, func() bool {
		offs, err := kadm.NewClient(cl).FetchOffsets(ctx, cfg.Kafka.GroupID)
		if err != nil {
			t.Fatal(err)
		}
		for p := range 4 {
			if o, ok := offs.Lookup(h.Input(), int32(p)); !ok || o.At <= 0 {
				return false
			}
		}
		return true
	})
	for i, s := range stages {
		st := s.Stage.Stats()
		if late := st.Late.Load(); late != 0 {
			t.Errorf("stage %d: %d events late", i, late)
		}
		if d := st.Dropped()["wrong_partition"]; d != 0 {
			t.Errorf("stage %d: %d events dropped as wrong_partition", i, d)
		}
	}
}
