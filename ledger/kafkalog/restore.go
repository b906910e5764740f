package kafkalog

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// restore folds the records of cfg's partition below offset until, read
// read_committed from the start, into a new state.
func restore(ctx context.Context, cfg Config, until int64) (*state, error) {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: {cfg.Partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	defer cl.Close()
	st := newState()
	last := int64(-1)
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read to offset %d, reached %d: %w", until, last, err)
		}
		if err := fs.Err(); err != nil {
			return nil, fmt.Errorf("fetch: %w", err)
		}
		var done bool
		var aerr error
		fs.EachRecord(func(r *kgo.Record) {
			if done || aerr != nil {
				return
			}
			if r.Offset >= until {
				done = true // our barrier, or a newer owner's
				return
			}
			last = r.Offset
			aerr = st.apply(r)
		})
		if aerr != nil {
			return nil, aerr
		}
		if done {
			return st, st.checkParts()
		}
	}
}
