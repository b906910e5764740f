package node

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/internal/lib/kafkaoffset"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/window"
)

// FirstOffset is the input offset partition p starts reading at when it
// counts from window first on and has nothing to resume from: a fresh
// partition of the distributed mode (no progress record), or every
// partition of the single-process mode after the distributed mode
// (issue 28 item 4: it read the input's whole retention). earliest is the
// partition's log start offset; offset − earliest records are skipped.
//
// With window.watermark arrival, no record older than first −
// events.max_future can count (window.Rule.Decide): an event counts only
// if its window is at least first, so its event time is at least first,
// and only if eventMs ≤ recordMs + max_future, so its record time is at
// least first − max_future. Kafka's ListOffsets by timestamp gives the
// first offset whose record time is at least that, every record before it
// being older, whatever the order of the record times: reading from there
// skips only records that would be dropped as late or too far ahead — on
// a start over a retained topic, hours of catch-up with every window held.
// Records without a time (kafka-go's zero time) never count either.
//
// With window.watermark event a record's time says nothing about its
// event's window (a replay): the partition is read from its earliest
// offset.
func (s *Node) FirstOffset(ctx context.Context, cl *kgo.Client, topic string, p int, first int64) (offset, earliest int64, err error) {
	earliest, _, err = kafkaoffset.Committed(ctx, cl, topic, int32(p))
	if err != nil {
		return 0, 0, fmt.Errorf("earliest offset of input partition %d: %w", p, err)
	}
	from := first - s.MaxFutureMs
	if !s.Arrival || from <= 0 {
		return earliest, earliest, nil
	}
	o, err := kafkaoffset.List(ctx, cl, topic, int32(p), from, kafkaoffset.ReadCommitted)
	if err == nil && o < 0 { // no record that recent: the end
		o, err = kafkaoffset.List(ctx, cl, topic, int32(p), kafkaoffset.Latest, kafkaoffset.ReadCommitted)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("input partition %d: first offset at record time %s (first window %s − events.max_future): %w",
			p, release.RFC3339(from), release.RFC3339(first), err)
	}
	return max(o, earliest), earliest, nil
}

// CountFrom is the first base window counted when counting resumes at
// window next with nothing carried over: the start of the longest
// histogram window (histograms[].window) containing next, so that a long
// window open at next is counted whole. Without histograms[].window it is
// next.
func (s *Node) CountFrom(next int64) int64 {
	var longest int64
	for _, h := range s.Cfg.Histograms {
		longest = max(longest, h.WindowSize(s.Cfg.Window.Size).D().Milliseconds())
	}
	if longest <= 0 {
		return next
	}
	return window.Start(next, longest)
}
