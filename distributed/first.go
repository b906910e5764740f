package distributed

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/dpstage/stage/partial/kafkapartial"
	"github.com/dpstage/stage/release"
)

// firstOffset is the input offset a fresh input partition p (no progress
// record) starts reading at, for first, the start of the first window it
// counts: countFrom, the start of the longest histogram window open at its
// first base window (an hour or day view counts that window whole), not the
// first base window itself.
//
// With window.watermark arrival, no record older than first −
// events.max_future can count (window.Rule.Decide): an event counts only
// if its window is at least first, so its event time is at least first,
// and only if eventMs ≤ recordMs + max_future, so its record time is at
// least first − max_future. Kafka's ListOffsets by timestamp gives the
// first offset whose record time is at least that, every record before it
// being older, whatever the order of the record times
// (kafkapartial.OffsetForTime): reading from there skips only records that
// would be dropped as late or too far ahead — on a first start over a
// retained topic, hours of catch-up with every window held. Records
// without a time (kafka-go's zero time) never count either.
//
// With window.watermark event a record's time says nothing about its
// event's window (a replay): the partition is read from its earliest
// offset, as before.
func (s *stage) firstOffset(ctx context.Context, cl *kgo.Client, topic string, p int, first int64) (int64, error) {
	start, _, err := kafkapartial.Offsets(ctx, cl, topic, int32(p))
	if err != nil {
		return 0, fmt.Errorf("earliest offset of input partition %d: %w", p, err)
	}
	from := first - s.MaxFutureMs
	if !s.Arrival || from <= 0 {
		return start, nil
	}
	o, err := kafkapartial.OffsetForTime(ctx, cl, topic, int32(p), from)
	if err != nil {
		return 0, fmt.Errorf("input partition %d: first offset at record time %s (first window %s − events.max_future): %w",
			p, release.RFC3339(from), release.RFC3339(first), err)
	}
	if o > start {
		s.Stats.FirstStartSkipped.Add(o - start)
		s.Log.Info("bounder: a fresh input partition starts at its first window's records: the older ones could not count (late)",
			zap.Int("partition", p), zap.Int64("earliest_offset", start), zap.Int64("offset", o),
			zap.String("first_window", release.RFC3339(first)), zap.String("from_record_time", release.RFC3339(from)))
		return o, nil
	}
	return start, nil
}
