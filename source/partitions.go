package source

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// PartitionCounter asks the brokers how many partitions the input topic has
// now. The releaser asks before it closes a window (Stage.allAssigned): a
// partition added to the topic is not assigned to the running generation
// until the group rebalances, so its events would be missing from a window
// closed in between. It sends its own Metadata request, because kafka-go's
// Transport and ConsumerGroup answer from metadata cached for seconds. Used
// by one goroutine (the releaser).
type PartitionCounter struct {
	dialer  *kafka.Dialer
	brokers []string
	topic   string
	conn    *brokerConn
}

func NewPartitionCounter(dialer *kafka.Dialer, brokers []string, topic string) *PartitionCounter {
	if dialer == nil {
		dialer = &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	}
	return &PartitionCounter{dialer: dialer, brokers: brokers, topic: topic}
}

// count returns the topic's partition count, re-dialling once on error.
func (pc *PartitionCounter) Count(ctx context.Context) (int, error) {
	var lastErr error
	for range 2 {
		if pc.conn == nil {
			for _, b := range pc.brokers {
				c, err := dialBroker(ctx, pc.dialer, b)
				if err == nil {
					pc.conn = c
					break
				}
				lastErr = err
			}
			if pc.conn == nil {
				return 0, fmt.Errorf("partitions of %s: %w", pc.topic, lastErr)
			}
		}
		timeout := pc.dialer.Timeout
		if timeout <= 0 {
			timeout = 10 * time.Second
		}
		t, _, err := topicMetadata(pc.conn, pc.topic, timeout)
		if err == nil {
			return len(t.Partitions), nil
		}
		lastErr = err
		pc.Close()
	}
	return 0, fmt.Errorf("partitions of %s: %w", pc.topic, lastErr)
}

// Close releases the connection.
func (pc *PartitionCounter) Close() {
	if pc.conn != nil {
		pc.conn.Close()
		pc.conn = nil
	}
}
