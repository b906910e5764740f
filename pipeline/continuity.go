package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/dpstage/stage/internal/retry"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/source"
	"github.com/dpstage/stage/window"
)

// ErrStateLost: the state database is empty but the output topic already
// holds releases. See checkContinuity.
var ErrStateLost = errors.New("pipeline: state.dir holds no releases but the output topic does")

// openLedger opens the state database. While another stage process holds it
// (a hot standby sharing state.dir with the active instance) it waits,
// retrying, until that process exits or ctx ends.
func (s *Stage) openLedger(ctx context.Context) (*ledger.Ledger, error) {
	logged := false
	for {
		l, err := ledger.Open(s.cfg.State.Dir)
		if err == nil {
			if logged {
				s.log.Info("state database acquired: this instance is now active", zap.String("state_dir", s.cfg.State.Dir))
			}
			return l, nil
		}
		if !errors.Is(err, ledger.ErrLocked) {
			return nil, fmt.Errorf("pipeline: %w", err)
		}
		if !logged {
			s.log.Info("another stage process holds state.dir: waiting as a standby", zap.String("state_dir", s.cfg.State.Dir))
			logged = true
		}
		if err := retry.Sleep(ctx, time.Second); err != nil {
			return nil, err
		}
	}
}

// checkContinuity refuses to start with an empty ledger when the output topic
// already holds messages, unless state.allow_fresh_ledger is set. An empty
// ledger next to a used output topic means the state that made those
// releases is lost or lives elsewhere (a second instance with its own
// state.dir): starting anyway could release a window again with fresh noise
// (releases recorded there but not committed) and would forget the budget
// already spent this period. The broker is retried while unreachable.
func (s *Stage) checkContinuity(ctx context.Context) error {
	if s.cfg.State.AllowFreshLedger {
		return nil
	}
	if _, ok, err := s.ledger.LastWindow(); err != nil {
		return fmt.Errorf("pipeline: read ledger: %w", err)
	} else if ok {
		return nil
	}
	backoff := retry.Backoff{Initial: 200 * time.Millisecond, Max: 5 * time.Second}
	for {
		n, err := source.TopicMessages(ctx, s.brokers, s.transport, s.cfg.Kafka.OutputTopic)
		if err == nil {
			if n > 0 {
				return fmt.Errorf("%w (%d messages in %q, state.dir %q): restore state.dir from the instance that made them, or set state.allow_fresh_ledger: true for a deliberate fresh start",
					ErrStateLost, n, s.cfg.Kafka.OutputTopic, s.cfg.State.Dir)
			}
			return nil
		}
		wait := backoff.Next()
		s.log.Warn("cannot read the output topic's offsets; retrying", zap.Error(err), zap.Duration("wait", wait))
		if err := retry.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// replayRecent hands the most recent published units to OnRelease (with a
// zero latency), so that views fed by it — the dashboard — show the last
// releases again after a restart instead of an empty page until the next
// window closes. Only already-published values are replayed.
func (s *Stage) replayRecent(keep int) error {
	if s.onRel == nil {
		return nil
	}
	var recent []*ledger.Unit
	err := s.ledger.Units(func(u *ledger.Unit) bool {
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
		s.onRel(u, 0)
	}
	return nil
}

// ErrConfigChanged: window.size or privacy.budget.period differ from what the
// ledger was written under.
var ErrConfigChanged = errors.New("pipeline: the configuration no longer matches the ledger")

// loadMeta records the ledger's metadata at the first start and checks it at
// every later one. The first window comes from window.start or the wall
// clock — never from the data. A ledger written before the metadata existed
// takes its first recorded window.
func (s *Stage) loadMeta() (ledger.Meta, error) {
	want := ledger.Meta{WindowMs: s.sizeMs, PeriodMs: s.periodMs}
	if first, ok, err := s.ledger.FirstUnitWindow(); err != nil {
		return ledger.Meta{}, fmt.Errorf("pipeline: %w", err)
	} else if ok {
		want.FirstWindow = first
	} else if st := s.cfg.Window.Start; st != "" {
		t, err := time.Parse(time.RFC3339, st)
		if err != nil {
			return ledger.Meta{}, fmt.Errorf("pipeline: window.start: %w", err)
		}
		want.FirstWindow = window.Start(t.UnixMilli(), s.sizeMs)
	} else {
		want.FirstWindow = window.Start(s.now().UnixMilli(), s.sizeMs)
	}
	got, stored, err := s.ledger.SetMeta(want)
	if err != nil {
		return ledger.Meta{}, fmt.Errorf("pipeline: %w", err)
	}
	if stored {
		s.log.Info("first window recorded", zap.String("first_window", release.RFC3339(got.FirstWindow)))
		return got, nil
	}
	if got.WindowMs != s.sizeMs || got.PeriodMs != s.periodMs {
		return ledger.Meta{}, fmt.Errorf("%w: the ledger in %q was written with window.size %s and privacy.budget.period %s, the config says %s and %s; releases and budget periods would no longer line up — revert the change, or start on a new state.dir and output topic",
			ErrConfigChanged, s.cfg.State.Dir, time.Duration(got.WindowMs)*time.Millisecond, time.Duration(got.PeriodMs)*time.Millisecond,
			s.cfg.Window.Size.D(), s.cfg.Privacy.Budget.Period.D())
	}
	if st := s.cfg.Window.Start; st != "" {
		if t, err := time.Parse(time.RFC3339, st); err == nil && window.Start(t.UnixMilli(), s.sizeMs) != got.FirstWindow {
			s.log.Warn("window.start differs from the first window recorded in the ledger; the ledger wins",
				zap.String("window_start", st), zap.String("recorded_first_window", release.RFC3339(got.FirstWindow)))
		}
	}
	return got, nil
}

// prune drops published releases older than state.retain behind the last
// recorded window (see ledger.Prune for what is never dropped), so the
// ledger and the start-up scan stay bounded.
func (s *Stage) prune() error {
	keep := s.cfg.State.Retain.D().Milliseconds()
	if keep <= 0 {
		return nil
	}
	last, ok, err := s.ledger.LastWindow()
	if err != nil || !ok {
		return err
	}
	units, periods, err := s.ledger.Prune(last - keep)
	if err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	if units > 0 || periods > 0 {
		s.log.Info("pruned the ledger", zap.Int("units", units), zap.Int("periods", periods),
			zap.String("before", release.RFC3339(last-keep)))
	}
	return nil
}
