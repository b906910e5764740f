package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/retry"
	"github.com/dpstage/stage/source"
	"github.com/dpstage/stage/window"
	"go.uber.org/zap"
)

// The record-time assumptions of the arrival watermark (window.Watermarks,
// README "Windows and watermarks"), checked instead of trusted:
//
//   - who sets the record times: with window.record_times broker (the
//     default) the input topic must have message.timestamp.type
//     LogAppendTime. checkRecordTimes asks the brokers (DescribeConfigs) at
//     every start and at every generation (a rebalance: partitions added,
//     members changed) and refuses a CreateTime topic, or one whose config
//     it may not read;
//   - that clocks agree within window.clock_skew_margin: the arrival
//     frontier is lowered by the margin (newWatermarks), and every broker
//     time that runs backwards along a partition is counted per partition
//     (dpstage_source_broker_time_regressions_total) and logged when it
//     exceeds the margin (noteBrokerTime).

// errRecordTimes marks a refusal of the input topic's record times: not
// retried.
var errRecordTimes = errors.New("input topic record times")

// checkRecordTimesOnce checks the input topic's message.timestamp.type once
// (see above). A refusal wraps errRecordTimes; other errors (the broker
// unreachable, the topic missing) are transient.
func (s *Node) checkRecordTimesOnce(ctx context.Context) error {
	if !s.Arrival || s.Cfg.Window.RecordTimes == config.RecordTimesProducer {
		return nil
	}
	topic := s.Cfg.Kafka.InputTopic
	tt, err := source.TimestampType(ctx, s.Brokers, s.Transport, topic)
	switch {
	case errors.Is(err, source.ErrDescribeConfigsDenied):
		return fmt.Errorf("%w: window.record_times broker needs the input topic's message.timestamp.type, and the brokers refused to describe its config: "+
			"grant the stage's principal DESCRIBE_CONFIGS on topic %s (kafka-acls --bootstrap-server BROKER --add --allow-principal User:STAGE --operation DescribeConfigs --topic %s). "+
			"Only if the topic has producer-set times and you accept what that gives up, set window.record_times: producer: %w", errRecordTimes, topic, topic, err)
	case err != nil:
		return err
	case tt == source.TimestampLogAppendTime:
		return nil
	}
	return fmt.Errorf("%w: input topic %s has message.timestamp.type=%s: its record times are set by producers, so whether a record appended more than "+
		"window.allowed_lateness after its own record time (a producer retry, a stalled producer, a producer clock behind) counts would depend on whether "+
		"the stage was lagging when it was appended, i.e. on other users' load. Let the brokers set them: "+
		"kafka-configs --bootstrap-server BROKER --alter --entity-type topics --entity-name %s --add-config message.timestamp.type=LogAppendTime "+
		"(records already written keep their producer times). Or accept producer times explicitly with window.record_times: producer, which gives up "+
		"that guarantee for such records (README, \"Windows and watermarks\")", errRecordTimes, topic, tt, topic)
}

// CheckRecordTimes is checkRecordTimesOnce at start: a refusal is
// returned; a transient error is logged and retried every 2s until ctx ends
// (the stage waits for its brokers as it does to consume).
func (s *Node) CheckRecordTimes(ctx context.Context) error {
	for {
		err := s.checkRecordTimesOnce(ctx)
		if err == nil || errors.Is(err, errRecordTimes) || ctx.Err() != nil {
			return err
		}
		s.Log.Warn("cannot check the input topic's message.timestamp.type yet; retrying", zap.Error(err))
		if retry.Sleep(ctx, 2*time.Second) != nil {
			return ctx.Err()
		}
	}
}

// RecheckRecordTimes is checkRecordTimesOnce at a generation's start: a
// refusal stops the stage; a transient error is logged (the start's check
// passed, and the next generation checks again).
func (s *Node) RecheckRecordTimes(ctx context.Context) bool {
	err := s.checkRecordTimesOnce(ctx)
	switch {
	case err == nil:
		return true
	case errors.Is(err, errRecordTimes):
		s.Fail(err)
		return false
	case ctx.Err() == nil:
		s.Log.Warn("cannot re-check the input topic's message.timestamp.type at this generation's start", zap.Error(err))
	}
	return true
}

// NewWatermarks is the watermarks of a session reading parts, with the
// clock-skew margin (window.Watermarks).
func (s *Node) NewWatermarks(cfg *config.Config, parts []int) *window.Watermarks {
	return window.NewWatermarks(parts, s.Arrival, cfg.Window.Lateness().D(), cfg.Window.IdlePartitionTimeout.D(), endFresh, s.Now).
		WithClockSkewMargin(cfg.Window.ClockSkewMargin.D())
}

// partitionCounts is a counter per input partition.
type partitionCounts struct {
	mu sync.Mutex // guards m
	m  map[int]int64
}

func (c *partitionCounts) add(p int, n int64) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[int]int64{}
	}
	c.m[p] += n
	c.mu.Unlock()
}

func (c *partitionCounts) snapshot() map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}

// BrokerTimeRegressions returns, per input partition read since the stage
// started, how many times a broker-set record time (LogAppendTime) was
// earlier than the one before it on the partition (a leader change to a
// broker whose clock is behind, a clock stepped back).
func (s *Node) BrokerTimeRegressions() map[int]int64 { return s.brokerRegressions.snapshot() }

// BrokerTimeRegressionsBeyondMargin returns, per input partition, how many
// of BrokerTimeRegressions went back more than window.clock_skew_margin
// below the largest broker time read (each also logged): the ones after
// which records may have been dropped as late.
func (s *Node) BrokerTimeRegressionsBeyondMargin() map[int]int64 {
	return s.brokerRegressionsBeyond.snapshot()
}

// BrokerClock follows one partition's broker-set record times (consume).
type BrokerClock struct {
	have      bool
	last, max int64 // the previous and the largest broker time read, ms
}

// NoteBrokerTime records the broker time ms of partition p's next record:
// a time earlier than the previous one is a regression, counted; one more
// than the clock-skew margin below the largest is logged, since the
// frontier may then have closed windows that records behind it still
// belong to (they are dropped as late and counted).
func (s *Node) NoteBrokerTime(p int, c *BrokerClock, ms int64) {
	if !c.have {
		c.have, c.last, c.max = true, ms, ms
		return
	}
	if ms < c.last {
		s.brokerRegressions.add(p, 1)
		if back, margin := c.max-ms, s.Cfg.Window.ClockSkewMargin.D().Milliseconds(); back > margin {
			s.brokerRegressionsBeyond.add(p, 1)
			s.Log.Warn("broker time ran backwards on an input partition by more than window.clock_skew_margin (a leader change to a broker whose clock is behind, or a clock step?): "+
				"records behind it may be dropped as late; check NTP on the brokers, or raise the margin",
				zap.Int("partition", p), zap.Duration("back", time.Duration(back)*time.Millisecond),
				zap.Duration("clock_skew_margin", time.Duration(margin)*time.Millisecond))
		}
	}
	c.last = ms
	c.max = max(c.max, ms)
}
