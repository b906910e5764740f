package node

import (
	"context"
	"fmt"
	"time"

	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/source"
	"github.com/dpstage/stage/window"
	"go.uber.org/zap"
)

// endFresh allows a partition at its end one missed poll and one retry
// back-off before it stops counting as read to its end (event mode; see
// window.Watermarks).
const endFresh = 2*source.FetchMaxWait + source.FetchRetryBackoff

// MaxPublishBatch bounds the units published together.
const MaxPublishBatch = 256

// PublishContext is cancelled by a rebalance at once, and by a soft stop only
// after the drain timeout.
func (s *Node) PublishContext(soft, gctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(context.WithoutCancel(soft))
	stopG := context.AfterFunc(gctx, cancel)
	stopS := context.AfterFunc(soft, func() {
		t := time.AfterFunc(s.Drain, cancel)
		context.AfterFunc(c, func() { t.Stop() })
	})
	return c, func() { stopG(); stopS(); cancel() }
}

func (s *Node) PeriodOf(w int64) int64 { return window.Start(w, s.PeriodMs) }

func (s *Node) PublishUnit(ctx context.Context, u *ledger.Unit, passedAt time.Time) error {
	return s.PublishUnits(ctx, []*ledger.Unit{u}, passedAt)
}

// PublishUnits publishes recorded units in one write (acknowledged by all
// in-sync replicas), then marks them published in one transaction.
func (s *Node) PublishUnits(ctx context.Context, units []*ledger.Unit, passedAt time.Time) error {
	keys := make([][]byte, 0, len(units))
	for _, u := range units {
		keys = append(keys, u.Key())
	}
	if err := s.Sink.PublishUnits(ctx, units); err != nil {
		return fmt.Errorf("publish %d units from %s@%s: %w", len(units), units[0].Histogram, release.RFC3339(units[0].WindowStart), err)
	}
	if err := s.Ledger.MarkPublishedKeys(ctx, keys); err != nil {
		return err
	}
	for _, u := range units {
		s.published(u, passedAt)
		if dir := s.Cfg.Output.ArrowDir; dir != "" {
			if err := release.WriteArrow(dir, u); err != nil {
				// The release is out and recorded: a failed extra copy is
				// logged, not retried (it holds nothing the topic lacks).
				s.Log.Error("arrow output failed", zap.Error(err))
			}
		}
	}
	return nil
}

// published updates stats and views after u was acknowledged.
func (s *Node) published(u *ledger.Unit, passedAt time.Time) {
	if u.Status == ledger.StatusReleased {
		s.Stats.Releases.Add(int64(len(release.ReleaseMessages(u))))
	}
	if s.Printer != nil {
		s.Printer.PrintUnit(u) // only once recorded and published: never a draw that was not charged
	}
	if s.OnRel != nil {
		var lat time.Duration
		if !passedAt.IsZero() {
			lat = s.Now().Sub(passedAt)
		}
		s.OnRel(u, lat)
	}
}

// RepublishPending publishes every recorded but unacknowledged unit.
func (s *Node) RepublishPending(ctx context.Context) error {
	var pending []*ledger.Unit
	if err := s.Ledger.Units(func(u *ledger.Unit) bool {
		if !u.Published {
			pending = append(pending, u)
		}
		return true
	}); err != nil {
		return err
	}
	for _, u := range pending {
		s.Log.Info("republishing recorded release", zap.String("histogram", u.Histogram), zap.String("window_start", release.RFC3339(u.WindowStart)))
		if err := s.PublishUnit(ctx, u, time.Time{}); err != nil {
			return err
		}
	}
	return nil
}

// LogProgress logs the counters so far. Their units differ, and the field
// names say which: messages_* count input messages; contributions_* count
// (event, histogram) contributions — an event adds one to each histogram it
// feeds, so they can exceed the messages consumed (dpstage_events_* and
// dpstage_contributions_* in docs/metrics.md). A decoder drop (bad_json,
// missing_user, …) is one per message; missing_field, out_of_domain,
// unknown_group, unsampled_key, key_too_long, bad_vector and wrong_type are
// one per histogram part.
func (s *Node) LogProgress() {
	s.Log.Info("progress",
		zap.Int64("messages_consumed", s.Stats.Consumed.Load()),
		zap.Int64("messages_decoded", s.Stats.Decoded.Load()),
		zap.Int64("contributions_counted", s.Stats.Counted.Load()),
		zap.Any("contributions_dropped", s.Stats.Dropped()),
		zap.Int64("releases", s.Stats.Releases.Load()),
		zap.Int64("budget_exhausted", s.Stats.Exhausted.Load()),
	)
}

// JoinContexts returns a context cancelled when either parent is.
func JoinContexts(a, b context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(a)
	stop := context.AfterFunc(b, cancel)
	return c, func() { stop(); cancel() }
}
