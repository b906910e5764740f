package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
)

// sink publishes recorded units to the output topic. A publish is retried with
// exponential backoff and jitter until the broker acknowledges it or the
// context ends: a release is never dropped because the broker is away, it
// waits (its record is durable in the ledger and republished after a restart).
type sink struct {
	w   *kafka.Writer
	log *zap.Logger
	// maxBackoff caps the wait between attempts.
	maxBackoff time.Duration
	onRetry    func()
}

// newWriter configures kafka-go's Writer for releases: acknowledged by all
// in-sync replicas (kafka-go defaults to none), a short batch timeout (the
// default of 1 s would dominate release latency), hashing on the key
// "histogram/group" so that one series stays in order on one partition.
func newWriter(brokers []string, topic string, transport *kafka.Transport) *kafka.Writer {
	w := &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 2 * time.Millisecond,
		BatchSize:    1000,
		MaxAttempts:  3,
		WriteTimeout: 10 * time.Second,
		ReadTimeout:  10 * time.Second,
	}
	if transport != nil {
		w.Transport = transport
	}
	return w
}

// publish writes msgs, retrying until acknowledged or ctx ends.
func (s *sink) publish(ctx context.Context, msgs []kafka.Message) error {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := s.w.WriteMessages(ctx, msgs...)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("publish abandoned after %d attempts: %w", attempt, errors.Join(ctx.Err(), err))
		}
		if s.onRetry != nil {
			s.onRetry()
		}
		wait := backoff/2 + rand.N(backoff/2+1) // jitter in [backoff/2, backoff]
		s.log.Warn("publish failed; retrying", zap.Int("attempt", attempt), zap.Duration("wait", wait), zap.Error(err))
		select {
		case <-ctx.Done():
			return fmt.Errorf("publish abandoned after %d attempts: %w", attempt, errors.Join(ctx.Err(), err))
		case <-time.After(wait):
		}
		if backoff *= 2; backoff > s.maxBackoff {
			backoff = s.maxBackoff
		}
	}
}
