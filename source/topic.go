package source

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// TopicMessages returns how many messages topic retains (the continuity
// check: an empty ledger next to a used output topic).
func TopicMessages(ctx context.Context, brokers []string, transport *kafka.Transport, topic string) (int64, error) {
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	if transport != nil {
		c.Transport = transport
	}
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, err
	}
	var reqs []kafka.OffsetRequest
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return 0, fmt.Errorf("output topic %q: %w", topic, t.Error)
		}
		for _, p := range t.Partitions {
			reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
		}
	}
	if len(reqs) == 0 {
		return 0, fmt.Errorf("output topic %q has no partitions", topic)
	}
	res, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return 0, fmt.Errorf("output topic %q partition %d: %w", topic, po.Partition, po.Error)
		}
		n += po.LastOffset - po.FirstOffset
	}
	return n, nil
}
