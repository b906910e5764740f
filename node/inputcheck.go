package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dpstage/stage/internal/lib/retry"
	"github.com/dpstage/stage/source"
	"go.uber.org/zap"
)

// ErrNoInputTopic: the input topic does not exist (longer than the
// missing-topic wait). See CheckInput.
var ErrNoInputTopic = errors.New("node: the input topic does not exist")

// inputCheckRetry is how often CheckInput asks again. A variable for tests.
var inputCheckRetry = 2 * time.Second

// topicWait is how long a missing input or output topic is waited for
// (Options.MissingTopicWait; outputTopicGrace when unset).
func (s *Node) topicWait() time.Duration {
	if s.TopicWait > 0 {
		return s.TopicWait
	}
	return outputTopicGrace
}

// CheckInput checks, at start and before anything is read (both modes),
// that the brokers answer, that the input topic exists and its record
// times (checkRecordTimesOnce), in that order:
//
//   - brokers that do not answer are dialled one by one
//     (source.ProbeBrokers) so that the log names each with its own error —
//     connection refused, no such host — and points at kafka.brokers
//     (kafka-go's client says only "Broker Not Available"); /readyz says
//     connected: false, and the operator's /readyz gives the reason. They
//     are waited for, retrying every 2 s until ctx ends: brokers down at
//     start are an outage like one while consuming;
//   - once they answer, /readyz says connected: true; an input topic they
//     say does not exist is waited for the missing-topic wait (30 s by
//     default, like the output topic's, CheckContinuity), then it is one
//     ErrNoInputTopic error saying to create it, and the process exits;
//   - a refusal of its record times wraps errRecordTimes and is returned
//     at once; a transient error of that check is retried.
func (s *Node) CheckInput(ctx context.Context) error {
	topic := s.Cfg.Kafka.InputTopic
	var missingSince time.Time
	lastWhy := ""
	for {
		err := source.TopicExists(ctx, s.Brokers, s.Transport, topic)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case err == nil:
			s.Ready.SetConnected()
			if err = s.checkRecordTimesOnce(ctx); err == nil || errors.Is(err, errRecordTimes) || ctx.Err() != nil {
				return err
			}
			s.Log.Warn("cannot check the input topic's message.timestamp.type yet; retrying", zap.String("topic", topic), zap.Error(err))
		case errors.Is(err, source.ErrTopicMissing):
			s.Ready.SetConnected()
			if missingSince.IsZero() {
				missingSince = time.Now()
			}
			if wait := s.topicWait(); time.Since(missingSince) >= wait {
				return fmt.Errorf("%w: %q (kafka.input_topic) on the brokers %s, for %v: create it (e.g. kafka-topics --bootstrap-server %s --create --topic %s "+
					"--partitions N --config message.timestamp.type=LogAppendTime), or set kafka.input_topic to the topic your producers write to",
					ErrNoInputTopic, topic, strings.Join(s.Brokers, ","), wait, s.Brokers[0], topic)
			}
			s.Log.Warn("the input topic does not exist (yet); waiting for it", zap.String("topic", topic), zap.Strings("brokers", s.Brokers),
				zap.Duration("gives_up_after", s.topicWait()))
		default:
			why := s.unreachable(ctx, err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.Ready.SetUnconnected(why)
			if why != lastWhy { // the same reason is logged once, not every 2 s
				s.Log.Warn("cannot reach the brokers; retrying: "+why, zap.Strings("kafka.brokers", s.Brokers))
				lastWhy = why
			}
		}
		pause := inputCheckRetry
		if !missingSince.IsZero() { // ask again when the wait ends, not later
			pause = max(min(pause, s.topicWait()-time.Since(missingSince)), time.Millisecond)
		}
		if retry.Sleep(ctx, pause) != nil {
			return ctx.Err()
		}
	}
}

// unreachable says why a metadata request failed: every broker's dial
// error when none answers, else the request's own error.
func (s *Node) unreachable(ctx context.Context, err error) string {
	if perr := source.ProbeBrokers(ctx, s.Dialer, s.Brokers); perr != nil {
		if ctx.Err() != nil {
			return ""
		}
		return fmt.Sprintf("%v — check kafka.brokers (host:port of the brokers' client listener; empty starts the embedded broker), and that they are up", perr)
	}
	return fmt.Sprintf("the brokers %s accept connections but did not answer the input topic's metadata: %v", strings.Join(s.Brokers, ","), err)
}
