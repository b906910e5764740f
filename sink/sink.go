// Package sink writes to Kafka what the stage publishes: recorded release
// units to the output topic and malformed events to the dead-letter topic.
// A write is retried with exponential back-off and jitter until the broker
// acknowledges it (all in-sync replicas) or its context ends; an error that
// retrying cannot fix (a message too large, a missing topic, no permission)
// is returned at once, wrapped in ErrPublishRefused.
//
// Invariant: a publish returns nil only when the broker acknowledged every
// message; nothing is dropped because the broker is away (a release waits:
// its record is durable in the ledger and republished after a restart).
package sink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/retry"
	"github.com/dpstage/stage/ledger"
)

// Sink publishes to one topic. A publish is retried with exponential
// backoff and jitter until the broker acknowledges it or the context ends.
type Sink struct {
	w   *kafka.Writer
	log *zap.Logger
	// maxBackoff caps the wait between attempts.
	maxBackoff time.Duration
	onRetry    func()
}

// Options configure a Sink.
type Options struct {
	Brokers []string
	Topic   string
	// Transport carries TLS/SASL; nil for plain TCP.
	Transport *kafka.Transport
	Log       *zap.Logger
	// OnRetry, when set, is called before every retried attempt (metrics).
	OnRetry func()
	// RoundRobin spreads messages over the topic's partitions instead of
	// hashing on the key (the dead-letter topic).
	RoundRobin bool
}

// New returns a Sink writing to opts.Topic.
func New(opts Options) *Sink {
	s := &Sink{w: newWriter(opts.Brokers, opts.Topic, opts.Transport), log: opts.Log, maxBackoff: 5 * time.Second, onRetry: opts.OnRetry}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if opts.RoundRobin {
		s.w.Balancer = &kafka.RoundRobin{}
	}
	return s
}

// Close flushes and closes the writer.
func (s *Sink) Close() error { return s.w.Close() }

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

// Publish writes msgs, retrying until acknowledged or ctx ends.
func (s *Sink) Publish(ctx context.Context, msgs []kafka.Message) error {
	backoff := retry.Backoff{Initial: 100 * time.Millisecond, Max: s.maxBackoff, Jitter: true}
	for attempt := 1; ; attempt++ {
		err := s.w.WriteMessages(ctx, msgs...)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("publish abandoned after %d attempts: %w", attempt, errors.Join(ctx.Err(), err))
		}
		if Permanent(err) {
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
var ErrPublishRefused = errors.New("sink: publish refused permanently")

// Permanent reports whether err cannot go away by retrying: a message larger
// than the client or broker accepts, or a Kafka error the protocol marks as
// not retriable (authorization, invalid topic, …). Network errors and
// retriable Kafka errors (leader elections, not enough replicas, …) are not.
func Permanent(err error) bool {
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return true
	}
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil && Permanent(e) {
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

// PublishUnits publishes the messages of recorded units in one write
// (acknowledged by all in-sync replicas).
func (s *Sink) PublishUnits(ctx context.Context, units []*ledger.Unit) error {
	var msgs []kafka.Message
	for _, u := range units {
		for _, m := range u.Messages {
			msgs = append(msgs, kafka.Message{Key: m.Key, Value: m.Value})
		}
	}
	return s.Publish(ctx, msgs)
}

// DropReasonHeader is the header carrying the drop reason on messages
// forwarded to the dead-letter topic.
const DropReasonHeader = "dp-stage-drop-reason"

// maxDeadLetterValue is the largest value forwarded to the dead-letter topic
// whole; longer ones are cut (with a dp-stage-original-size header).
const maxDeadLetterValue = 64 << 10

// DeadLetter forwards a malformed message to the dead-letter topic with its
// reason, retrying until acknowledged (the caller's partition waits:
// nothing is lost, and the message's offset is not committed before it is
// forwarded).
func (s *Sink) DeadLetter(ctx context.Context, m kafka.Message, reason decode.Reason) error {
	value := m.Value
	headers := []kafka.Header{
		{Key: DropReasonHeader, Value: []byte(reason.String())},
		{Key: "dp-stage-source", Value: []byte(fmt.Sprintf("%s/%d/%d", m.Topic, m.Partition, m.Offset))},
	}
	if len(value) > maxDeadLetterValue {
		// An oversized event would be refused by the writer (1 MiB default
		// batch limit) and block its partition: forward its head only; the
		// source header says where the whole message is.
		headers = append(headers, kafka.Header{Key: "dp-stage-original-size", Value: []byte(strconv.Itoa(len(value)))})
		value = value[:maxDeadLetterValue]
	}
	return s.Publish(ctx, []kafka.Message{{Key: m.Key, Value: value, Headers: headers}})
}
