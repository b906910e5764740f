// Package kafkaoffset asks a partition's leader for offsets (ListOffsets)
// with a franz-go client: the one request that the release log
// (ledger/kafkalog) and the distributed mode's internal topics
// (partial/kafkapartial) both need.
package kafkaoffset

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Timestamps with a meaning of their own in a ListOffsets request.
const (
	Latest   int64 = -1 // the end: the high watermark, or read_committed the last stable offset
	Earliest int64 = -2 // the log start offset
)

// Isolation levels of a ListOffsets request.
const (
	ReadUncommitted int8 = 0
	ReadCommitted   int8 = 1
)

// List is one ListOffsets of partition p of topic at timestamp ts (a
// record time in ms, or Latest or Earliest) under the isolation level. The
// offset is -1 when no record is that recent.
func List(ctx context.Context, cl *kgo.Client, topic string, p int32, ts int64, isolation int8) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = p, ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, errors.New("list offsets: unexpected answer")
	}
	r := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return 0, fmt.Errorf("list offsets: %w", err)
	}
	return r.Offset, nil
}

// Committed returns the log start offset and the last stable offset of
// topic/p: the range a read_committed reader can read.
func Committed(ctx context.Context, cl *kgo.Client, topic string, p int32) (start, lso int64, err error) {
	if start, err = List(ctx, cl, topic, p, Earliest, ReadCommitted); err != nil {
		return 0, 0, err
	}
	if lso, err = List(ctx, cl, topic, p, Latest, ReadCommitted); err != nil {
		return 0, 0, err
	}
	return start, lso, nil
}
