package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/sink"
	"github.com/dpstage/stage/source"
	"github.com/dpstage/stage/window"
)

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
	// HashKey, when set, keys the user hash (and so which users and events
	// the bounder selects) instead of the secret key kept in the ledger
	// (generated at the first start): for tests that compute the expected
	// bounded counts. Never set it in production: a known key lets
	// producers predict which events count.
	HashKey *siphash.Key
}

type Stage struct {
	cfg       *config.Config
	log       *zap.Logger
	brokers   []string
	dialer    *kafka.Dialer
	transport *kafka.Transport
	plan      *plan.Plan
	ledger    ledger.Store // the release log of the state loaded last (attach)
	sink      *sink.Sink
	dlq       *sink.Sink // nil without kafka.dead_letter_topic
	stats     *Stats
	printer   *release.Printer
	onRel     func(*ledger.Unit, time.Duration)
	drain     time.Duration
	now       func() time.Time
	// userKey keys the user hash (decode.Event.User): the ledger's key
	// (Run loads it before any decoder is built), or Options.HashKey.
	userKey    siphash.Key
	hashKeySet bool // Options.HashKey was given
	sizeMs     int64
	periodMs   int64
	// arrival: windows close by record (arrival) time, window.watermark
	// arrival; latenessMs is Window.Lateness (see handle).
	arrival     bool
	latenessMs  int64
	maxFutureMs int64           // events.max_future
	rng         *mechanism.Rand // used only by the releaser goroutine of the current session
	rule        window.Rule     // which events count (window.Rule.Decide)
	// group is how the stage is a member of its consumer group.
	group *source.GroupConfig
	// kgo are the options of every franz-go client (kafka.tls and
	// kafka.sasl; kgoOpts).
	kgo []kgo.Opt
	// countingConfig is cfg.CountingFingerprint (distributed mode: stamped
	// on every partial; the releaser merges only its own).
	countingConfig string
	// rel draws, charges and records closed windows (release.Releaser);
	// set by Run once the ledger is open, used by the releaser goroutine.
	rel *release.Releaser

	// progressID is the progress topic's Kafka topic id (distributed mode,
	// dist_progressid.go); written and read by the active releaser only
	// (one lead at a time, runReleaser).
	progressID string

	ready readiness
	// replayed: replayRecent ran (once per Run, at the first attach).
	replayed bool

	lagMu sync.Mutex // guards lag
	// lag is the consumer lag per assigned partition (high-water mark −
	// offset − 1 of the last fetched message); reset on every generation.
	lag map[int]int64
	// brokerRegressions counts broker-time regressions per input
	// partition (noteBrokerTime).
	brokerRegressions partitionCounts

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
		sizeMs:      cfg.Window.Size.D().Milliseconds(),
		arrival:     cfg.Window.Arrival(),
		latenessMs:  cfg.Window.Lateness().D().Milliseconds(),
		maxFutureMs: cfg.Events.MaxFuture.D().Milliseconds(),
		periodMs:    cfg.Privacy.Budget.Period.D().Milliseconds(),
		rng:         rng,
		lag:         make(map[int]int64),
		transport:   opts.Transport,
	}
	s.countingConfig = cfg.CountingFingerprint()
	if s.kgo, err = kgoOpts(cfg.Kafka); err != nil {
		return nil, err
	}
	s.rule = window.Rule{Arrival: s.arrival, SizeMs: s.sizeMs, LatenessMs: s.latenessMs, MaxFutureMs: s.maxFutureMs}
	if opts.HashKey != nil {
		s.userKey, s.hashKeySet = *opts.HashKey, true
	}
	if s.drain <= 0 {
		s.drain = 30 * time.Second
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.group = &source.GroupConfig{ID: cfg.Kafka.GroupID, Topic: cfg.Kafka.InputTopic, Brokers: brokers, Dialer: opts.Dialer,
		Transport: opts.Transport, SessionTimeout: cfg.Kafka.SessionTimeout.D(), RebalanceTimeout: cfg.Kafka.Rebalance().D(), Log: opts.Log,
		Started: time.Now()} // the oldest Stage of the group is active (source/allone)
	onRetry := func() { s.stats.PublishRetries.Add(1) }
	s.sink = sink.New(sink.Options{Brokers: brokers, Topic: cfg.Kafka.OutputTopic, Transport: opts.Transport, Log: opts.Log, OnRetry: onRetry})
	if cfg.Kafka.DeadLetterTopic != "" {
		s.dlq = sink.New(sink.Options{Brokers: brokers, Topic: cfg.Kafka.DeadLetterTopic, Transport: opts.Transport, Log: opts.Log,
			OnRetry: onRetry, RoundRobin: true})
	}
	return s, nil
}

const DropReasonHeader = sink.DropReasonHeader

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

func (s *Stage) Plan() *plan.Plan { return s.plan }

func (s *Stage) Stats() *Stats { return s.stats }
