package source

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// ErrNoBroker: no broker of the bootstrap list answered (ProbeBrokers).
var ErrNoBroker = errors.New("no broker answers")

// ProbeBrokers dials each of brokers as the fetch loop does (d's timeout,
// TLS and SASL: dialBroker, with the API-versions handshake) and returns
// nil as soon as one answers. Else the error wraps ErrNoBroker and names
// every broker with its own dial error — connection refused, no such host,
// a timeout, a TLS or SASL failure — which kafka-go's client reports only
// as "Broker Not Available". A nil d dials plain TCP with a 10 s timeout.
func ProbeBrokers(ctx context.Context, d *kafka.Dialer, brokers []string) error {
	if d == nil {
		d = &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	}
	if len(brokers) == 0 {
		return fmt.Errorf("%w: the broker list is empty", ErrNoBroker)
	}
	errs := make([]string, 0, len(brokers))
	for _, addr := range brokers {
		c, err := dialBroker(ctx, d, addr)
		if err == nil {
			c.Close()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		errs = append(errs, fmt.Sprintf("%s: %v", addr, err))
	}
	return fmt.Errorf("%w: %s", ErrNoBroker, strings.Join(errs, "; "))
}

// ErrTopicMissing: the brokers answered that the topic does not exist.
var ErrTopicMissing = errors.New("the topic does not exist")

// TopicExists asks the brokers for topic's metadata (without creating it):
// nil when it exists with partitions; an error wrapping ErrTopicMissing
// when the brokers say it does not exist; another error when they did not
// answer (see ProbeBrokers for why).
func TopicExists(ctx context.Context, brokers []string, transport *kafka.Transport, topic string) error {
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	if transport != nil {
		c.Transport = transport
	}
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return err
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		switch {
		case errors.Is(t.Error, kafka.UnknownTopicOrPartition):
			return fmt.Errorf("topic %q: %w", topic, ErrTopicMissing)
		case t.Error != nil:
			return fmt.Errorf("topic %q: %w", topic, t.Error)
		case len(t.Partitions) == 0:
			return fmt.Errorf("topic %q has no partitions", topic)
		}
		return nil
	}
	return fmt.Errorf("topic %q: %w", topic, ErrTopicMissing)
}
