// Package pipeline runs the stage: it reads raw events from Kafka with a
// consumer group (one goroutine per assigned partition), decodes them, bounds
// each user's contribution, counts them into event-time windows, and when the
// watermark passes a window's end it charges the privacy budget and publishes
// one private normalized histogram per declared (histogram, group) to the
// output topic. Which watermark closes windows, and why, is below.
//
// Data flows one way: source (this package, kafka-go) → decode
// (decode) → bound and aggregate (aggregate) → charge (budget, with
// the durable ledger) → mechanism (mechanism) → sink (sink).
//
// # Which events count
//
// Whether an event counts depends only on that event's own times (ground
// rule 7): the argument, the arrival watermark (the default) and the
// opt-in event-time watermark are in package window's doc (window.Rule,
// window.Watermarks); handle applies the rule, the releaser closes windows
// as the watermark passes them.
//
// # Why kafka-go's ConsumerGroup and not its Reader
//
// kafka-go's Reader with a GroupID merges all assigned partitions into one
// stream and tells its user nothing about assignment or revocation. The stage
// needs both: per-partition watermarks, per-partition commit points that
// never pass an unreleased window's first offset, and dropping every open
// window when partitions move. ConsumerGroup/Generation gives exactly that: a
// generation lists its assignments, its Start goroutines are cancelled when
// the generation ends, and CommitOffsets commits what we choose. Each
// assigned partition is then read by a fetch loop on a connection to its
// leader (fetch.go), which `stage bench` measured as much cheaper per message
// than a partition-bound kafka.Reader, with read_committed isolation:
// records of aborted transactions and commit/abort markers are skipped, and
// nothing at or past the last stable offset (an open transaction) is read;
// such a partition is behind, not caught up (see window.Watermarks). Before closing
// a window the releaser checks that the generation was assigned every
// partition the input topic has (allAssigned).
//
// # One active instance
//
// A release covers every event of its window, whichever partition carried
// it, so one process must own every partition of the input topic. The stage
// joins its group with a balancer that assigns all partitions to one member
// (source/allone). A standby shares the active instance's state.dir and
// waits on the ledger's lock before it joins the group (continuity.go); it
// takes over, from the ledger and the committed offsets, when the active one
// exits.
package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/retry"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/sink"
	"github.com/dpstage/stage/source"
	"github.com/dpstage/stage/window"
)

// Options configure a Stage.
type Options struct {
	Config *config.Config
	Log    *zap.Logger
	// Brokers overrides Config.Kafka.Brokers (the embedded broker's address).
	Brokers []string
	// Dialer and Transport carry TLS/SASL; nil for plain TCP.
	Dialer    *kafka.Dialer
	Transport *kafka.Transport
	// Printer, when set, renders every release for humans.
	Printer *release.Printer
	// OnRelease, when set, is called after each unit is published (tests,
	// metrics, the HTTP API) with the time from the watermark passing the
	// window's end to the broker's acknowledgement (0 for republished units).
	OnRelease func(u *ledger.Unit, closeToPublish time.Duration)
	// DrainTimeout bounds how long a soft stop waits for in-flight releases.
	// Default 30s.
	DrainTimeout time.Duration
	// Now is the wall clock (tests). Default time.Now.
	Now func() time.Time
	// HashSeed, when set, keys the user hash (and so which users and events
	// the bounder selects) instead of a random per-process seed: for tests
	// that compute the expected bounded counts. Never set it in production:
	// a known seed lets producers predict which events count.
	HashSeed *maphash.Seed
}

// Stage is a running privatization stage.
type Stage struct {
	cfg       *config.Config
	log       *zap.Logger
	brokers   []string
	dialer    *kafka.Dialer
	transport *kafka.Transport
	plan      *plan.Plan
	ledger    *ledger.Ledger
	sink      *sink.Sink
	dlq       *sink.Sink // nil without kafka.dead_letter_topic
	stats     *Stats
	printer   *release.Printer
	onRel     func(*ledger.Unit, time.Duration)
	drain     time.Duration
	now       func() time.Time
	userSeed  maphash.Seed
	sizeMs    int64
	periodMs  int64
	// arrival: windows close by record (arrival) time, window.watermark
	// arrival; latenessMs is Window.Lateness (see handle).
	arrival     bool
	latenessMs  int64
	maxFutureMs int64           // events.max_future
	rng         *mechanism.Rand // used only by the releaser goroutine of the current session
	rule        window.Rule     // which events count (window.Rule.Decide)
	// group is how the stage is a member of its consumer group.
	group *source.GroupConfig
	// rel draws, charges and records closed windows (release.Releaser);
	// set by Run once the ledger is open, used by the releaser goroutine.
	rel *release.Releaser

	ready readiness

	lagMu sync.Mutex // guards lag
	// lag is the consumer lag per assigned partition (high-water mark −
	// offset − 1 of the last fetched message); reset on every generation.
	lag map[int]int64

	// ran: Run was called (a Stage runs once).
	ran atomic.Bool
	// fail ends Run with an error; set by Run.
	fail func(error)
	// meta is the ledger's metadata (first window, window size, period),
	// loaded or recorded by Run before anything is consumed.
	meta ledger.Meta

	// book is the budget book: every charge is checked against, and added
	// to, its whole period's total there (budget.Book). Set by Run once the
	// ledger is open; nil before.
	book atomic.Pointer[budget.Book]
}

// New validates opts, derives the privacy plan and opens the ledger.
func New(opts Options) (*Stage, error) {
	cfg := opts.Config
	if cfg == nil {
		return nil, errors.New("pipeline: nil config")
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	brokers := opts.Brokers
	if len(brokers) == 0 {
		brokers = cfg.Kafka.Brokers
	}
	if len(brokers) == 0 {
		return nil, errors.New("pipeline: no brokers (start the embedded broker or set kafka.brokers)")
	}
	pl, err := plan.DerivePlan(cfg)
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	rng, err := mechanism.NewRand()
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	s := &Stage{
		cfg:         cfg,
		log:         opts.Log,
		brokers:     brokers,
		dialer:      opts.Dialer,
		plan:        pl,
		stats:       newStats(),
		printer:     opts.Printer,
		onRel:       opts.OnRelease,
		drain:       opts.DrainTimeout,
		now:         opts.Now,
		userSeed:    maphash.MakeSeed(),
		sizeMs:      cfg.Window.Size.D().Milliseconds(),
		arrival:     cfg.Window.Arrival(),
		latenessMs:  cfg.Window.Lateness().D().Milliseconds(),
		maxFutureMs: cfg.Events.MaxFuture.D().Milliseconds(),
		periodMs:    cfg.Privacy.Budget.Period.D().Milliseconds(),
		rng:         rng,
		lag:         make(map[int]int64),
		transport:   opts.Transport,
	}
	s.rule = window.Rule{Arrival: s.arrival, SizeMs: s.sizeMs, LatenessMs: s.latenessMs, MaxFutureMs: s.maxFutureMs}
	if opts.HashSeed != nil {
		s.userSeed = *opts.HashSeed
	}
	if s.drain <= 0 {
		s.drain = 30 * time.Second
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.group = &source.GroupConfig{ID: cfg.Kafka.GroupID, Topic: cfg.Kafka.InputTopic, Brokers: brokers, Dialer: opts.Dialer,
		Transport: opts.Transport, SessionTimeout: cfg.Kafka.SessionTimeout.D(), RebalanceTimeout: cfg.Kafka.Rebalance().D(), Log: opts.Log}
	onRetry := func() { s.stats.PublishRetries.Add(1) }
	s.sink = sink.New(sink.Options{Brokers: brokers, Topic: cfg.Kafka.OutputTopic, Transport: opts.Transport, Log: opts.Log, OnRetry: onRetry})
	if cfg.Kafka.DeadLetterTopic != "" {
		s.dlq = sink.New(sink.Options{Brokers: brokers, Topic: cfg.Kafka.DeadLetterTopic, Transport: opts.Transport, Log: opts.Log,
			OnRetry: onRetry, RoundRobin: true})
	}
	return s, nil
}

// DropReasonHeader is the header carrying the drop reason on messages
// forwarded to the dead-letter topic.
const DropReasonHeader = sink.DropReasonHeader

// deadLetter forwards a malformed message to the dead-letter topic with its
// reason, retrying until acknowledged (the partition waits: nothing is lost,
// and the message's offset is not committed before it is forwarded).
func (s *Stage) deadLetter(ctx context.Context, m kafka.Message, reason decode.Reason) error {
	if s.dlq == nil {
		return nil
	}
	err := s.dlq.DeadLetter(ctx, m, reason)
	if err != nil && ctx.Err() == nil {
		// Refused for good (the dead-letter topic missing, no permission):
		// stop loudly rather than drop the event or stall the partition.
		s.fail(fmt.Errorf("dead-letter topic %q: %w", s.cfg.Kafka.DeadLetterTopic, err))
	}
	return err
}

// Plan returns the privacy plan in force.
func (s *Stage) Plan() *plan.Plan { return s.plan }

// Stats returns the live counters.
func (s *Stage) Stats() *Stats { return s.stats }

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
		s.log.Error("stopping the stage", zap.Error(err))
		cancel(err)
	}
	defer func() {
		if runErr == nil && parent.Err() == nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				runErr = cause
			}
		}
	}()
	defer s.sink.Close()
	led, err := s.openLedger(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	s.ledger = led
	defer led.Close()
	book, err := release.NewBook(s.plan, led)
	if err != nil {
		return fmt.Errorf("pipeline: budget book: %w", err)
	}
	s.book.Store(book)
	if s.rel, err = release.New(release.Options{Config: s.cfg, Plan: s.plan, Ledger: led, Book: book, Rand: s.rng,
		Log: s.log, Printer: s.printer, Now: s.now, OnExhausted: func() { s.stats.Exhausted.Add(1) }}); err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	if err := s.checkContinuity(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if s.meta, err = s.loadMeta(); err != nil {
		return err
	}
	if err := s.prune(); err != nil {
		return err
	}
	if err := s.replayRecent(256); err != nil {
		return err
	}
	// The spend of the period the next release falls in, from the ledger,
	// before anything is released: status and metrics show it from the
	// start (not only after the next window closes).
	next, err := s.resumeWindow()
	if err != nil {
		return err
	}
	if _, err := book.Status(s.periodOf(next)); err != nil {
		return err
	}
	s.ready.stateLoaded.Store(true)
	if s.dlq != nil {
		defer s.dlq.Close()
	}

	// Anything recorded but not acknowledged before the last stop goes out
	// first, with the recorded values.
	if err := s.republishPending(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

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
	agg      *aggregate.Aggregator
	avg      *aggregate.Averager // nil without average histograms

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
		return s.group.Standby(ctx, gen, standbyWait)
	}
	agg, err := aggregate.New(AggregateSpec(s.cfg))
	if err != nil {
		s.fail(fmt.Errorf("build aggregator: %w", err))
		return source.GenerationDone
	}
	sess := &session{
		gen:      gen,
		topic:    topic,
		trackers: make(map[int]*source.OffsetTracker, len(assigns)),
		agg:      agg,
	}
	if hs := AverageHists(s.cfg); len(hs) > 0 {
		if sess.avg, err = aggregate.NewAverager(hs); err != nil {
			s.fail(fmt.Errorf("build averager: %w", err))
			return source.GenerationDone
		}
	}
	for _, a := range assigns {
		sess.parts = append(sess.parts, a.ID)
		start := a.Offset
		if start < 0 {
			start = -1
		}
		sess.trackers[a.ID] = source.NewOffsetTracker(start)
	}
	sess.wm = window.NewWatermarks(sess.parts, s.arrival, s.cfg.Window.Lateness().D(), s.cfg.Window.IdlePartitionTimeout.D(), endFresh, s.now)
	// The first window of this session comes from the ledger only, never
	// from the data (resumeWindow).
	next, err := s.resumeWindow()
	if err != nil {
		s.fail(fmt.Errorf("read ledger: %w", err))
		return source.GenerationDone
	}
	sess.next = next
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
	agg.Reset()
	if sess.avg != nil {
		sess.avg.Reset()
	}
	s.log.Info("generation ended", zap.Int32("generation", gen.ID))
	return source.GenerationDone
}

// resumeWindow is the first window a new session may count into: the
// window after the last recorded one (windows are recorded whole, so the
// last recorded window is complete; events for it are late, counted as
// such, never counted into a window that is not released again; a
// histogram added by a config change starts there), or the first window of
// the ledger's metadata.
func (s *Stage) resumeWindow() (int64, error) {
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

// consume reads one partition in offset order.
func (s *Stage) consume(ctx context.Context, sess *session, p int, offset int64) {
	// A fetch loop on a kafka.Conn to the leader, not kafka-go's Reader
	// (see connFetcher): same offsets, same order, less per-message cost.
	r := source.NewFetcher(s.dialer, s.brokers, sess.topic, p, offset)
	r.Now = s.now
	r.OnReset = func(from, to int64) {
		if to > from {
			s.stats.RetentionSkipped.Add(to - from)
		}
		s.log.Warn("committed offset no longer retained by the broker; reading from the first retained offset (the records between were deleted unread and are not counted)",
			zap.Int("partition", p), zap.Int64("from", from), zap.Int64("to", to))
	}
	defer r.Close()
	dec, err := decode.New(s.cfg, s.userSeed)
	if err != nil {
		s.fail(fmt.Errorf("build decoder: %w", err))
		return
	}
	ev := dec.NewEvent()
	tracker := sess.trackers[p]
	maxMsg := s.cfg.Events.MaxMessageBytes
	loc := &partitionLocal{lateness: s.latenessMs, caughtUp: math.MinInt64, pubCaughtUp: math.MinInt64}
	maxFuture := s.cfg.Events.MaxFuture.D().Milliseconds()
	loc.wall = s.now().UnixMilli()
	loc.futureLimit = loc.wall + maxFuture
	// publishRead publishes what was read since the last publication: at
	// the end of a response the last records may not have looked like the
	// partition's end (a commit marker followed them).
	publishRead := func() {
		if loc.consumed > loc.published || loc.urgent {
			loc.publish(sess.wm, p, s.stats, s.sizeMs)
			loc.wall = s.now().UnixMilli()
			loc.futureLimit = loc.wall + s.cfg.Events.MaxFuture.D().Milliseconds()
		}
	}
	r.OnCaughtUp = func(sent time.Time) {
		// A fetch read to the high watermark: fetching works again, the
		// partition is read to its end, and with watermark arrival its
		// frontier advances by the wall clock (see window.Watermarks).
		if loc.failing {
			loc.failing = false
			sess.wm.SetFailing(p, false)
		}
		publishRead()
		s.setLag(p, 0)
		sess.wm.CaughtUpAt(p, sent.UnixMilli())
	}
	r.OnBehind = func(left int64) {
		// A fetch read to its end below the high watermark: records are
		// left, or held back by an open transaction (the last stable
		// offset). The partition is not caught up, and not idle.
		if loc.failing {
			loc.failing = false
			sess.wm.SetFailing(p, false)
		}
		publishRead()
		s.setLag(p, left)
		sess.wm.SetUnread(p)
	}
	r.OnSkipped = func(next int64) {
		// Offsets the fetcher passed over — commit and abort markers,
		// records of aborted transactions — need nothing more: offsets
		// may be committed past them.
		tracker.Processed(next - 1)
	}
	defer loc.flushStats(s.stats)
	for {
		m, err := r.Fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.ready.connected.Store(false)
			if !loc.failing {
				loc.failing = true
				sess.wm.SetFailing(p, true)
			}
			s.log.Warn("fetch failed; retrying", zap.Int("partition", p), zap.Error(err))
			if retry.Sleep(ctx, source.FetchRetryBackoff) != nil {
				return
			}
			continue
		}
		if !s.ready.connected.Load() {
			s.ready.connected.Store(true)
		}
		if loc.failing {
			loc.failing = false
			sess.wm.SetFailing(p, false)
		}
		loc.consumed++
		caughtUp := m.HighWaterMark-m.Offset <= 1
		if loc.consumed%256 == 0 || caughtUp {
			s.setLag(p, m.HighWaterMark-m.Offset-1)
		}
		recMs := m.Time.UnixMilli()
		if s.arrival {
			// A record time set by the broker (LogAppendTime) moves the
			// partition's frontier (window.Watermarks), never past the wall clock;
			// a producer-set one (CreateTime) does not: producers' clocks
			// and retries make it run backwards, and one record ahead would
			// close windows before the records behind it are read. Without
			// broker times a partition advances only when it is read to its
			// end.
			if r.BrokerTime() {
				loc.observe(min(recMs, loc.wall), s.sizeMs)
			} else if !loc.warnedCreateTime {
				loc.warnedCreateTime = true
				s.log.Warn("input partition has producer-set record times (CreateTime): windows close only when the partition is read to its end, so a backlog holds releases back; set message.timestamp.type=LogAppendTime on the input topic",
					zap.String("topic", sess.topic), zap.Int("partition", p))
			}
			if caughtUp {
				loc.caughtUp = r.Sent().UnixMilli()
			}
		}
		reason := decode.ReasonNone
		if maxMsg > 0 && len(m.Value) > maxMsg {
			reason = decode.ReasonOversized
		} else if r := dec.Decode(m.Value, ev); r != decode.ReasonNone {
			reason = r
		} else {
			loc.decoded++
			reason = s.handle(sess, p, m.Offset, recMs, ev, tracker, loc)
		}
		if reason != decode.ReasonNone {
			s.stats.Drop(reason)
			if err := s.deadLetter(ctx, m, reason); err != nil {
				return // ctx ended: the message is not marked processed
			}
			tracker.Processed(m.Offset)
		}
		if loc.urgent || caughtUp || loc.consumed-loc.published >= publishEvery {
			loc.publish(sess.wm, p, s.stats, s.sizeMs)
			loc.wall = s.now().UnixMilli()
			loc.futureLimit = loc.wall + maxFuture
		}
	}
}

// publishEvery is the most messages a partition's consumer reads between two
// publications of its event time and counters (see partitionLocal).
const publishEvery = 64

// partitionLocal is what one partition's consumer accumulates between
// publications to the watermarks and the stats, so that the per-message path
// takes no shared lock, reads no clock and writes no shared counter. It
// publishes after every publishEvery messages, whenever it has read all the
// partition held (the last message of a fetch at the high watermark), and
// at once after a message that can change a decision of the releaser (the
// times are record times with watermark arrival, event times with
// watermark event): the
// partition's first event, a new smallest event time (watermark
// bookkeeping only: the first window comes from the ledger, not the data), or a new largest event time whose watermark lies in a later
// window than the one published (only window.Start(max − lateness) decides
// which windows close). The releaser therefore closes the same windows at
// the same messages as with per-message updates; only idle detection and
// the counters lag, by fewer than publishEvery messages.
type partitionLocal struct {
	lateness int64 // ms

	have               bool
	maxEvent, minEvent int64 // event time range seen on this partition
	pubMax, pubMin     int64 // the range published
	pubClose           int64 // window.Start(pubMax − lateness)
	urgent             bool  // publish after this message
	live               bool  // an event was counted since the last publication

	consumed, published int64 // messages read; messages read at the last publication

	// futureLimit: events after this time (Unix ms; wall clock +
	// events.max_future at the last publication) are dropped (watermark
	// event; with watermark arrival the limit is the record time +
	// events.max_future). wall is the wall clock at the last publication.
	futureLimit, wall int64
	// failing: the last fetch failed (published at once, see
	// watermarks.setFailing).
	failing bool
	// warnedCreateTime: the partition's producer-set record times were
	// logged once (arrival mode).
	warnedCreateTime bool
	// caughtUp (watermark arrival): the send time (Unix ms) of the last
	// fetch that reached the high watermark; pubCaughtUp the one published.
	caughtUp, pubCaughtUp int64

	// Counters not yet added to Stats.
	decoded, counted, boundEvents, boundGroups, boundCapacity int64
	boundDisplaced, flushedConsumed                           int64
}

// observe records a counted event's time; sizeMs is the window size.
func (l *partitionLocal) observe(t, sizeMs int64) {
	l.live = true
	if !l.have {
		l.have, l.maxEvent, l.minEvent, l.urgent = true, t, t, true
		return
	}
	if t > l.maxEvent {
		l.maxEvent = t
		if window.Start(t-l.lateness, sizeMs) != l.pubClose {
			l.urgent = true
		}
	}
	if t < l.minEvent {
		l.minEvent, l.urgent = t, true
	}
}

// publish hands the event-time range and the counters on.
func (l *partitionLocal) publish(wm *window.Watermarks, p int, st *Stats, sizeMs int64) {
	// Only counted events keep a partition live: one that delivers nothing
	// but malformed, late or too-far-ahead messages goes idle and stops
	// holding the watermark back (garbage cannot stall every release).
	if l.caughtUp > l.pubCaughtUp {
		wm.CaughtUpAt(p, l.caughtUp)
		l.pubCaughtUp = l.caughtUp
	}
	switch {
	case !l.live:
	case l.maxEvent != l.pubMax || l.minEvent != l.pubMin:
		wm.Observe(p, l.minEvent) // lowers the minimum; cannot raise the maximum
		wm.Observe(p, l.maxEvent)
		l.pubMax, l.pubMin = l.maxEvent, l.minEvent
		l.pubClose = window.Start(l.maxEvent-l.lateness, sizeMs)
	default:
		wm.Touch(p)
	}
	l.live = false
	l.urgent = false
	l.published = l.consumed
	l.flushStats(st)
}

// flushStats adds the accumulated counters to st.
func (l *partitionLocal) flushStats(st *Stats) {
	st.Consumed.Add(l.consumed - l.flushedConsumed)
	l.flushedConsumed = l.consumed
	st.Decoded.Add(l.decoded)
	st.Counted.Add(l.counted)
	if l.boundEvents > 0 {
		st.DropN(decode.ReasonBoundUserEvents, l.boundEvents)
	}
	if l.boundGroups > 0 {
		st.DropN(decode.ReasonBoundUserGroups, l.boundGroups)
	}
	if l.boundCapacity > 0 {
		st.DropN(decode.ReasonBoundCapacity, l.boundCapacity)
	}
	if l.boundDisplaced > 0 {
		st.DropN(decode.ReasonBoundDisplaced, l.boundDisplaced)
	}
	l.decoded, l.counted, l.boundEvents, l.boundGroups, l.boundCapacity, l.boundDisplaced = 0, 0, 0, 0, 0, 0
}

// handle bounds and counts a decoded event whose record (arrival) time is
// recMs. It returns a drop reason for an event that must go to the
// dead-letter topic, decode.ReasonNone otherwise.
//
// With watermark arrival (the default) whether the event counts depends on
// the event alone: it belongs to the window w of its own event time and
// counts if its event time is at most events.max_future after its record
// time and its record time is before w's end + lateness; the window stays
// open until every partition has been read up to that record time
// (window.Watermarks), so neither other users' timestamps nor consumer lag decide
// it. With watermark event it also counts only while its window is open,
// which the largest event times seen decide (the opt-in trust assumption).
func (s *Stage) handle(sess *session, p int, offset, recMs int64, ev *decode.Event, tracker *source.OffsetTracker, loc *partitionLocal) decode.Reason {
	w, reason := s.rule.Decide(ev.TimeMs, recMs, loc.futureLimit)
	switch reason {
	case decode.ReasonNone:
	case decode.ReasonLate:
		s.late(offset, tracker) // arrived after its window's cutoff
		return decode.ReasonNone
	default:
		return reason
	}
	sess.closeMu.RLock()
	if w < sess.next {
		sess.closeMu.RUnlock()
		s.late(offset, tracker)
		return decode.ReasonNone
	}
	out := sess.agg.Add(w, ev)
	var ao aggregate.AverageOutcome
	if sess.avg != nil {
		ao = sess.avg.Add(w, ev)
	}
	tracker.Counted(w, offset)
	sess.closeMu.RUnlock()
	if !s.arrival {
		loc.observe(ev.TimeMs, s.sizeMs) // event time moves the watermark only in event mode
	}
	s.countOutcome(ev, out, loc)
	if ao.Added > 0 {
		s.stats.Averaged.Add(int64(ao.Added))
	}
	if ao.NotSelected > 0 {
		s.stats.AverageNotSelected.Add(int64(ao.NotSelected))
	}
	return decode.ReasonNone
}

// late counts an event dropped as late and marks its offset processed.
func (s *Stage) late(offset int64, tracker *source.OffsetTracker) {
	s.stats.Late.Add(1)
	s.stats.Drop(decode.ReasonLate)
	tracker.Processed(offset)
}

func (s *Stage) countOutcome(ev *decode.Event, out aggregate.Outcome, loc *partitionLocal) {
	for _, r := range ev.Drops {
		if r != decode.ReasonNone {
			s.stats.Drop(r)
		}
	}
	loc.counted += int64(out.Counted)
	loc.boundEvents += int64(out.DroppedUserEvents)
	loc.boundGroups += int64(out.DroppedUserGroups)
	loc.boundCapacity += int64(out.DroppedCapacity)
	loc.boundDisplaced += int64(out.Displaced)
}

// releaseLoop closes windows as the watermark passes them, releases them and
// commits offsets. It is the only goroutine that releases in a session.
func (s *Stage) releaseLoop(soft, gctx context.Context, sess *session, regroup func()) {
	// A rebalance may have cut a batch publish short in the previous
	// generation: its units are recorded but not acknowledged. Publish them
	// (same values) first; offsets are only ever committed below, after
	// that, so no commit passes an unpublished release.
	pubCtx, cancel := s.publishContext(soft, gctx)
	err := s.republishPending(pubCtx)
	cancel()
	if err != nil {
		s.releaseFailed(soft, gctx, sess.next, err)
		return
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	pc := source.NewPartitionCounter(s.dialer, s.brokers, sess.topic)
	defer pc.Close()
	either, cancelEither := joinContexts(soft, gctx)
	defer cancelEither()
	// Publishing of a release in flight survives a soft stop, up to the
	// drain timeout; a rebalance (gctx) abandons it (its record is durable
	// and is republished by whoever owns the partitions next).
	for {
		select {
		case <-gctx.Done():
			return
		case <-soft.Done():
			s.commit(sess)
			return
		case <-tick.C:
		}
		wm, _, ok := sess.wm.Current()
		if !ok {
			continue
		}
		// The watermark was seen past the windows below at this tick at the
		// latest; latency is measured from here to the acknowledgement.
		passedAt := s.now()
		sess.closeMu.Lock()
		next := sess.next
		sess.closeMu.Unlock()
		if next+s.sizeMs > wm || !s.allAssigned(either, sess, pc, regroup) {
			continue
		}
		// Every window the watermark passed is closed and its units
		// recorded (values and charge, durably) first; then all of them go
		// out in one publish and are marked published in one transaction;
		// then offsets are committed. Recording before publishing is what
		// keeps a release at most once; batching only saves round trips.
		var batch []*ledger.Unit
		closedTo := int64(math.MinInt64)
		flush := func() bool {
			if len(batch) == 0 {
				return true
			}
			pubCtx, cancel := s.publishContext(soft, gctx)
			err := s.publishUnits(pubCtx, batch, passedAt)
			cancel()
			batch = batch[:0]
			if err != nil {
				s.releaseFailed(soft, gctx, closedTo, err)
				return false
			}
			return true
		}
		for next+s.sizeMs <= wm {
			if soft.Err() != nil || gctx.Err() != nil {
				break
			}
			units, err := s.closeAndRecord(sess, next)
			if err != nil {
				s.releaseFailed(soft, gctx, next, err)
				return
			}
			batch = append(batch, units...)
			next += s.sizeMs
			closedTo = next
			if len(batch) >= maxPublishBatch && !flush() {
				return
			}
		}
		if !flush() {
			return
		}
		if closedTo != math.MinInt64 {
			for _, t := range sess.trackers {
				t.Released(closedTo)
			}
			s.commit(sess)
		}
	}
}

// allAssigned reports whether this generation was assigned every partition
// the input topic has now, as the releaser checks before closing windows.
// Partitions added to the topic are read only from the next generation on
// (kafka-go's partition watch, or a rejoin: regroup), so until then a
// window closed could miss their events, which the next generation would
// then drop as late. The check comes after the watermark passed the window:
// a partition created before an event of the window was written to it
// exists by then (under the arrival watermark's assumption that writes are
// visible within the lateness). While the topic has more partitions, or the
// count cannot be had, windows are held; after a grace for kafka-go's own
// watch the group is rejoined.
func (s *Stage) allAssigned(ctx context.Context, sess *session, pc *source.PartitionCounter, regroup func()) bool {
	now := s.now()
	if now.Before(sess.recheckAt) {
		return false
	}
	n, err := pc.Count(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.log.Warn("cannot count the input topic's partitions; windows held", zap.Error(err))
		}
		sess.recheckAt = now.Add(time.Second)
		return false
	case n > len(sess.parts):
		if sess.heldSince.IsZero() {
			sess.heldSince = now
			s.log.Warn("the input topic has partitions this generation was not assigned; windows held until the group rebalances",
				zap.Int("partitions", n), zap.Int("assigned", len(sess.parts)))
		} else if now.Sub(sess.heldSince) > regroupAfter {
			regroup()
		}
		sess.recheckAt = now.Add(200 * time.Millisecond)
		return false
	}
	return true
}

// regroupAfter is how long windows are held for unassigned partitions
// before the stage rejoins its group itself (kafka-go's partition watch
// polls every second; it can miss partitions added while a generation
// starts).
const regroupAfter = 3 * time.Second

// endFresh allows a partition at its end one missed poll and one retry
// back-off before it stops counting as read to its end (event mode; see
// window.Watermarks).
const endFresh = 2*source.FetchMaxWait + source.FetchRetryBackoff

// maxPublishBatch bounds the units published together.
const maxPublishBatch = 256

// releaseFailed handles a release that could not be made. A stop or a
// rebalance just ends the loop (recorded units are republished with the same
// values at the next start); anything else stops the stage: a stage that
// looks healthy but releases nothing is worse than one that restarts.
func (s *Stage) releaseFailed(soft, gctx context.Context, w int64, err error) {
	if soft.Err() == nil && gctx.Err() == nil {
		s.fail(fmt.Errorf("release up to window %s failed: %w", release.RFC3339(w), err))
	}
}

// publishContext is cancelled by a rebalance at once, and by a soft stop only
// after the drain timeout.
func (s *Stage) publishContext(soft, gctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(context.WithoutCancel(soft))
	stopG := context.AfterFunc(gctx, cancel)
	stopS := context.AfterFunc(soft, func() {
		t := time.AfterFunc(s.drain, cancel)
		context.AfterFunc(c, func() { t.Stop() })
	})
	return c, func() { stopG(); stopS(); cancel() }
}

// closeAndRecord closes window w and records every histogram's unit (or
// finds it recorded). It returns the units still to publish.
func (s *Stage) closeAndRecord(sess *session, w int64) ([]*ledger.Unit, error) {
	sess.closeMu.Lock()
	counts, err := sess.agg.Close(w)
	var avgs *aggregate.AverageWindow
	if sess.avg != nil {
		avgs = sess.avg.Close(w)
	}
	sess.next = w + s.sizeMs
	sess.closeMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("close window %s: %w", release.RFC3339(w), err)
	}
	defer counts.Release()
	if d := counts.Displaced(); d > 0 { // counted on arrival, then the user was evicted
		s.stats.DropN(decode.ReasonBoundDisplaced, d)
	}
	return s.rel.Record(w, counts, avgs)
}

func (s *Stage) periodOf(w int64) int64 { return window.Start(w, s.periodMs) }

func (s *Stage) publishUnit(ctx context.Context, u *ledger.Unit, passedAt time.Time) error {
	return s.publishUnits(ctx, []*ledger.Unit{u}, passedAt)
}

// publishUnits publishes recorded units in one write (acknowledged by all
// in-sync replicas), then marks them published in one transaction.
func (s *Stage) publishUnits(ctx context.Context, units []*ledger.Unit, passedAt time.Time) error {
	keys := make([][]byte, 0, len(units))
	for _, u := range units {
		keys = append(keys, u.Key())
	}
	if err := s.sink.PublishUnits(ctx, units); err != nil {
		return fmt.Errorf("publish %d units from %s@%s: %w", len(units), units[0].Histogram, release.RFC3339(units[0].WindowStart), err)
	}
	if err := s.ledger.MarkPublishedKeys(keys); err != nil {
		return err
	}
	for _, u := range units {
		s.published(u, passedAt)
		if dir := s.cfg.Output.ArrowDir; dir != "" {
			if err := release.WriteArrow(dir, u); err != nil {
				// The release is out and recorded: a failed extra copy is
				// logged, not retried (it holds nothing the topic lacks).
				s.log.Error("arrow output failed", zap.Error(err))
			}
		}
	}
	return nil
}

// published updates stats and views after u was acknowledged.
func (s *Stage) published(u *ledger.Unit, passedAt time.Time) {
	if u.Status == ledger.StatusReleased {
		s.stats.Releases.Add(int64(len(u.Messages)))
		if s.printer != nil {
			for _, m := range u.Messages {
				var r release.Release
				if json.Unmarshal(m.Value, &r) == nil {
					s.printer.Print(&r)
				}
			}
		}
	}
	if s.onRel != nil {
		var lat time.Duration
		if !passedAt.IsZero() {
			lat = s.now().Sub(passedAt)
		}
		s.onRel(u, lat)
	}
}

// republishPending publishes every recorded but unacknowledged unit.
func (s *Stage) republishPending(ctx context.Context) error {
	var pending []*ledger.Unit
	if err := s.ledger.Units(func(u *ledger.Unit) bool {
		if !u.Published {
			pending = append(pending, u)
		}
		return true
	}); err != nil {
		return err
	}
	for _, u := range pending {
		s.log.Info("republishing recorded release", zap.String("histogram", u.Histogram), zap.String("window_start", release.RFC3339(u.WindowStart)))
		if err := s.publishUnit(ctx, u, time.Time{}); err != nil {
			return err
		}
	}
	return nil
}

// commit commits, per partition, the offset before which every message
// belongs to a released window or was dropped.
func (s *Stage) commit(sess *session) {
	offsets := make(map[int]int64)
	for p, t := range sess.trackers {
		if o, changed := t.CommitPoint(); changed {
			offsets[p] = o
		}
	}
	if len(offsets) == 0 {
		return
	}
	if err := sess.gen.CommitOffsets(map[string]map[int]int64{sess.topic: offsets}); err != nil {
		s.log.Warn("offset commit failed; will retry after the next release", zap.Error(err))
		return
	}
	for p, o := range offsets {
		sess.trackers[p].MarkCommitted(o)
	}
	s.stats.Commits.Add(1)
}

func (s *Stage) logProgress() {
	s.log.Info("progress",
		zap.Int64("consumed", s.stats.Consumed.Load()),
		zap.Int64("decoded", s.stats.Decoded.Load()),
		zap.Int64("counted", s.stats.Counted.Load()),
		zap.Int64("releases", s.stats.Releases.Load()),
		zap.Int64("budget_exhausted", s.stats.Exhausted.Load()),
		zap.Any("dropped", s.stats.Dropped()),
	)
}
