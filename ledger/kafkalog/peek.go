package kafkalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/internal/lib/kafkaoffset"
)

// Peek reads the log's committed records (read_committed, from its start
// to its last stable offset, without fencing its owner: no transactional
// id is used) and returns the window a releaser opening the log now would
// resume at: the largest window end recorded, else the last recorded
// unit's window + windowMs, else the first window of the recorded
// metadata (pipeline's resumeWindow, on a snapshot). ok is false when the
// log holds none of these (no releaser has attached to it yet).
//
// The distributed mode's bounder calls it when an input partition has no
// progress, so that the partition starts counting at the window the
// release log resumes at, not at its own wall clock's (partial.Merger,
// "Gaps"). The owner may record more meanwhile; the answer is then
// behind, never ahead, of the owner's resume window.
//
// The read keeps control records and stops at the record just below the
// last stable offset: the last batch of a partition (in the active
// segment) is never compacted, and a log written transactionally ends with
// a commit or abort marker, so that record is always there.
func Peek(ctx context.Context, cfg Config, windowMs int64) (resume int64, ok bool, err error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" || windowMs <= 0 {
		return 0, false, errors.New("kafkalog: peek: no brokers, topic or window size")
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, false, fmt.Errorf("kafkalog: peek: client: %w", err)
	}
	defer cl.Close()
	start, lso, err := kafkaoffset.Committed(ctx, cl, cfg.Topic, cfg.Partition)
	if err != nil {
		return 0, false, fmt.Errorf("kafkalog: peek %s/%d: %w", cfg.Topic, cfg.Partition, err)
	}
	st := newState()
	if lso > start {
		rc, err := kgo.NewClient(append([]kgo.Opt{
			kgo.SeedBrokers(cfg.Brokers...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: {cfg.Partition: kgo.NewOffset().At(start)}}),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.KeepControlRecords(),
		}, cfg.ClientOpts...)...)
		if err != nil {
			return 0, false, fmt.Errorf("kafkalog: peek: consumer: %w", err)
		}
		defer rc.Close()
		for done := false; !done; {
			fs := rc.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return 0, false, fmt.Errorf("kafkalog: peek %s/%d to offset %d: %w", cfg.Topic, cfg.Partition, lso, err)
			}
			if err := fs.Err(); err != nil {
				return 0, false, fmt.Errorf("kafkalog: peek %s/%d: fetch: %w", cfg.Topic, cfg.Partition, err)
			}
			var aerr error
			fs.EachRecord(func(r *kgo.Record) {
				if done || aerr != nil || r.Offset >= lso {
					done = true
					return
				}
				if r.Offset+1 >= lso {
					done = true
				}
				if !r.Attrs.IsControl() {
					aerr = st.apply(r)
				}
			})
			if aerr != nil {
				return 0, false, fmt.Errorf("kafkalog: peek %s/%d: %w", cfg.Topic, cfg.Partition, aerr)
			}
		}
	}
	switch {
	case st.lastEnd != nil:
		return *st.lastEnd, true, nil
	case len(st.units) > 0:
		last := int64(0)
		for i, k := range st.sortedUnitKeys() {
			if w := windowOf(k); i == 0 || w > last {
				last = w
			}
		}
		return last + windowMs, true, nil
	case st.meta != nil:
		return st.meta.FirstWindow, true, nil
	}
	return 0, false, nil
}
