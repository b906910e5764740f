package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpstage/stage/aggregate"
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
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

type Options struct {
	Config *config.Config
	Log    *zap.Logger
	// Brokers overrides Config.Kafka.Brokers (the embedded broker's address).
	Brokers []string
	// Dialer and Transport carry TLS/SASL; nil for plain TCP.
	Dialer    *kafka.Dialer
	Transport *kafka.Transport
	// Printer, when set, renders every published unit for humans: its
	// status (a window not released, the groups selected) and releases.
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
	// MissingTopicWait is how long a missing input or output topic is
	// waited for at start before the run fails saying to create it
	// (CheckInput, CheckContinuity). Default 30s.
	MissingTopicWait time.Duration
}

// Node is one stage process's shared state: the parameters derived from
// the config, the clients, the counters, readiness and lag, and — once a
// role has attached it — the release log with its budget book and
// releaser. The roles (package single; package distributed's bounder and
// releaser) and the counting loop (package consume) share one Node; its
// fields are set by New and, for the release log's, by Attach, and read by
// the goroutines the roles own.
type Node struct {
	Cfg       *config.Config
	Log       *zap.Logger
	Brokers   []string
	Dialer    *kafka.Dialer
	Transport *kafka.Transport
	Plan      *plan.Plan
	Ledger    ledger.Store // the release log of the state loaded last (Attach)
	Sink      *sink.Sink
	DLQ       *sink.Sink // nil without kafka.dead_letter_topic
	Stats     *Stats
	Printer   *release.Printer
	OnRel     func(*ledger.Unit, time.Duration)
	Drain     time.Duration
	Now       func() time.Time
	// TopicWait is Options.MissingTopicWait (topicWait).
	TopicWait time.Duration
	// UserKey keys the user hash (decode.Event.User): the ledger's key
	// (Attach loads it before any decoder is built), or Options.HashKey.
	UserKey    siphash.Key
	HashKeySet bool // Options.HashKey was given
	SizeMs     int64
	PeriodMs   int64
	// Arrival: windows close by record (arrival) time, window.watermark
	// arrival; LatenessMs is Window.Lateness (see consume).
	Arrival     bool
	LatenessMs  int64
	MaxFutureMs int64           // events.max_future
	Rng         *mechanism.Rand // used only by the releasing goroutine of the current session
	Rule        window.Rule     // which events count (window.Rule.Decide)
	// Group is how the single-process stage is a member of its consumer
	// group.
	Group *source.GroupConfig
	// Kgo are the options of every franz-go client (kafka.tls and
	// kafka.sasl; kgoOpts).
	Kgo []kgo.Opt
	// CountingConfig is cfg.CountingFingerprint (distributed mode: stamped
	// on every partial; the releaser merges only its own).
	CountingConfig string
	// Rel draws, charges and records closed windows (release.Releaser);
	// set by Attach, used by the releasing goroutine.
	Rel *release.Releaser
	// rel is Rel for the status readers (Budget: Refusals), stored by
	// Attach once the releaser is restored.
	rel atomic.Pointer[release.Releaser]

	Ready ReadyFlags
	// replayed: replayRecent ran (once per process, at the first Attach).
	replayed bool

	lagMu sync.Mutex // guards lag
	// lag is the consumer lag per assigned partition (high-water mark −
	// offset − 1 of the last fetched message); reset on every generation.
	lag map[int]int64
	// brokerRegressions counts broker-time regressions per input
	// partition (NoteBrokerTime).
	brokerRegressions partitionCounts
	// brokerRegressionsBeyond counts those of them more than
	// window.clock_skew_margin below the largest time read (logged too).
	brokerRegressionsBeyond partitionCounts

	failMu sync.Mutex // guards fail
	// fail ends the run with an error; set by the owner of the run
	// (SetFail).
	fail func(error)
	// Meta is the ledger's metadata (first window, window size, period),
	// loaded or recorded by Attach before anything is consumed.
	Meta ledger.Meta

	// Book is the budget book: every charge is checked against, and added
	// to, its whole period's total there (budget.Book). Set by Attach; nil
	// before.
	Book atomic.Pointer[budget.Book]

	// Blind follows each histogram's window-bound drop share through its
	// closed windows (issue 23 item 3; nil without
	// contribution.max_windows_per_user): private, for the operator's
	// metrics, /readyz and log only (NoteWindowBound).
	Blind *aggregate.BlindWatch
}

// New builds a process's Node from opts: checks, the plan, the noise
// source, the sinks. Nothing is connected yet.
func New(opts Options) (*Node, error) {
	cfg := opts.Config
	if cfg == nil {
		return nil, errors.New("node: nil config")
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	brokers := opts.Brokers
	if len(brokers) == 0 {
		brokers = cfg.Kafka.Brokers
	}
	if len(brokers) == 0 {
		return nil, errors.New("node: no brokers (start the embedded broker or set kafka.brokers)")
	}
	pl, err := plan.DerivePlan(cfg)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	rng, err := mechanism.NewRand()
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	s := &Node{
		Cfg:         cfg,
		Log:         opts.Log,
		Brokers:     brokers,
		Dialer:      opts.Dialer,
		Plan:        pl,
		Stats:       newStats(),
		Printer:     opts.Printer,
		OnRel:       opts.OnRelease,
		Drain:       opts.DrainTimeout,
		TopicWait:   opts.MissingTopicWait,
		Now:         opts.Now,
		SizeMs:      cfg.Window.Size.D().Milliseconds(),
		Arrival:     cfg.Window.Arrival(),
		LatenessMs:  cfg.Window.Lateness().D().Milliseconds(),
		MaxFutureMs: cfg.Events.MaxFuture.D().Milliseconds(),
		PeriodMs:    cfg.Privacy.Budget.Period.D().Milliseconds(),
		Rng:         rng,
		lag:         make(map[int]int64),
		Transport:   opts.Transport,
	}
	s.CountingConfig = cfg.CountingFingerprint()
	s.Blind = blindWatch(cfg)
	if s.Kgo, err = kgoOpts(cfg.Kafka); err != nil {
		return nil, err
	}
	s.Rule = window.Rule{Arrival: s.Arrival, SizeMs: s.SizeMs, LatenessMs: s.LatenessMs, MaxFutureMs: s.MaxFutureMs}
	if opts.HashKey != nil {
		s.UserKey, s.HashKeySet = *opts.HashKey, true
	}
	if s.Drain <= 0 {
		s.Drain = 30 * time.Second
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	s.Group = &source.GroupConfig{ID: cfg.Kafka.GroupID, Topic: cfg.Kafka.InputTopic, Brokers: brokers, Dialer: opts.Dialer,
		Transport: opts.Transport, SessionTimeout: cfg.Kafka.SessionTimeout.D(), RebalanceTimeout: cfg.Kafka.Rebalance().D(), Log: opts.Log,
		Started: time.Now()} // the oldest member of the group is active (source/allone)
	onRetry := func() { s.Stats.PublishRetries.Add(1) }
	s.Sink = sink.New(sink.Options{Brokers: brokers, Topic: cfg.Kafka.OutputTopic, Transport: opts.Transport, Log: opts.Log, OnRetry: onRetry})
	if cfg.Kafka.DeadLetterTopic != "" {
		s.DLQ = sink.New(sink.Options{Brokers: brokers, Topic: cfg.Kafka.DeadLetterTopic, Transport: opts.Transport, Log: opts.Log,
			OnRetry: onRetry, RoundRobin: true})
	}
	return s, nil
}

// DropReasonHeader is the dead-letter record header that names the reason.
const DropReasonHeader = sink.DropReasonHeader

// DeadLetter writes m to the dead-letter topic with its drop reason (no-op
// without kafka.dead_letter_topic); a refusal for good stops the run.
func (s *Node) DeadLetter(ctx context.Context, m kafka.Message, reason decode.Reason) error {
	if s.DLQ == nil {
		return nil
	}
	err := s.DLQ.DeadLetter(ctx, m, reason)
	if err != nil && ctx.Err() == nil {
		// Refused for good (the dead-letter topic missing, no permission):
		// stop loudly rather than drop the event or stall the partition.
		s.Fail(fmt.Errorf("dead-letter topic %q: %w", s.Cfg.Kafka.DeadLetterTopic, err))
	}
	return err
}

// SetFail sets what Fail calls: the run's owner ends the run with the
// error (pipeline.Stage.Run), or a test observes it.
func (s *Node) SetFail(f func(error)) {
	s.failMu.Lock()
	s.fail = f
	s.failMu.Unlock()
}

// Fail ends the run with err (see SetFail). Every role calls it for what
// must stop the process rather than look healthy while it stands still.
func (s *Node) Fail(err error) {
	s.failMu.Lock()
	f := s.fail
	s.failMu.Unlock()
	if f == nil {
		s.Log.Error("failure with no run to stop", zap.Error(err))
		return
	}
	f(err)
}
