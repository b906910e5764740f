package kafkapartial

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/internal/lib/kafkaoffset"
)

// StableOffsets returns partition p of topic's last stable offset (LSO:
// the end a read_committed reader sees; an open transaction holds it at
// its first record) and its high watermark (HWM: the end of the log).
// LSO < HWM while a transaction on the partition is open.
func StableOffsets(ctx context.Context, cl *kgo.Client, topic string, p int32) (lso, hwm int64, err error) {
	if lso, err = listOffset(ctx, cl, topic, p, -1, 1); err != nil {
		return 0, 0, fmt.Errorf("last stable offset of %s/%d: %w", topic, p, err)
	}
	if hwm, err = listOffset(ctx, cl, topic, p, -1, 0); err != nil {
		return 0, 0, fmt.Errorf("high watermark of %s/%d: %w", topic, p, err)
	}
	return lso, hwm, nil
}

// OffsetForTime returns the first offset of partition p of topic whose
// record timestamp is at least ms, read_committed (Kafka's ListOffsets by
// timestamp: every record before it has an earlier timestamp, whatever
// the order of the timestamps). When no committed record is that recent,
// it returns the last stable offset.
func OffsetForTime(ctx context.Context, cl *kgo.Client, topic string, p int32, ms int64) (int64, error) {
	if ms < 0 {
		return 0, fmt.Errorf("offset for time %d: negative time", ms)
	}
	o, err := listOffset(ctx, cl, topic, p, ms, 1)
	if err != nil {
		return 0, fmt.Errorf("offset of %s/%d for time %d: %w", topic, p, ms, err)
	}
	if o >= 0 {
		return o, nil
	}
	if o, err = listOffset(ctx, cl, topic, p, -1, 1); err != nil {
		return 0, fmt.Errorf("last stable offset of %s/%d: %w", topic, p, err)
	}
	return o, nil
}

// listOffset is one ListOffsets of partition p of topic at timestamp ts
// (-1: the end; -2: the start) with the isolation level (0
// read_uncommitted, 1 read_committed). The offset is -1 when no record
// matches a timestamp.
func listOffset(ctx context.Context, cl *kgo.Client, topic string, p int32, ts int64, isolation int8) (int64, error) {
	return kafkaoffset.List(ctx, cl, topic, p, ts, isolation)
}

// LSOWatch follows a partition's last stable offset: how long it has
// stayed at one offset below the high watermark — an open transaction
// holding every read_committed reader back. A transaction whose owner
// hangs holds it until the broker aborts it at the transaction timeout;
// one that holds it longer means the broker does not abort it. Not safe
// for concurrent use.
type LSOWatch struct {
	lso   int64
	since time.Time // zero: not held
}

// Observe takes one reading (lso, hwm) at now and returns how long the
// LSO has been held at its offset below the high watermark (0: not held,
// or it moved since the last reading).
func (w *LSOWatch) Observe(lso, hwm int64, now time.Time) time.Duration {
	switch {
	case lso >= hwm:
		w.since = time.Time{}
		return 0
	case w.since.IsZero() || lso != w.lso:
		w.lso, w.since = lso, now
		return 0
	}
	return now.Sub(w.since)
}
