package single

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/dpstage/stage/consume"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/source"
	"go.uber.org/zap"
)

// releaseLoop closes windows as the watermark passes them, releases them and
// commits offsets. It is the only goroutine that releases in a session.
func (s *stage) releaseLoop(soft, gctx context.Context, sess *generation, regroup func()) {
	// A rebalance may have cut a batch publish short in the previous
	// generation: its units are recorded but not acknowledged. Publish them
	// (same values) first; offsets are only ever committed below, after
	// that, so no commit passes an unpublished release.
	pubCtx, cancel := s.PublishContext(soft, gctx)
	err := s.RepublishPending(pubCtx)
	cancel()
	if err != nil {
		s.releaseFailed(soft, gctx, sess.Next, err)
		return
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	pc := source.NewPartitionCounter(s.Dialer, s.Brokers, sess.Topic)
	defer pc.Close()
	either, cancelEither := node.JoinContexts(soft, gctx)
	defer cancelEither()
	prunedFrom := sess.Next - s.SizeMs // attach pruned behind the last recorded window
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
		wm, _, ok := sess.WM.Current()
		if !ok {
			continue
		}
		// The watermark was seen past the windows below at this tick at the
		// latest; latency is measured from here to the acknowledgement.
		passedAt := s.Now()
		next := sess.NextWindow()
		if next+s.SizeMs > wm || !s.allAssigned(either, sess, pc, regroup) {
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
			pubCtx, cancel := s.PublishContext(soft, gctx)
			err := s.PublishUnits(pubCtx, batch, passedAt)
			cancel()
			batch = batch[:0]
			if err != nil {
				s.releaseFailed(soft, gctx, closedTo, err)
				return false
			}
			return true
		}
		for next+s.SizeMs <= wm {
			if soft.Err() != nil || gctx.Err() != nil {
				break
			}
			recCtx, cancel := s.PublishContext(soft, gctx)
			units, err := s.closeAndRecord(recCtx, sess, next)
			cancel()
			if err != nil {
				s.releaseFailed(soft, gctx, next, err)
				return
			}
			batch = append(batch, units...)
			next += s.SizeMs
			closedTo = next
			if len(batch) >= node.MaxPublishBatch && !flush() {
				return
			}
		}
		if !flush() {
			return
		}
		if closedTo != math.MinInt64 {
			for _, t := range sess.Trackers {
				t.Released(closedTo)
			}
			s.commit(sess)
			s.PruneRunning(either, &prunedFrom)
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
func (s *stage) allAssigned(ctx context.Context, sess *generation, pc *source.PartitionCounter, regroup func()) bool {
	now := s.Now()
	if now.Before(sess.recheckAt) {
		return false
	}
	n, err := pc.Count(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.Log.Warn("cannot count the input topic's partitions; windows held", zap.Error(err))
		}
		sess.recheckAt = now.Add(time.Second)
		return false
	case n > len(sess.Parts):
		if sess.heldSince.IsZero() {
			sess.heldSince = now
			s.Log.Warn("the input topic has partitions this generation was not assigned; windows held until the group rebalances",
				zap.Int("partitions", n), zap.Int("assigned", len(sess.Parts)))
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

// releaseFailed handles a release that could not be made. A stop or a
// rebalance just ends the loop (recorded units are republished with the same
// values at the next start); anything else stops the stage: a stage that
// looks healthy but releases nothing is worse than one that restarts.
//
// A release log fenced by a newer owner (kafkalog.ErrFenced: another
// instance took over the log) stops the stage whatever else happened: this
// instance is a zombie, and its draw of the window was never committed nor
// published.
func (s *stage) releaseFailed(soft, gctx context.Context, w int64, err error) {
	if errors.Is(err, kafkalog.ErrFenced) || soft.Err() == nil && gctx.Err() == nil {
		s.Fail(fmt.Errorf("release up to window %s failed: %w", release.RFC3339(w), err))
	}
}

// closeAndRecord closes window w and records every histogram's unit (or
// finds it recorded). It returns the units still to publish.
func (s *stage) closeAndRecord(ctx context.Context, sess *generation, w int64) ([]*ledger.Unit, error) {
	counts, users, views, err := consume.CloseWindow(s.Node, sess.Session, w)
	if err != nil {
		return nil, err
	}
	defer counts.Release()
	var adm *ledger.Admitted // the users the cross-window bound admits to w, and to the views' windows ending with it
	if sess.Adm != nil {
		adm = &ledger.Admitted{Period: s.PeriodOf(w), Users: users, Views: views}
	}
	units, err := s.Rel.RecordAdmitted(ctx, w, counts, counts, adm)
	if err == nil {
		s.NoteWindowBound(counts.Bounds) // the operator's drop share and warning (never in a release)
	}
	return units, err
}

// commit commits, per partition, the offset before which every message
// belongs to a released window or was dropped.
func (s *stage) commit(sess *generation) {
	offsets := make(map[int]int64)
	for p, t := range sess.Trackers {
		if o, changed := t.CommitPoint(); changed {
			offsets[p] = o
		}
	}
	if len(offsets) == 0 {
		return
	}
	if err := sess.gen.CommitOffsets(map[string]map[int]int64{sess.Topic: offsets}); err != nil {
		s.Log.Warn("offset commit failed; will retry after the next release", zap.Error(err))
		return
	}
	for p, o := range offsets {
		sess.Trackers[p].MarkCommitted(o)
	}
	s.Stats.Commits.Add(1)
}
