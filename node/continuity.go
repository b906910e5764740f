package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/retry"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/source"
	"github.com/dpstage/stage/window"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
)

// ErrNoOutputTopic: the output topic does not exist (longer than
// outputTopicGrace). See checkContinuity.
var ErrNoOutputTopic = errors.New("node: the output topic does not exist")

// outputTopicGrace is how long checkContinuity waits for a missing output
// topic (being created by another tool, or not yet in every broker's
// metadata) before it gives up with ErrNoOutputTopic, unless
// Options.MissingTopicWait says otherwise (topicWait); CheckInput waits
// as long for the input topic. A variable for tests.
var outputTopicGrace = 30 * time.Second

// ErrStateLost: the state database is empty but the output topic already
// holds releases. See checkContinuity.
var ErrStateLost = errors.New("node: state.dir holds no releases but the output topic does")

// OpenLedger opens the state database. While another stage process holds it
// (a hot standby sharing state.dir with the active instance) it waits,
// retrying, until that process exits or ctx ends.
func (s *Node) OpenLedger(ctx context.Context) (*ledger.Ledger, error) {
	logged := false
	for {
		l, err := ledger.Open(s.Cfg.State.Dir)
		if err == nil {
			if logged {
				s.Log.Info("state database acquired: this instance is now active", zap.String("state_dir", s.Cfg.State.Dir))
			}
			return l, nil
		}
		if !errors.Is(err, ledger.ErrLocked) {
			return nil, fmt.Errorf("node: %w", err)
		}
		if !logged {
			s.Log.Info("another stage process holds state.dir: waiting as a standby", zap.String("state_dir", s.Cfg.State.Dir))
			logged = true
		}
		if err := retry.Sleep(ctx, time.Second); err != nil {
			return nil, err
		}
	}
}

// Attach makes led the stage's release log: the budget book and the
// releaser restored from it, the continuity check, the metadata, the user
// hash key, pruning, and the spend of the next release's period loaded
// before anything is released. With state.ledger bolt Run attaches the
// ledger once; with kafka every generation assigned the input partitions
// attaches the log it opened (runGeneration), and everything here is
// rebuilt from that log alone — nothing of an earlier generation's state
// is kept, so a new owner on another machine starts from exactly what is
// committed on Kafka.
func (s *Node) Attach(ctx context.Context, led ledger.Store) error {
	s.Ledger = led
	book, err := release.NewBook(s.Plan, led)
	if err != nil {
		return fmt.Errorf("node: budget book: %w", err)
	}
	s.Book.Store(book)
	if s.Rel, err = release.New(release.Options{Config: s.Cfg, Plan: s.Plan, Ledger: led, Book: book, Rand: s.Rng,
		Log: s.Log, Now: s.Now, OnExhausted: func() { s.Stats.Exhausted.Add(1) },
		OnSelection: s.Stats.NoteSelectionKeys}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := s.CheckContinuity(ctx); err != nil {
		return err
	}
	if s.Meta, err = s.loadMeta(ctx); err != nil {
		return err
	}
	if err := s.loadUserKey(ctx); err != nil {
		return err
	}
	if err := s.Prune(ctx); err != nil {
		return err
	}
	if !s.replayed {
		if err := s.replayRecent(256); err != nil {
			return err
		}
		s.replayed = true
	}
	// The spend of the period the next release falls in, from the ledger,
	// before anything is released: status and metrics show it from the
	// start (not only after the next window closes).
	next, err := s.ResumeWindow()
	if err != nil {
		return err
	}
	if _, err := book.Status(s.PeriodOf(next)); err != nil {
		return err
	}
	s.rel.Store(s.Rel)
	if err := s.warnRefused(s.PeriodOf(next)); err != nil {
		return err
	}
	s.Ready.StateLoaded.Store(true)
	s.Ready.Releasing.Store(true)
	return nil
}

// warnRefused says, at start, which histograms' releases will be refused
// for the rest of period p: the running plan's period reservations
// composed onto the period's recorded spend (release.Releaser.Refusals) —
// a reservation that does not fit, because the config changed in the
// middle of the period and the period's budget is already held by the
// reservations made before, is refused at every window until the period
// ends. (stage validate cannot see the ledger; this is the first place
// the stage can tell.)
func (s *Node) warnRefused(p int64) error {
	refs, err := s.Rel.Refusals(p)
	if err != nil {
		return fmt.Errorf("node: compose the period reservations onto the recorded spend: %w", err)
	}
	for _, r := range refs {
		why := "the config changed in the middle of the budget period, changing the histogram's period reservation, and the reservations made before the change already hold the period's budget (a change that does not raise the histogram's charge is covered by its earlier reservation, and one that raises it under the same window and K_h is charged only the rise — here more than the budget left)"
		if r.Covered {
			why = "the privacy budget was lowered below what the period has already spent"
		}
		s.Log.Warn("this histogram's period reservation does not fit in what the period has already spent: its releases are refused (budget_exhausted) until the period ends",
			zap.String("histogram", r.Histogram),
			zap.String("why", why),
			zap.String("period_start", release.RFC3339(r.Period)),
			zap.String("releases_resume", release.RFC3339(r.End)),
			zap.Error(r.Err))
	}
	return nil
}

// OpenKafkaLedger opens the release log on state.ledger_topic (partition
// 0) under the log's transactional id (config.LedgerTransactionalID):
// it fences every older writer of the log — a crashed or paused former
// owner, whose open transaction the broker aborts — and restores every
// committed record (ledger/kafkalog, "Opening"). Called by a generation
// that was assigned the input partitions: the group's single assignment
// decides who opens it, the fencing that nobody else records after.
func (s *Node) OpenKafkaLedger(ctx context.Context) (*kafkalog.Log, error) {
	topic := s.Cfg.State.LedgerTopic
	id := config.LedgerTransactionalID(topic)
	start := time.Now()
	l, err := kafkalog.Open(ctx, kafkalog.Config{Brokers: s.Brokers, Topic: topic, TransactionalID: id, ClientOpts: s.Kgo,
		TransactionTimeout: s.Cfg.Kafka.Distributed.Txn()})
	if err != nil {
		return nil, fmt.Errorf("node: open the release log on topic %q: %w", topic, err)
	}
	s.Log.Info("release log restored from Kafka: this instance is now active", zap.String("ledger_topic", topic),
		zap.String("transactional_id", id), zap.Duration("took", time.Since(start)))
	return l, nil
}

// stateName names where the release log lives, for messages.
func (s *Node) stateName() string {
	if s.Cfg.State.KafkaLedger() {
		return fmt.Sprintf("release log topic %q", s.Cfg.State.LedgerTopic)
	}
	return fmt.Sprintf("state.dir %q", s.Cfg.State.Dir)
}

// CheckContinuity refuses to start with an empty ledger when the output topic
// already holds messages, unless state.allow_fresh_ledger is set. An empty
// ledger next to a used output topic means the state that made those
// releases is lost or lives elsewhere (a second instance with its own
// state.dir): starting anyway could release a window again with fresh noise
// (releases recorded there but not committed) and would forget the budget
// already spent this period. The broker is retried while unreachable; an
// output topic that does not exist is waited for outputTopicGrace, then it
// is one ErrNoOutputTopic error saying to create it (it was retried, as
// "Unknown Topic", forever).
func (s *Node) CheckContinuity(ctx context.Context) error {
	if s.Cfg.State.AllowFreshLedger {
		return nil
	}
	if _, ok, err := s.Ledger.LastWindow(); err != nil {
		return fmt.Errorf("node: read ledger: %w", err)
	} else if ok {
		return nil
	}
	backoff := retry.Backoff{Initial: 200 * time.Millisecond, Max: 5 * time.Second}
	var missingSince time.Time
	for {
		n, err := source.TopicMessages(ctx, s.Brokers, s.Transport, s.Cfg.Kafka.OutputTopic)
		if err == nil {
			if n > 0 {
				return fmt.Errorf("%w (%d messages in %q, %s): restore the state from the instance that made them, or set state.allow_fresh_ledger: true for a deliberate fresh start",
					ErrStateLost, n, s.Cfg.Kafka.OutputTopic, s.stateName())
			}
			return nil
		}
		wait := backoff.Next()
		if errors.Is(err, kafka.UnknownTopicOrPartition) {
			if missingSince.IsZero() {
				missingSince = time.Now()
			}
			if wait := s.topicWait(); time.Since(missingSince) >= wait {
				or := ""
				if d := s.Cfg.Kafka.Distributed; d.Enabled && !d.CreateTopics {
					or = ", or set kafka.distributed.create_topics: true"
				}
				return fmt.Errorf("%w: %q (kafka.output_topic), for %v: create it (e.g. kafka-topics --create --topic %s --partitions 1)%s",
					ErrNoOutputTopic, s.Cfg.Kafka.OutputTopic, wait, s.Cfg.Kafka.OutputTopic, or)
			}
		}
		s.Log.Warn("cannot read the output topic's offsets; retrying", zap.Error(err), zap.Duration("wait", wait))
		if err := retry.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// replayRecent hands the most recent published units to OnRelease (with a
// zero latency), so that views fed by it — the dashboard — show the last
// releases again after a restart instead of an empty page until the next
// window closes. Only already-published values are replayed.
func (s *Node) replayRecent(keep int) error {
	if s.OnRel == nil {
		return nil
	}
	var recent []*ledger.Unit
	err := s.Ledger.Units(func(u *ledger.Unit) bool {
		if u.Published {
			recent = append(recent, u)
			if len(recent) > keep {
				recent = recent[1:]
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	for _, u := range recent {
		s.OnRel(u, 0)
	}
	return nil
}

// ErrConfigChanged: window.size or privacy.budget.period differ from what the
// ledger was written under.
var ErrConfigChanged = errors.New("node: the configuration no longer matches the ledger")

// loadMeta records the ledger's metadata at the first start and checks it at
// every later one. The first window comes from window.start or the wall
// clock — never from the data. A ledger written before the metadata existed
// takes its first recorded window.
func (s *Node) loadMeta(ctx context.Context) (ledger.Meta, error) {
	want := ledger.Meta{WindowMs: s.SizeMs, PeriodMs: s.PeriodMs}
	if first, ok, err := s.Ledger.FirstUnitWindow(); err != nil {
		return ledger.Meta{}, fmt.Errorf("node: %w", err)
	} else if ok {
		want.FirstWindow = first
	} else if st := s.Cfg.Window.Start; st != "" {
		t, err := time.Parse(time.RFC3339, st)
		if err != nil {
			return ledger.Meta{}, fmt.Errorf("node: window.start: %w", err)
		}
		want.FirstWindow = window.Start(t.UnixMilli(), s.SizeMs)
	} else {
		want.FirstWindow = window.Start(s.Now().UnixMilli(), s.SizeMs)
	}
	got, stored, err := s.Ledger.SetMeta(ctx, want)
	if err != nil {
		return ledger.Meta{}, fmt.Errorf("node: %w", err)
	}
	if stored {
		s.Log.Info("first window recorded", zap.String("first_window", release.RFC3339(got.FirstWindow)))
		return got, nil
	}
	if got.WindowMs != s.SizeMs || got.PeriodMs != s.PeriodMs {
		return ledger.Meta{}, fmt.Errorf("%w: the ledger in %s was written with window.size %s and privacy.budget.period %s, the config says %s and %s; releases and budget periods would no longer line up — revert the change, or start on a new state and output topic",
			ErrConfigChanged, s.stateName(), time.Duration(got.WindowMs)*time.Millisecond, time.Duration(got.PeriodMs)*time.Millisecond,
			s.Cfg.Window.Size.D(), s.Cfg.Privacy.Budget.Period.D())
	}
	if st := s.Cfg.Window.Start; st != "" {
		if t, err := time.Parse(time.RFC3339, st); err == nil && window.Start(t.UnixMilli(), s.SizeMs) != got.FirstWindow {
			s.Log.Warn("window.start differs from the first window recorded in the ledger; the ledger wins",
				zap.String("window_start", st), zap.String("recorded_first_window", release.RFC3339(got.FirstWindow)))
		}
	}
	return got, nil
}

// PruneRunning prunes (Prune) while this instance releases, not only
// when it attaches the log: each time the last recorded window has moved
// max(window, state.retain/64) past *from (the last window at the previous
// Prune), so the log's units and a takeover's restore stay bounded by
// state.retain while one releaser leads for weeks. Each prune scans the
// log's units once; with the step that happens at most about 64 times per
// state.retain of windows released. A failed prune is logged: the log is
// then unusable and the next record reports why (fenced, or broken).
func (s *Node) PruneRunning(ctx context.Context, from *int64) {
	keep := s.Cfg.State.Retain.D().Milliseconds()
	if keep <= 0 {
		return
	}
	last, ok, err := s.Ledger.LastWindow()
	if err != nil || !ok || last < *from+max(s.SizeMs, keep/64) {
		return
	}
	*from = last
	if err := s.Prune(ctx); err != nil && ctx.Err() == nil {
		s.Log.Warn("pruning the ledger failed", zap.Error(err))
	}
}

// Prune drops published releases older than state.retain behind the last
// recorded window (see ledger.Prune for what is never dropped), so the
// ledger and the start-up scan stay bounded.
func (s *Node) Prune(ctx context.Context) error {
	keep := s.Cfg.State.Retain.D().Milliseconds()
	if keep <= 0 {
		return nil
	}
	last, ok, err := s.Ledger.LastWindow()
	if err != nil || !ok {
		return err
	}
	units, periods, err := s.Ledger.Prune(ctx, last-keep)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if units > 0 || periods > 0 {
		s.Log.Info("pruned the ledger", zap.Int("units", units), zap.Int("periods", periods),
			zap.String("before", release.RFC3339(last-keep)))
	}
	return nil
}
