package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/dpstage/stage/internal/retry"
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
	backoff := retry.Backoff{Initial: 100 * time.Millisecond, Max: s.maxBackoff, Jitter: true}
	for attempt := 1; ; attempt++ {
		err := s.w.WriteMessages(ctx, msgs...)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("publish abandoned after %d attempts: %w", attempt, errors.Join(ctx.Err(), err))
		}
		if permanent(err) {
			// Retrying cannot help (a message too large, a missing topic
			// or permission): say so at once instead of retrying forever.
			return fmt.Errorf("%w: %w", ErrPublishRefused, err)
		}
		if s.onRetry != nil {
			s.onRetry()
		}
		wait := backoff.Next() // jitter in [step/2, step]
		s.log.Warn("publish failed; retrying", zap.Int("attempt", attempt), zap.Duration("wait", wait), zap.Error(err))
		if retry.Sleep(ctx, wait) != nil {
			return fmt.Errorf("publish abandoned after %d attempts: %w", attempt, errors.Join(ctx.Err(), err))
		}
	}
}

// ErrPublishRefused: the broker (or the client) refused a publish in a way
// that retrying cannot fix. Fix the topic, its permissions or message size
// limits and restart: recorded releases are republished with the same values.
var ErrPublishRefused = errors.New("pipeline: publish refused permanently")

// permanent reports whether err cannot go away by retrying: a message larger
// than the client or broker accepts, or a Kafka error the protocol marks as
// not retriable (authorization, invalid topic, …). Network errors and
// retriable Kafka errors (leader elections, not enough replicas, …) are not.
func permanent(err error) bool {
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return true
	}
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil && permanent(e) {
				return true
			}
		}
		return false
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		return !ke.Temporary()
	}
	return false
}
