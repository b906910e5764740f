package single

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/consume"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/source"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// stage is the single-process stage's roles on one Node: the member of
// the consumer group that owns every input partition, counting and
// releasing (package doc).
type stage struct{ *node.Node }

// Run runs the single-process stage on n until ctx is cancelled (a soft
// stop: it then stops reading, finishes the release in flight, bounded by
// the drain timeout, commits what is released, leaves the group and
// returns nil) or n.Fail is called. Other errors are returned.
func Run(ctx context.Context, n *node.Node) error {
	s := &stage{n}
	if !s.Cfg.State.KafkaLedger() {
		// state.ledger bolt: the state.dir file lock decides which process
		// is active; a standby sharing state.dir waits for it here.
		led, err := s.OpenLedger(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		defer led.Close()
		if err := s.Attach(ctx, led); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		// Anything recorded but not acknowledged before the last stop goes
		// out first, with the recorded values.
		if err := s.RepublishPending(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	// state.ledger kafka: no lock here. The consumer group decides which
	// member is active (it is assigned the input partitions); that member
	// opens the release log for its generation (runGeneration), fencing
	// every older writer of the log's transactional id.

	defer s.Ready.Draining.Store(true)
	context.AfterFunc(ctx, func() { s.Ready.Draining.Store(true) })

	cg, err := s.newConsumerGroup(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// On a stop the group is closed (and left) within what remains of the
	// drain timeout, counted from the stop: kafka-go's Close alone may wait
	// out a JoinGroup in flight (source/group.go).
	var stoppedAt atomic.Int64
	context.AfterFunc(ctx, func() { stoppedAt.Store(time.Now().UnixNano()) })
	defer func() {
		limit := s.Drain
		if t := stoppedAt.Load(); t != 0 {
			limit -= time.Since(time.Unix(0, t))
		}
		cg.Close(limit)
	}()

	progress := time.NewTicker(10 * time.Second)
	defer progress.Stop()
	go func() { // owner: Run; ends with ctx
		for {
			select {
			case <-ctx.Done():
				return
			case <-progress.C:
				s.LogProgress()
			}
		}
	}()

	standbys := 0 // standby generations in a row
	for {
		gen, err := cg.Next(ctx)
		if ctx.Err() != nil {
			s.LogProgress()
			return nil
		}
		if err != nil {
			if errors.Is(err, kafka.ErrGroupClosed) {
				if !cg.Regrouping() {
					return nil
				}
				// A session closed the group to rejoin it: the input topic
				// has partitions this group has not assigned, and kafka-go's
				// partition watch did not start a new generation.
				cg.WaitClosed()
				s.Log.Info("rejoining the consumer group: the input topic has partitions the group has not assigned")
				next, err := s.newConsumerGroup(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				cg = next
				continue
			}
			// kafka-go paces its retries itself: the next JoinGroup after
			// RebalanceInProgress waits in the broker, any other error
			// backs off JoinGroupBackoff. Waiting here as well would only
			// leave this member out of a rebalance in progress.
			s.Log.Warn("consumer group: waiting for next generation", zap.Error(err))
			continue
		}
		switch s.runGeneration(ctx, gen, source.StandbyWait(standbys, s.Cfg.Kafka.SessionTimeout.D()), cg.RegroupFunc()) {
		case source.GenerationDone:
			standbys = 0
		case source.GenerationStandby:
		case source.GenerationRejoin:
			standbys++
			cg.Close(source.RejoinCloseLimit)
			next, err := s.newConsumerGroup(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			cg = next
		}
	}
}

// newConsumerGroup joins the group (source.GroupConfig.Join), retrying
// while the broker is unreachable.
func (s *stage) newConsumerGroup(ctx context.Context) (*source.Member, error) {
	return s.Group.Join(ctx, s.Ready.SetConnected)
}

// runGeneration runs one generation: as the owner of the input partitions
// until the generation or ctx ends, or, assigned nothing, as a standby
// (source/group.go) that rejoins after standbyWait. regroup closes the group so
// that Run rejoins it (partitions the generation was not assigned).
func (s *stage) runGeneration(ctx context.Context, gen *kafka.Generation, standbyWait time.Duration, regroup func()) source.GenerationEnd {
	topic := s.Cfg.Kafka.InputTopic
	assigns := gen.Assignments[topic]
	if len(assigns) == 0 {
		if s.Cfg.State.KafkaLedger() {
			// No state.dir lock tells a live standby from a dead owner:
			// another member owning the partitions may well be alive (a
			// standby on another machine). Never rejoin to drop it; the
			// group drops a dead owner when its session expires.
			standbyWait = -1
		}
		return s.Group.Standby(ctx, gen, standbyWait)
	}
	var led *kafkalog.Log // the Kafka release log (state.ledger: kafka); nil otherwise
	if s.Cfg.State.KafkaLedger() {
		var err error
		led, err = s.OpenKafkaLedger(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.Fail(err)
			}
			return source.GenerationDone
		}
		defer func() {
			s.Ready.StateLoaded.Store(false)
			s.Ready.Releasing.Store(false)
			_ = led.Close()
		}()
		if err := s.Attach(ctx, led); err != nil {
			if ctx.Err() == nil {
				s.Fail(err)
			}
			return source.GenerationDone
		}
	}
	sets, err := consume.NewWindowSets(s.Cfg)
	if err != nil {
		s.Fail(err)
		return source.GenerationDone
	}
	sess := &generation{gen: gen, Session: &consume.Session{
		Topic:    topic,
		Trackers: make(map[int]*source.OffsetTracker, len(assigns)),
		Sets:     sets,
		First:    s.Meta.FirstWindow,
	}}
	for _, a := range assigns {
		sess.Parts = append(sess.Parts, a.ID)
		start := a.Offset
		if start < 0 {
			start = -1
		}
		sess.Trackers[a.ID] = source.NewOffsetTracker(start)
	}
	sess.WM = s.NewWatermarks(s.Cfg, sess.Parts)
	if !s.RecheckRecordTimes(ctx) { // partitions added or members changed: the topic again
		return source.GenerationDone
	}
	// The first window of this session comes from the ledger only, never
	// from the data (resumeWindow).
	next, err := s.ResumeWindow()
	if err != nil {
		s.Fail(fmt.Errorf("read ledger: %w", err))
		return source.GenerationDone
	}
	sess.Next = next
	if err := s.CheckNeighbour(next); err != nil {
		s.Fail(err)
		return source.GenerationDone
	}
	if led != nil {
		// The partition count this generation counts with (the group's
		// balancer gives the active member every partition), recorded in
		// the release log as the distributed mode does: a later switch to
		// the distributed mode then finds the count its windows were
		// counted with instead of none, which it would take for an older
		// version's log ("partitions_changed" from 0 on windows counted
		// whole). The single-process mode counts every partition in one
		// process, so a change of the count leaves none of its own windows
		// incomplete; a change is recorded all the same (from the count
		// recorded before), for a distributed session that follows while
		// producers may still write with the old count.
		if _, err := led.NotePartitions(ctx, len(assigns), s.Now().UnixMilli(), next, false); err != nil {
			if ctx.Err() == nil {
				s.Fail(fmt.Errorf("record the input partition count in the release log: %w", err))
			}
			return source.GenerationDone
		}
	}
	moved, _, err := s.LimitNewHistograms(ctx, next, nil)
	if err != nil {
		s.Fail(err)
		return source.GenerationDone
	}
	if moved && s.Cfg.State.KafkaLedger() {
		assigns = s.fromEarliest(ctx, assigns, sess, next)
	}
	if sess.Adm, sess.ViewAdm, err = s.restoreAdmissions(next); err != nil {
		s.Fail(fmt.Errorf("read ledger: %w", err))
		return source.GenerationDone
	}
	if err := s.CheckContinuity(ctx); err != nil {
		// A standby with its own empty state.dir taking over after the
		// active instance published: stop rather than release again.
		s.Fail(err)
		return source.GenerationDone
	}
	s.Log.Info("assigned partitions", zap.Int32("generation", gen.ID), zap.Ints("partitions", sess.Parts))
	s.Ready.Assigned.Store(true)
	defer s.Ready.Assigned.Store(false)
	s.ResetLag()

	// ctx ends on a soft stop; each goroutine also watches its
	// generation's context (rebalance or group close). kafka-go ends the
	// generation as soon as one of its goroutines returns, and that cancels
	// a release being published: on a soft stop the partition consumers
	// therefore stay (idle) until the releaser has drained — published
	// what it recorded and committed — or the generation ends otherwise.
	// Without that, a stop during a release left the window recorded but
	// its offsets uncommitted, and the next start re-read its events as
	// late.
	var wg sync.WaitGroup
	drained := make(chan struct{})
	for _, a := range assigns {
		p, off := a.ID, a.Offset
		wg.Add(1)
		gen.Start(func(gctx context.Context) {
			defer wg.Done()
			c, cancel := node.JoinContexts(ctx, gctx)
			defer cancel()
			consume.Consume(c, s.Node, sess.Session, p, off)
			select {
			case <-drained:
			case <-gctx.Done():
			}
		})
	}
	wg.Add(1)
	gen.Start(func(gctx context.Context) {
		defer wg.Done()
		defer close(drained)
		s.releaseLoop(ctx, gctx, sess, regroup)
	})
	wg.Wait()
	sess.ResetSets()
	s.Log.Info("generation ended", zap.Int32("generation", gen.ID))
	return source.GenerationDone
}

// generation is the state of one consumer-group generation: its counting
// session and what its releaser keeps. Everything in it is dropped when
// the generation ends: a new owner re-reads unreleased windows from the
// committed offsets.
type generation struct {
	*consume.Session
	gen *kafka.Generation
	// Used by the releaser only (allAssigned): when to count the input
	// topic's partitions again, and since when windows are held for
	// partitions this generation was not assigned.
	recheckAt, heldSince time.Time
}

// fromEarliest (single-process mode, state.ledger: kafka) reads every
// assigned input partition from where counting window next on needs,
// instead of the group's committed offset, when the release log says the
// windows from next on may have been counted elsewhere
// (limitNewHistograms' moved): after the distributed mode, the group's
// offsets are its bounders' (committed for the lag tools), past the events
// of windows they emitted and the releaser had not released — resuming
// there would release those windows without them. Every retained event of
// a window from next on is counted again; earlier ones are late. Where
// that starts is node.Node.FirstOffset of the start of the longest window
// open at next (node.Node.CountFrom), as the distributed mode's first
// start seeks: with window.watermark arrival, the first offset whose
// record time can count, not the earliest (issue 28 item 4: the whole
// input retention was read again); with event, the earliest. Until this
// mode releases a window and commits, every session does so again.
func (s *stage) fromEarliest(ctx context.Context, assigns []kafka.PartitionAssignment, sess *generation, next int64) []kafka.PartitionAssignment {
	out := slices.Clone(assigns)
	skipped := false // some partition had a committed offset to pass over
	var cl *kgo.Client
	if s.Arrival {
		var err error
		if cl, err = kgo.NewClient(append(slices.Clone(s.Kgo), kgo.SeedBrokers(s.Brokers...))...); err != nil {
			s.Log.Warn("cannot seek the input by record time (reading from the earliest offsets instead)", zap.Error(err))
		} else {
			defer cl.Close()
		}
	}
	from := s.CountFrom(next)
	var past int64 // records skipped as too old to count
	for i := range out {
		skipped = skipped || out[i].Offset >= 0
		out[i].Offset = kafka.FirstOffset
		sess.Trackers[out[i].ID] = source.NewOffsetTracker(-1)
		if cl == nil {
			continue
		}
		o, start, err := s.FirstOffset(ctx, cl, sess.Topic, out[i].ID, from)
		if err != nil {
			s.Log.Warn("cannot seek the input partition by record time (reading it from its earliest offset instead)", zap.Int("partition", out[i].ID), zap.Error(err))
			continue
		}
		out[i].Offset = o
		sess.Trackers[out[i].ID] = source.NewOffsetTracker(o)
		past += o - start
	}
	s.Stats.FirstStartSkipped.Add(past)
	if !skipped {
		return out
	}
	s.Log.Warn("the release log was last used by the distributed mode, another progress topic, or holds no release of this mode yet: "+
		"every input partition is read from where the windows from the resume window on start (with window.watermark arrival, the first record recent enough to count in them; else the earliest offset), not resumed from the group's offsets; earlier events are late",
		zap.String("resume_window", release.RFC3339(next)), zap.String("count_from", release.RFC3339(from)), zap.Int64("skipped_records", past))
	return out
}

func (s *stage) restoreAdmissions(next int64) (*aggregate.Admissions, map[int64]*aggregate.Admissions, error) {
	p := s.PeriodOf(next)
	return consume.RestoreAdmissions(s.Cfg, p, func(view int64) (map[uint64]uint16, error) {
		if view == 0 {
			return s.Ledger.Admissions(p)
		}
		return s.Ledger.ViewAdmissions(p, view)
	})
}
