package source

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// The values of a topic's message.timestamp.type.
const (
	TimestampLogAppendTime = "LogAppendTime" // the broker sets each record's time at append
	TimestampCreateTime    = "CreateTime"    // the producer sets it (Kafka's default)
)

// ErrDescribeConfigsDenied: the broker refused to describe the topic's
// config (the principal lacks the DESCRIBE_CONFIGS ACL on the topic).
var ErrDescribeConfigsDenied = errors.New("not authorized to describe the topic's config")

// TimestampType returns the input topic's message.timestamp.type as the
// brokers report it (DescribeConfigs; the effective value, whether set on
// the topic or inherited from the broker's log.message.timestamp.type).
// A refusal by ACL is ErrDescribeConfigsDenied.
func TimestampType(ctx context.Context, brokers []string, transport *kafka.Transport, topic string) (string, error) {
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	if transport != nil {
		c.Transport = transport
	}
	res, err := c.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{"message.timestamp.type"},
	}}})
	if err != nil {
		return "", fmt.Errorf("describe the config of topic %q: %w", topic, err)
	}
	for _, r := range res.Resources {
		if r.ResourceName != topic {
			continue
		}
		if r.Error != nil {
			if errors.Is(r.Error, kafka.TopicAuthorizationFailed) || errors.Is(r.Error, kafka.ClusterAuthorizationFailed) {
				return "", fmt.Errorf("describe the config of topic %q: %w (%w)", topic, ErrDescribeConfigsDenied, r.Error)
			}
			return "", fmt.Errorf("describe the config of topic %q: %w", topic, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == "message.timestamp.type" {
				return e.ConfigValue, nil
			}
		}
	}
	return "", fmt.Errorf("describe the config of topic %q: the broker did not report message.timestamp.type", topic)
}
