package source

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// dial connects to the partition's leader: metadata from the first
// bootstrap broker that answers, then the leader (the same connection when
// the leader is that broker).
func (f *Fetcher) dial(ctx context.Context) error {
	var lastErr error
	for _, addr := range f.brokers {
		c, err := dialBroker(ctx, f.dialer, addr)
		if err != nil {
			lastErr = err
			continue
		}
		leader, err := f.leader(c)
		if err != nil {
			c.Close()
		} else if !sameAddr(leader, addr) {
			c.Close()
			c, err = dialBroker(ctx, f.dialer, leader)
		}
		if err == nil {
			if f.fetchVersion, err = c.version(1, fetchMinVersion, fetchMaxVersion); err == nil {
				f.listVersion, err = c.version(2, listMinVersion, listMaxVersion)
			}
			if err != nil {
				c.Close()
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lastErr = err
			continue
		}
		f.conn = c
		f.checkRange = true
		f.stopClose = context.AfterFunc(ctx, func() { c.Close() })
		return nil
	}
	return fmt.Errorf("dial leader of %s/%d: %w", f.topic, f.partition, lastErr)
}

// leader asks c for the address of the partition's leader.
func (f *Fetcher) leader(c *brokerConn) (string, error) {
	t, brokers, err := topicMetadata(c, f.topic, f.dialTimeout())
	if err != nil {
		return "", err
	}
	leader := int32(-1)
	found := false
	for _, p := range t.Partitions {
		if p.Partition == int32(f.partition) {
			found, leader = true, p.Leader
			if leader < 0 && p.ErrorCode != 0 {
				return "", fmt.Errorf("metadata of %s/%d: %w", f.topic, f.partition, kafka.Error(p.ErrorCode))
			}
		}
	}
	if !found {
		return "", fmt.Errorf("metadata of %s/%d: %w", f.topic, f.partition, kafka.UnknownTopicOrPartition)
	}
	if leader < 0 {
		return "", fmt.Errorf("metadata of %s/%d: %w", f.topic, f.partition, kafka.LeaderNotAvailable)
	}
	for _, b := range brokers {
		if b.NodeID == leader {
			return net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), nil
		}
	}
	return "", fmt.Errorf("metadata of %s/%d: leader %d is not among the brokers: %w", f.topic, f.partition, leader, kafka.LeaderNotAvailable)
}

// topicMetadata asks c for topic's metadata (fresh from the broker: no
// client cache in between).
func topicMetadata(c *brokerConn, topic string, timeout time.Duration) (*kmsg.MetadataResponseTopic, []kmsg.MetadataResponseBroker, error) {
	v, err := c.version(3, metaMinVersion, metaMaxVersion)
	if err != nil {
		return nil, nil, err
	}
	req := kmsg.NewPtrMetadataRequest()
	req.Version = v
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	if err := c.setDeadline(time.Now().Add(timeout)); err != nil {
		return nil, nil, err
	}
	resp := kmsg.NewPtrMetadataResponse()
	if err := c.request(req, resp); err != nil {
		return nil, nil, fmt.Errorf("metadata: %w", err)
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if t.ErrorCode != 0 {
			return nil, nil, fmt.Errorf("metadata of %s: %w", topic, kafka.Error(t.ErrorCode))
		}
		return t, resp.Brokers, nil
	}
	return nil, nil, fmt.Errorf("metadata of %s: %w", topic, kafka.UnknownTopicOrPartition)
}

// checkOffsets resolves a negative next offset to the first retained one,
// and moves a next offset that retention removed to the first retained
// one (onReset). A next offset past the high watermark (a truncated log)
// is an error the caller sees.
func (f *Fetcher) checkOffsets() error {
	first, err := f.listOffset(-2)
	if err != nil {
		return err
	}
	last, err := f.listOffset(-1)
	if err != nil {
		return err
	}
	switch {
	case f.next < 0:
		f.next = first
	case f.next < first:
		if f.OnReset != nil {
			f.OnReset(f.next, first)
		}
		f.next = first
	case f.next > last:
		return fmt.Errorf("offset %d of %s/%d is past the log end %d: %w", f.next, f.topic, f.partition, last, kafka.OffsetOutOfRange)
	}
	f.checkRange, f.rangeOK = false, true
	return nil
}

// listOffset returns the partition's first (ts −2) or end (−1: the high
// watermark) offset.
func (f *Fetcher) listOffset(ts int64) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version = f.listVersion
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = f.topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = int32(f.partition)
	rp.Timestamp = ts
	rp.CurrentLeaderEpoch = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	if err := f.conn.setDeadline(time.Now().Add(f.dialTimeout())); err != nil {
		return 0, err
	}
	resp := kmsg.NewPtrListOffsetsResponse()
	if err := f.conn.request(req, resp); err != nil {
		f.drop()
		return 0, fmt.Errorf("offsets of %s/%d: %w", f.topic, f.partition, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if t.Topic == f.topic && p.Partition == int32(f.partition) {
				if p.ErrorCode != 0 {
					return 0, fmt.Errorf("offsets of %s/%d: %w", f.topic, f.partition, kafka.Error(p.ErrorCode))
				}
				return p.Offset, nil
			}
		}
	}
	return 0, fmt.Errorf("offsets of %s/%d: not in the response", f.topic, f.partition)
}
