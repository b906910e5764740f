package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/source"
	"github.com/dpstage/stage/window"
)

// ErrRunTwice: Run was called on a Stage that has run already.
var ErrRunTwice = errors.New("pipeline: a Stage runs once (build another with New)")

// Run consumes until ctx is cancelled (soft stop): it then stops reading,
// finishes the release in flight (bounded by DrainTimeout), commits what is
// released, leaves the group and returns nil. Other errors are returned.
//
// A Stage is single-use: Run closes its output writers and the ledger when
// it returns, and a second call returns ErrRunTwice at once.
func (s *Stage) Run(parent context.Context) (runErr error) {
	if s.ran.Swap(true) {
		return ErrRunTwice
	}
	// fail ends the run with an error (see Stage.fail); a cancelled parent
	// is a soft stop and returns nil.
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	s.fail = func(err error) {
		if err == nil {
			err = errors.New("pipeline: stopped by a failure that gave no error")
		}
		s.log.Error("stopping the stage", zap.Error(err))
		cancel(&fatalError{err})
	}
	defer func() { runErr = runResult(runErr, context.Cause(ctx)) }()
	defer s.sink.Close()
	if s.dlq != nil {
		defer s.dlq.Close()
	}
	// The input topic's record times, before anything is read (both modes;
	// recordtime.go).
	if err := s.checkRecordTimes(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if s.cfg.Kafka.Distributed.Enabled {
		return s.runDistributed(ctx)
	}
	if !s.cfg.State.KafkaLedger() {
		// state.ledger bolt: the state.dir file lock decides which process
		// is active; a standby sharing state.dir waits for it here.
		led, err := s.openLedger(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		defer led.Close()
		if err := s.attach(ctx, led); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		// Anything recorded but not acknowledged before the last stop goes
		// out first, with the recorded values.
		if err := s.republishPending(ctx); err != nil {
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

	defer s.ready.draining.Store(true)
	context.AfterFunc(ctx, func() { s.ready.draining.Store(true) })

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
		limit := s.drain
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
				s.logProgress()
			}
		}
	}()

	standbys := 0 // standby generations in a row
	for {
		gen, err := cg.Next(ctx)
		if ctx.Err() != nil {
			s.logProgress()
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
				s.log.Info("rejoining the consumer group: the input topic has partitions the group has not assigned")
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
			s.log.Warn("consumer group: waiting for next generation", zap.Error(err))
			continue
		}
		switch s.runGeneration(ctx, gen, source.StandbyWait(standbys, s.cfg.Kafka.SessionTimeout.D()), cg.RegroupFunc()) {
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

// fatalError is the cancel cause Stage.fail sets: it tells a failure from a
// requested stop whatever the failure's chain holds (a fenced releaser's
// error may wrap context.Canceled).
type fatalError struct{ err error }

func (f *fatalError) Error() string { return f.err.Error() }
func (f *fatalError) Unwrap() error { return f.err }

// runResult is what Run returns, given what its body returned and the
// cause of its context's cancellation (nil if not cancelled): only a
// requested stop — the parent cancelled before any failure — returns nil,
// so the process exits 0 only then. The cause is the first cancellation's,
// so a failure after the stop (a drain cut short) does not turn the stop
// into an error, and a stop after a failure does not hide it. A failure is
// recognised by its fatalError wrapper, never by what its chain contains.
func runResult(body, cause error) error {
	if body != nil {
		return body
	}
	if f, ok := cause.(*fatalError); ok {
		return f.err
	}
	return nil
}

// newConsumerGroup joins the group (source.GroupConfig.Join), retrying
// while the broker is unreachable.
func (s *Stage) newConsumerGroup(ctx context.Context) (*source.Member, error) {
	return s.group.Join(ctx, func() { s.ready.connected.Store(true) })
}

// session is the state of one consumer-group generation. Everything in it
// is dropped when the generation ends: a new owner re-reads unreleased
// windows from the committed offsets.
type session struct {
	gen      *kafka.Generation
	topic    string
	parts    []int
	wm       *window.Watermarks
	trackers map[int]*source.OffsetTracker
	// sets count the histograms, one per window size (windows.go).
	sets []*windowSet
	// first is the ledger's first window: earlier events are late.
	first int64
	// userKey, when set, keys the user hash of this session's decoders
	// instead of Stage.userKey (distributed mode: each input partition
	// has its own key, kept with its progress).
	userKey *siphash.Key
	// partitioner, when set (distributed mode), makes each partition's
	// decoder drop events whose user does not assign to the partition
	// among partitions (decode.Decoder.WithPartitionCheck).
	partitioner decode.Partitioner
	partitions  int
	// adm is the cross-window bound's state (contribution.
	// max_windows_per_user; nil when off), restored from the ledger at
	// the session's start: the admissions of the recorded windows of the
	// period of next.
	adm *aggregate.Admissions

	closeMu sync.RWMutex // guards next against adds into closed windows: workers add under RLock, the releaser closes under Lock
	// next is the start of the first window not yet closed.
	next int64

	// Used by the releaser only (allAssigned): when to count the input
	// topic's partitions again, and since when windows are held for
	// partitions this generation was not assigned.
	recheckAt, heldSince time.Time
}

// runGeneration runs one generation: as the owner of the input partitions
// until the generation or ctx ends, or, assigned nothing, as a standby
// (source/group.go) that rejoins after standbyWait. regroup closes the group so
// that Run rejoins it (partitions the generation was not assigned).
func (s *Stage) runGeneration(ctx context.Context, gen *kafka.Generation, standbyWait time.Duration, regroup func()) source.GenerationEnd {
	topic := s.cfg.Kafka.InputTopic
	assigns := gen.Assignments[topic]
	if len(assigns) == 0 {
		if s.cfg.State.KafkaLedger() {
			// No state.dir lock tells a live standby from a dead owner:
			// another member owning the partitions may well be alive (a
			// standby on another machine). Never rejoin to drop it; the
			// group drops a dead owner when its session expires.
			standbyWait = -1
		}
		return s.group.Standby(ctx, gen, standbyWait)
	}
	if s.cfg.State.KafkaLedger() {
		led, err := s.openKafkaLedger(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.fail(err)
			}
			return source.GenerationDone
		}
		defer func() {
			s.ready.stateLoaded.Store(false)
			s.ready.releasing.Store(false)
			_ = led.Close()
		}()
		if err := s.attach(ctx, led); err != nil {
			if ctx.Err() == nil {
				s.fail(err)
			}
			return source.GenerationDone
		}
	}
	sets, err := newWindowSets(s.cfg)
	if err != nil {
		s.fail(err)
		return source.GenerationDone
	}
	sess := &session{
		gen:      gen,
		topic:    topic,
		trackers: make(map[int]*source.OffsetTracker, len(assigns)),
		sets:     sets,
		first:    s.meta.FirstWindow,
	}
	for _, a := range assigns {
		sess.parts = append(sess.parts, a.ID)
		start := a.Offset
		if start < 0 {
			start = -1
		}
		sess.trackers[a.ID] = source.NewOffsetTracker(start)
	}
	sess.wm = s.newWatermarks(s.cfg, sess.parts)
	if !s.recheckRecordTimes(ctx) { // partitions added or members changed: the topic again
		return source.GenerationDone
	}
	// The first window of this session comes from the ledger only, never
	// from the data (resumeWindow).
	next, err := s.resumeWindow()
	if err != nil {
		s.fail(fmt.Errorf("read ledger: %w", err))
		return source.GenerationDone
	}
	sess.next = next
	if err := s.checkNeighbour(next); err != nil {
		s.fail(err)
		return source.GenerationDone
	}
	moved, err := s.limitNewHistograms(ctx, next)
	if err != nil {
		s.fail(err)
		return source.GenerationDone
	}
	if moved && s.cfg.State.KafkaLedger() {
		assigns = s.fromEarliest(assigns, sess, next)
	}
	if sess.adm, err = s.restoreAdmissions(next); err != nil {
		s.fail(fmt.Errorf("read ledger: %w", err))
		return source.GenerationDone
	}
	if err := s.checkContinuity(ctx); err != nil {
		// A standby with its own empty state.dir taking over after the
		// active instance published: stop rather than release again.
		s.fail(err)
		return source.GenerationDone
	}
	s.log.Info("assigned partitions", zap.Int32("generation", gen.ID), zap.Ints("partitions", sess.parts))
	s.ready.assigned.Store(true)
	defer s.ready.assigned.Store(false)
	s.lagMu.Lock()
	s.lag = make(map[int]int64, len(sess.parts))
	s.lagMu.Unlock()

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
			c, cancel := joinContexts(ctx, gctx)
			defer cancel()
			s.consume(c, sess, p, off)
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
	sess.resetSets()
	s.log.Info("generation ended", zap.Int32("generation", gen.ID))
	return source.GenerationDone
}

// resumeWindow is the first window a new session may count into: the
// window after the last recorded one (windows are recorded whole, so the
// last recorded window is complete; events for it are late, counted as
// such, never counted into a window that is not released again; a
// histogram added by a config change starts there), or the first window of
// the ledger's metadata. The last recorded base boundary is the largest
// window end recorded (a histogram's own, longer window ends at a base
// boundary but starts before the last base window); ledgers written before
// that was recorded hold base windows only.
func (s *Stage) resumeWindow() (int64, error) {
	end, ok, err := s.ledger.LastWindowEnd()
	if err != nil || ok {
		return end, err
	}
	last, ok, err := s.ledger.LastWindow()
	if err != nil || !ok {
		return s.meta.FirstWindow, err
	}
	return last + s.sizeMs, nil
}

// joinContexts returns a context cancelled when either parent is.
func joinContexts(a, b context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(a)
	stop := context.AfterFunc(b, cancel)
	return c, func() { stop(); cancel() }
}

// loadUserKey sets the user hash key from the ledger's metadata, recording a
// new random one at the first start (unless Options.HashKey set it). The
// hash of a user must be the same after a restart: the cross-window bound's
// admissions are kept in the ledger under it.
func (s *Stage) loadUserKey(ctx context.Context) error {
	if s.hashKeySet {
		return nil
	}
	b, err := s.ledger.UserHashKey(ctx, func() ([]byte, error) {
		k, err := siphash.NewKey()
		return k.Bytes(), err
	})
	if err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	s.userKey = siphash.KeyFromBytes(b)
	return nil
}

// restoreAdmissions returns the cross-window bound's state for a session
// whose first window is next (nil when contribution.max_windows_per_user
// is off): the users admitted to the recorded windows of next's period,
// from the ledger. Windows are recorded whole with their admissions, so
// this is exactly the state after the last recorded window, whatever was
// held in memory before (a window closed but not recorded is computed
// again from its events, with the same admissions).
// checkNeighbour refuses to charge the budget period of next under
// privacy.neighbour add_remove when its first charge was made under
// replace: the period's guarantee is the replace relation's, and an
// add_remove calibration charges each unit its add_remove curve c_a, about
// half what the same unit costs under replace (c_r = 2c_a for the Gaussian
// and Theorem-2 Dirichlet). The weaker relation takes effect from the next
// period. (A change to replace is stricter and allowed: a replace curve
// bounds the add_remove one.)
func (s *Stage) checkNeighbour(next int64) error {
	p := s.periodOf(next)
	lim, ok, err := s.ledger.PeriodLimit(p)
	if err != nil {
		return fmt.Errorf("read ledger: %w", err)
	}
	if ok && lim.Neighbour == config.NeighbourReplace && s.cfg.Privacy.Neighbour == config.NeighbourAddRemove {
		return fmt.Errorf("%w: privacy.neighbour is add_remove, but the budget period starting %s was charged under replace, whose guarantee add_remove charges would not keep; "+
			"keep neighbour: replace until that period ends (%s), then change it",
			ErrConfigChanged, release.RFC3339(p), release.RFC3339(p+s.periodMs))
	}
	return nil
}

// limitNewHistograms tells the releaser since when each histogram has been
// counted without a break (ledger.HistogramSince, keyed by name and window
// size): a histogram with a window of its own that the previous session
// did not have releases only its windows that start at or after next.
// Its window open at next began while another config committed offsets
// past some of its events, so what a restart would count into it depends
// on where those commits stopped — on other users' events (ground rule 7).
//
// moved reports that the windows from next on may have been counted
// elsewhere than where this session resumes: the log's last session ran in
// the other mode (single-process or distributed) or on another progress
// topic — or this session's home has released nothing since it took over
// — or the log holds no release yet (fromEarliest).
func (s *Stage) limitNewHistograms(ctx context.Context, next int64) (moved bool, err error) {
	keys, home := s.sinceKeys()
	hists := len(s.cfg.Histograms)
	since, err := s.ledger.HistogramSince(ctx, keys, next)
	if err != nil {
		return false, fmt.Errorf("read ledger: %w", err)
	}
	_, released, err := s.ledger.LastWindow()
	if err != nil {
		return false, fmt.Errorf("read ledger: %w", err)
	}
	moved = !released || since[home] == next && since[admissionsCanary] != next
	byIndex := make(map[int]int64, hists)
	for i, k := range keys[:hists] {
		byIndex[i] = since[k]
	}
	s.rel.SetSince(byIndex)
	if err := s.checkAdmissionsHome(next, since[home] == next, since[admissionsCanary] == next); err != nil {
		return moved, err
	}
	return moved, s.checkProgressID(next, since)
}

// fromEarliest (single-process mode, state.ledger: kafka) reads every
// assigned input partition from its earliest offset instead of the
// group's committed one when the release log says the windows from next
// on may have been counted elsewhere (limitNewHistograms' moved): after
// the distributed mode, the group's offsets are its bounders' (committed
// for the lag tools), past the events of windows they emitted and the
// releaser had not released — resuming there would release those windows
// without them. From the earliest offset every retained event of a window
// from next on is counted again; earlier ones are late. Until this mode
// releases a window and commits, every session does so again.
func (s *Stage) fromEarliest(assigns []kafka.PartitionAssignment, sess *session, next int64) []kafka.PartitionAssignment {
	out := slices.Clone(assigns)
	skipped := false // some partition had a committed offset to pass over
	for i := range out {
		skipped = skipped || out[i].Offset >= 0
		out[i].Offset = kafka.FirstOffset
		sess.trackers[out[i].ID] = source.NewOffsetTracker(-1)
	}
	if !skipped {
		return out
	}
	s.log.Warn("the release log was last used by the distributed mode, another progress topic, or holds no release of this mode yet: "+
		"every input partition is read from its earliest offset, so the windows from the resume window on are counted from the input (earlier events are late), not resumed from the group's offsets",
		zap.String("resume_window", release.RFC3339(next)))
	return out
}

// sinceKeys are the release log's HistogramSince keys of the running
// config: one per histogram (its name and window size, in config order),
// then home, where the cross-window bound's admissions live
// (checkAdmissionsHome), and admissionsCanary.
func (s *Stage) sinceKeys() (keys []string, home string) {
	keys = make([]string, 0, len(s.cfg.Histograms)+2)
	for _, h := range s.cfg.Histograms {
		keys = append(keys, fmt.Sprintf("%s@%d", h.Name, h.WindowSize(s.cfg.Window.Size).D().Milliseconds()))
	}
	home = admissionsInLedger
	if s.cfg.Kafka.Distributed.Enabled {
		home = admissionsInProgress + s.cfg.Kafka.ProgressTopic()
	}
	return append(append(keys, home, admissionsCanary), s.progressIDKeys()...), home
}

// The release log's HistogramSince keys that say where the cross-window
// bound's admissions were kept: admissionsInLedger by the single-process
// mode (in the log itself), admissionsInProgress + the progress topic by
// the distributed mode (with each source partition's progress), and
// admissionsCanary by both (kept from the first session of this version
// on: a log lacking it was last run by an older single-process stage).
const (
	admissionsInLedger   = "admissions@ledger"
	admissionsInProgress = "admissions@progress:"
	admissionsCanary     = "admissions@known"
)

// checkAdmissionsHome refuses, with contribution.max_windows_per_user, to
// run when the admissions of the current budget period were kept
// somewhere this session cannot read: a switch between the single-process
// and the distributed mode, or a new progress topic (a changed
// kafka.distributed.internal_topic_prefix or kafka.group_id over the same
// release log), after windows of the period were released. The users
// admitted to those windows would be admitted again — counted in more than
// K windows of the period, which the period's reservation does not cover.
// homeNew: this session's home key is new to the log; canaryNew: so is
// admissionsCanary (a log of an older, single-process version). A fresh
// log, or a session starting at a period's first window, has nothing to
// lose.
func (s *Stage) checkAdmissionsHome(next int64, homeNew, canaryNew bool) error {
	if s.cfg.Contribution.MaxWindowsPerUser <= 0 || s.periodOf(next) == next {
		return nil
	}
	moved := homeNew
	if !s.cfg.Kafka.Distributed.Enabled && canaryNew {
		moved = false // an older single-process log: its admissions are in it
	}
	if !moved {
		return nil
	}
	where := "the release log (the single-process mode)"
	if s.cfg.Kafka.Distributed.Enabled {
		where = "the progress topic " + s.cfg.Kafka.ProgressTopic()
	}
	return fmt.Errorf("%w: contribution.max_windows_per_user is on, and windows of the budget period starting %s were released with the cross-window bound's admissions kept elsewhere than %s "+
		"(the stage switched between the single-process and the distributed mode, or kafka.distributed.internal_topic_prefix or kafka.group_id changed over the same release log): "+
		"users admitted to those windows would be admitted again; revert the change until that period ends (%s), then make it",
		ErrConfigChanged, release.RFC3339(s.periodOf(next)), where, release.RFC3339(s.periodOf(next)+s.periodMs))
}

func (s *Stage) restoreAdmissions(next int64) (*aggregate.Admissions, error) {
	k := s.cfg.Contribution.MaxWindowsPerUser
	if k <= 0 {
		return nil, nil
	}
	adm, err := aggregate.NewAdmissions(k)
	if err != nil {
		return nil, err
	}
	p := s.periodOf(next)
	counts, err := s.ledger.Admissions(p)
	if err != nil {
		return nil, err
	}
	adm.Restore(p, counts)
	return adm, nil
}
