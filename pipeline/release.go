package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/source"
	"github.com/dpstage/stage/window"
)

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
	prunedFrom := sess.next - s.sizeMs // attach pruned behind the last recorded window
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
			recCtx, cancel := s.publishContext(soft, gctx)
			units, err := s.closeAndRecord(recCtx, sess, next)
			cancel()
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
			s.pruneRunning(either, &prunedFrom)
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
//
// A release log fenced by a newer owner (kafkalog.ErrFenced: another
// instance took over the log) stops the stage whatever else happened: this
// instance is a zombie, and its draw of the window was never committed nor
// published.
func (s *Stage) releaseFailed(soft, gctx context.Context, w int64, err error) {
	if errors.Is(err, kafkalog.ErrFenced) || soft.Err() == nil && gctx.Err() == nil {
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
func (s *Stage) closeAndRecord(ctx context.Context, sess *session, w int64) ([]*ledger.Unit, error) {
	counts, users, err := s.closeWindow(sess, w)
	if err != nil {
		return nil, err
	}
	defer counts.Release()
	var adm *ledger.Admitted // the users the cross-window bound admits to w
	if sess.adm != nil {
		adm = &ledger.Admitted{Period: s.periodOf(w), Users: users}
	}
	return s.rel.RecordAdmitted(ctx, w, counts, counts, adm)
}

// closeWindow closes, in every window size, the windows ending with base
// window w (the releaser of the single-process mode, a bounder of the
// distributed mode) and counts what the bounds dropped at the close. With
// the cross-window bound it returns the users admitted to w: the window's
// eligible users are those with a part to count in any histogram, each
// decided once (Admissions.Admit), the count and average histograms
// sharing the decision. The caller releases counts.
func (s *Stage) closeWindow(sess *session, w int64) (counts *boundary, admitted []uint64, err error) {
	sess.closeMu.Lock()
	var admit func(uint64) bool
	if sess.adm != nil {
		period := s.periodOf(w)
		sess.adm.Forget(period) // earlier periods are over
		decided := map[uint64]bool{}
		admit = func(u uint64) bool {
			u = aggregate.UserKey(u)
			ok, seen := decided[u]
			if !seen {
				ok = sess.adm.Admit(period, u)
				decided[u] = ok
				if ok {
					admitted = append(admitted, u)
				}
			}
			return ok
		}
	}
	// The windows of every size ending with w (windows.go).
	counts, err = sess.closeBoundary(w+s.sizeMs, admit)
	sess.next = w + s.sizeMs
	sess.closeMu.Unlock()
	if err != nil {
		return nil, nil, fmt.Errorf("close window %s: %w", release.RFC3339(w), err)
	}
	if d := counts.Displaced(); d > 0 { // counted on arrival, then the user was evicted
		s.stats.DropN(decode.ReasonBoundDisplaced, d)
	}
	// Counted on arrival, then earlier windows took the user's K.
	if nc, na := counts.NotAdmitted(); nc+na > 0 {
		s.stats.DropN(decode.ReasonBoundWindows, nc+na)
	}
	if n := counts.AverageNotSelected(); n > 0 {
		s.stats.AverageNotSelected.Add(n)
	}
	return counts, admitted, nil
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
	if err := s.ledger.MarkPublishedKeys(ctx, keys); err != nil {
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
