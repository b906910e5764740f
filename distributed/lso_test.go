package distributed_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// TestDistPartialsLSOHeldAlert (issue 22 item 2, hard-coded transaction
// timeout): a transaction left open on the partials topic — a bounder
// hanging, with a broker that has not aborted it — holds its last stable
// offset and every release. The releaser reports the hold: a gauge of how
// long, and, past kafka.distributed.transaction_timeout (here 1s), one
// counted hold. Committing the transaction ends it.
func TestDistPartialsLSOHeldAlert(t *testing.T) {
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	cfg := distRunConfig(t, h, 2*time.Second, 300*time.Millisecond)
	cfg.Kafka.Distributed.TransactionTimeout = config.Duration(time.Second)
	r := h.Start(cfg)
	e2e.WaitFor(t, "the releaser to lead", 30*time.Second, func() bool { return r.Stage.Readiness().Releasing })
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Broker.Addr()), kgo.TransactionalID("hang-"+h.Name),
		kgo.TransactionTimeout(time.Minute), kgo.DefaultProduceTopic(cfg.Kafka.PartialsTopic()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	// Not a partial: the releaser would never read it (the test commits
	// only after the stage stopped reading, and the record is aborted).
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("hang")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	st := r.Stage.Stats()
	e2e.WaitFor(t, "the hold to be counted", 15*time.Second, func() bool { return st.PartialsLSOHolds.Load() == 1 })
	if ms := st.PartialsLSOHeldMs.Load(); ms < 1000 {
		t.Errorf("held %dms when counted, timeout 1s", ms)
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	e2e.WaitFor(t, "the hold to end", 10*time.Second, func() bool { return st.PartialsLSOHeldMs.Load() == 0 })
	if n := st.PartialsLSOHolds.Load(); n != 1 {
		t.Errorf("%d holds counted, want 1", n)
	}
}
