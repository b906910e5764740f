package distributed

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/dpstage/stage/partial/kafkapartial"
)

// watchPartialsLSO follows the partials topic's last stable offset while
// this instance releases (owner: lead; it ends with ctx). An open
// transaction of a bounder holds it — and so every release, since the
// releaser reads read_committed — until it commits or the broker aborts it
// at kafka.distributed.transaction_timeout. The time it has been held at
// one offset below the high watermark is the gauge
// Stats.PartialsLSOHeldMs; a hold longer than the transaction timeout (a
// hanging bounder transaction the broker has not aborted: the broker
// checks for timed-out transactions every
// transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by
// default) is logged as an error once per hold and counted in
// Stats.PartialsLSOHolds.
func (s *stage) watchPartialsLSO(ctx context.Context, cl *kgo.Client) {
	timeout := s.Cfg.Kafka.Distributed.Txn()
	topic := s.Cfg.Kafka.PartialsTopic()
	t := time.NewTicker(min(time.Second, timeout/4))
	defer t.Stop()
	defer s.Stats.PartialsLSOHeldMs.Store(0)
	var w kafkapartial.LSOWatch
	reported := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lso, hwm, err := kafkapartial.StableOffsets(ctx, cl, topic, 0)
		if err != nil {
			if ctx.Err() == nil {
				s.Log.Debug("releaser: cannot read the partials topic's last stable offset", zap.Error(err))
			}
			continue
		}
		held := w.Observe(lso, hwm, time.Now())
		s.Stats.PartialsLSOHeldMs.Store(held.Milliseconds())
		switch {
		case held == 0:
			reported = false
		case held > timeout && !reported:
			reported = true
			s.Stats.PartialsLSOHolds.Add(1)
			s.Log.Error("releaser: an open transaction on the partials topic has held its last stable offset, and every release, for longer than kafka.distributed.transaction_timeout: "+
				"a bounder's transaction hangs and the broker has not aborted it yet (kafka-transactions --describe shows it; the partition's new owner or the broker's timeout aborts it)",
				zap.String("topic", topic), zap.Int64("last_stable_offset", lso), zap.Int64("high_watermark", hwm),
				zap.Duration("held", held), zap.Duration("transaction_timeout", timeout))
		}
	}
}
