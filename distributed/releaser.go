package distributed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/retry"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/partial"
	"github.com/dpstage/stage/partial/kafkapartial"
	"github.com/dpstage/stage/release"
)

// The releaser role of the distributed mode (dist.go).
//
// Every instance is a member of the release group on the partials topic,
// which has one partition: the group gives it to one member, the active
// releaser; the others wait as standbys. The active releaser
//
//  1. opens the release log (openKafkaLedger) under the log's fixed
//     transactional id: every older releaser of the deployment is fenced
//     (its open transaction aborted; its next record fails with
//     kafkalog.ErrFenced), and the log is restored from Kafka alone;
//  2. republishes what was recorded but not acknowledged, with the
//     recorded values;
//  3. reads the partials from the group's committed offset, read_committed,
//     into a partial.Merger starting at the ledger's resume window (the
//     partials of windows recorded already are skipped), and releases
//     every complete window in increasing order: record (draw and charge,
//     one ledger transaction), publish, mark published, then commit the
//     partials offset before which every record belongs to a recorded
//     window.
//
// At most once: a window is recorded by one transaction of the log's one
// transactional id; a releaser that lost partition 0 — revoked, lost, or
// paused past its session — either stopped before its next ledger write
// (revocation cancels it at once; after a lost session only the write in
// flight runs on, below) or is fenced at it (the new releaser opened the
// log first), so no two releasers record the same window, and
// the new one, restoring the log, skips what the old one recorded and
// republishes its values. The commit of the partials offset only saves
// re-reading: a commit lost to a crash makes the next releaser read
// partials of recorded windows again, and skip them.
//
// A zombie learns that it was fenced (issue 28 item 7). A releaser paused
// past its session (SIGSTOP, a long GC pause) is told on resuming, at its
// next heartbeat, that the group dropped it (OnRevoked, lost). It then
// records no further window, but the ledger write it had in flight when it
// was paused is not cut: it runs on (for at most lostWriteGrace) to the
// broker's answer — committed, or refused because a newer owner opened the
// log. Cutting it left the log dead with the outcome unknown, so the probe
// below could not ask, and the zombie stood down and ran on as a standby
// unaware (a write is in flight a good share of a busy releaser's time).
// The lead then returns, and a lead whose session was lost asks the log
// whether it was fenced (fencedProbe, at most fencedProbeTimeout). So a
// resumed zombie whose brokers answer exits with the fenced error within
// ZombieExitWithin of resuming; one whose brokers do not answer cannot
// learn either way, and stands down with its log closed (it releases
// nothing unless given the partials topic again, when it opens the log
// anew and fences in turn).

// runReleaser is the releaser role: a member of the release group until
// ctx ends, releasing while it holds the partials topic's partition.
func (s *stage) runReleaser(ctx context.Context) error {
	left := s.leaveLimit(ctx)
	var (
		mu sync.Mutex // guards stop and done: the group callbacks start and stop the active releaser
		// stop ends the active releaser (nil when standby); lost says its
		// group session was lost (its write in flight runs on, see
		// above). done is closed when it has returned.
		stop func(lost bool)
		done chan struct{}
	)
	// lost: the group session was lost while this instance held the
	// partials topic (paused or cut off past kafka.session_timeout): the
	// active releaser asks its log whether it was fenced (lead).
	var lost atomic.Bool
	// resets counts the reader's resets after a data loss (kgo's
	// ErrDataLoss): a lead commits no partials offset after one (lead).
	var resets atomic.Int64
	errc := make(chan error, 1)
	end := func(lost bool) {
		mu.Lock()
		st, d := stop, done
		stop, done = nil, nil
		mu.Unlock()
		if st != nil {
			st(lost)
			if s.leadCut != nil {
				s.leadCut(lost)
			}
			<-d
		}
	}
	var r *kafkapartial.Reader
	rdy := make(chan struct{}) // closed once r is set
	start := func() {
		mu.Lock()
		defer mu.Unlock()
		if stop != nil || ctx.Err() != nil {
			return // leading already, or stopping (Close may assign)
		}
		// The active releaser's context ends on a revocation at once (lead)
		// and on a soft stop only once the release in flight is published
		// (publishContext). Its ledger writes' context ends with it, except
		// after a lost session: then the write in flight runs on to the
		// broker's answer, for at most lostWriteGrace.
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		wctx, cancelW := context.WithCancel(context.WithoutCancel(ctx))
		d := make(chan struct{})
		stop, done = func(lost bool) {
			cancel()
			if !lost {
				cancelW()
				return
			}
			t := time.AfterFunc(lostWriteGrace, cancelW)
			context.AfterFunc(wctx, func() { t.Stop() })
		}, d
		go func() { // owner: runReleaser, through stop/done
			defer close(d)
			defer cancelW()
			defer cancel()
			select {
			case <-rdy:
			case <-lctx.Done():
				return
			}
			if err := s.lead(ctx, lctx, wctx, r, &lost, &resets); err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		}()
	}
	var err error
	r, err = kafkapartial.NewReader(kafkapartial.ReaderConfig{
		Brokers: s.Brokers, Group: s.Cfg.Kafka.ReleaseGroupID(), Topic: s.Cfg.Kafka.PartialsTopic(),
		SessionTimeout: s.Cfg.Kafka.SessionTimeout.D(),
		Opts:           s.Kgo,
		OnAssigned:     start,
		Warn: func(err error) {
			var dl *kgo.ErrDataLoss
			if errors.As(err, &dl) {
				resets.Add(1)
				s.partialsLost(fmt.Sprintf("the release group's reader lost records of the partials topic: %v", dl))
				return
			}
			s.Log.Warn("release group", zap.Error(err))
		},
		OnRevoked: func(wasLost bool) {
			switch {
			case ctx.Err() != nil && !wasLost: // a requested stop: this instance leaves the group
				s.Log.Info("releaser: stopping: leaving the release group (another replica takes the partials topic over)")
			default:
				s.Log.Info("the partials topic was taken from this instance: releasing stops", zap.Bool("lost", wasLost))
			}
			lost.Store(wasLost)
			end(wasLost)
		},
	})
	if err != nil {
		return fmt.Errorf("distributed: %w", err)
	}
	close(rdy)
	s.Log.Info("releaser: joined the release group as a standby", zap.String("group", s.Cfg.Kafka.ReleaseGroupID()),
		zap.String("partials_topic", s.Cfg.Kafka.PartialsTopic()))
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	end(false)
	r.CloseWithin(left())
	return runErr
}

// lead is the active releaser, from the assignment of the partials topic
// until lctx ends (revocation) or soft does (a soft stop: the release in
// flight is finished first, bounded by the drain timeout). It returns an
// error only for what must stop the stage; a fenced release log is one
// (kafkalog.ErrFenced: this instance is a zombie).
//
// lost (set by the group callback before lctx ends) says the group session
// was lost, not revoked: this instance was paused or cut off past its
// session, and another may have taken the log over. Before it closes the
// log it then asks the log (fencedProbe): a zombie learns it was fenced and
// stops the stage with the fenced error; a releaser whose session lapsed
// before anyone took over stands down and rejoins as a standby.
//
// The ledger writes run under wctx, which ends with lctx except after a
// lost session, when it ends lostWriteGrace later: the write in flight
// then gets the broker's answer (a fenced one stops the stage) instead of
// being cut into an unknown outcome that leaves the log unable to answer
// the probe. No window is recorded and no log is opened or pruned once
// lctx has ended; what was recorded may still be published (and marked).
//
// resets counts the reader's data-loss resets (kgo's ErrDataLoss): after
// one, the offsets read may restart lower (a topic recreated while read),
// so the merger's commit point would mix two offset sequences; the lead
// then commits no partials offset any more (a restart re-reads from the
// last commit and skips what is recorded).
func (s *stage) lead(soft, lctx, wctx context.Context, r *kafkapartial.Reader, lost *atomic.Bool, resets *atomic.Int64) (err error) {
	either, cancel := node.JoinContexts(soft, lctx)
	defer cancel()
	writes, cancelW := node.JoinContexts(soft, wctx) // either, for ledger writes
	defer cancelW()
	n, err := kafkapartial.InputPartitions(either, r.Client(), s.Cfg.Kafka.InputTopic)
	if err != nil {
		return s.leadErr(either, fmt.Errorf("distributed: count the input topic's partitions: %w", err))
	}
	led, err := s.OpenKafkaLedger(either) // no opening (fencing) after a lost session
	if err != nil {
		return s.leadErr(either, err)
	}
	// state_loaded stays true after the log is closed: in the distributed
	// mode it says the internal topics are ready (Run);
	// releasing says this instance holds the log.
	defer func() {
		if err == nil && lost.Load() && soft.Err() == nil {
			err = s.fencedProbe(led)
		}
		s.Ready.Releasing.Store(false)
		_ = led.Close()
	}()
	if err := s.Attach(writes, led); err != nil {
		return s.leadErr(either, err)
	}
	if either.Err() != nil {
		return nil // revoked or lost while attaching (the write in flight has answered)
	}
	pubCtx, cancelPub := s.PublishContext(soft, wctx)
	err = s.RepublishPending(pubCtx)
	cancelPub()
	if err != nil {
		return s.leadErr(either, fmt.Errorf("distributed: republish recorded releases: %w", err))
	}
	resume, err := s.ResumeWindow()
	if err != nil {
		return s.leadErr(either, fmt.Errorf("read ledger: %w", err))
	}
	if err := s.CheckNeighbour(resume); err != nil {
		return err
	}
	if err := s.loadProgressID(either, r.Client()); err != nil {
		return s.leadErr(either, err)
	}
	_, since, err := s.LimitNewHistograms(writes, resume, s.progressIDKeys())
	if err == nil {
		err = s.checkProgressID(resume, since)
	}
	if err != nil {
		return s.leadErr(either, err)
	}
	incomplete, err := s.noteInputPartitions(writes, led, n, resume, since) // partitions.go
	if err != nil {
		return s.leadErr(either, err)
	}
	m, err := partial.NewMerger(n, s.SizeMs, resume, s.layout(), s.CountingConfig)
	if err != nil {
		return err
	}
	avgs := s.newPendingAverages()            // average histograms' kept users (features.go)
	for _, f := range s.olderFingerprints() { // partials of replicas not upgraded yet
		m.AlsoMerge(f)
	}
	if mergeSumsLimit > 0 {
		m.SetSumsLimit(mergeSumsLimit)
	}
	if !s.Arrival {
		// The grace and the lease of an Idle record are both the idle
		// timeout; bounders write their Idle records again every half of
		// it (stage.idleRemark).
		t := s.Cfg.Window.IdlePartitionTimeout.D()
		m.SetIdleClock(t, t, s.Now)
	}
	s.Stats.PartitionsIdle.Store(0)
	defer s.Stats.PartitionsIdle.Store(0)
	defer func() { s.clearGaps(); s.Ready.PartialsLost.Store(false) }()
	resetBase := resets.Load()
	if err := s.checkPartialsLoss(either, r); err != nil && either.Err() == nil {
		s.Log.Warn("releaser: could not compare the release group's committed offset with the partials topic (data loss check skipped; a lost partial still holds its window)", zap.Error(err))
	}
	lsoDone := make(chan struct{})
	go func() { // owner: lead; ends with either
		defer close(lsoDone)
		s.watchPartialsLSO(either, r.Client())
	}()
	defer func() { cancel(); <-lsoDone }()
	s.Log.Info("releaser: active", zap.Int("input_partitions", n), zap.String("resume_window", release.RFC3339(resume)))
	// attach pruned behind the last recorded window (pruneRunning)
	prunedFrom := resume - s.SizeMs

	committed := int64(-1)
	var gapLogged time.Time // when the held window's gaps were last logged
	var gapKey string       // which window and partitions were logged then
	var heldSince time.Time // since when heldWindow has been the next window
	var heldWindow int64
	countedAt := s.Now() // when the input partitions were last counted
	for {
		// A window only idle partitions hold is handed out after the idle
		// grace, records or not: poll no longer than that, and no longer
		// than a second, so that the input's partition count is asked
		// every second (checkInputPartitions).
		wait := time.Second
		if d, ok := m.IdleWait(); ok {
			wait = min(wait, d+10*time.Millisecond)
		}
		pctx, cancelPoll := context.WithTimeout(either, wait)
		recs, err := r.Poll(pctx)
		cancelPoll()
		if either.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		for _, rec := range recs {
			if rec.Err != nil {
				m.Skip(rec.Offset)
				reason := partial.ReasonOf(rec.Err)
				s.Stats.Partials[partial.Foreign].Add(1)
				s.Stats.PartialsMalformed[reason].Add(1)
				s.Log.Error("releaser: a record of the partials topic that does not decode, or carries values no bounder makes, was skipped (written by something else, or by another version of the stage); "+
					"it counts for nothing: its partition's window waits for a partial this version reads",
					zap.Int64("offset", rec.Offset), zap.Stringer("reason", reason), zap.Error(rec.Err))
				continue
			}
			if d := rec.Idle; d != nil {
				if s.Arrival {
					// Only event-mode bounders write Idle records: these
					// are left from before a switch to the arrival
					// watermark, where no partition is ever idle.
					continue
				}
				was := slices.Contains(m.Idle(), d.Partition)
				res := m.SetIdle(d, rec.Offset)
				if res == partial.Foreign {
					s.Stats.Partials[partial.Foreign].Add(1)
					s.Log.Error("releaser: an idle record made for another window size or input partition count was skipped (a replica on another config): it says nothing about this config's windows",
						zap.Int64("offset", rec.Offset), zap.Int("partition", d.Partition), zap.Int("record_partitions", d.Partitions), zap.Int("input_partitions", n),
						zap.Int64("record_window_ms", d.WindowMs), zap.Int64("window_ms", s.SizeMs))
					continue
				}
				if res == partial.Added && was != d.Idle { // not when read again (Skipped)
					s.Log.Info("releaser: source partition idle state changed (window.watermark event): an idle partition does not hold windows",
						zap.Int("partition", d.Partition), zap.Bool("idle", d.Idle), zap.String("next_window", release.RFC3339(d.Next)))
				}
				continue
			}
			if err := avgs.check(rec.Partial); err != nil {
				s.skipMalformed(rec.Offset, rec.Partial, err)
				continue
			}
			res, err := m.Add(rec.Partial, rec.Offset)
			if errors.Is(err, partial.ErrFormat) {
				s.skipMalformed(rec.Offset, rec.Partial, err)
				continue
			}
			if err != nil {
				return fmt.Errorf("distributed: partials topic offset %d: %w", rec.Offset, err)
			}
			avgs.note(m, rec.Partial, res)
			s.Stats.Partials[res].Add(1)
			switch res {
			case partial.Late:
				if n := rec.Partial.Total(); n > 0 {
					s.Stats.LatePartialCounts.Add(int64(n))
					s.Log.Warn("releaser: a source partition's partial came after its window was released without it (the partition was idle, window.watermark event): its counts are dropped as late",
						zap.Int64("offset", rec.Offset), zap.String("window_start", release.RFC3339(rec.Partial.WindowStart)),
						zap.Int("partition", rec.Partial.Partition), zap.Float64("counts", n))
				}
			case partial.Duplicate:
				s.Log.Warn("a second, identical partial of a (window, source partition) ignored", zap.Int64("offset", rec.Offset),
					zap.String("window_start", release.RFC3339(rec.Partial.WindowStart)), zap.Int("partition", rec.Partial.Partition))
			case partial.Foreign:
				s.logForeign(rec.Offset, rec.Partial, n)
			case partial.Conflict:
				s.Log.Error("a second partial of a (window, source partition) with different counts ignored: two bounders wrote one partition",
					zap.Int64("offset", rec.Offset), zap.String("window_start", release.RFC3339(rec.Partial.WindowStart)),
					zap.Int("partition", rec.Partial.Partition))
			}
		}
		if !s.Arrival {
			s.Stats.PartitionsIdle.Store(int64(len(m.Idle()))) // a lease may have run out without a record
		}
		// Every second, whether windows are released or not: a change is
		// recorded when first seen (partitions.go).
		if now := s.Now(); now.Sub(countedAt) >= time.Second {
			countedAt = now
			if err := s.checkInputPartitions(either, writes, r.Client(), led, n, m.ReleasedTo()); err != nil {
				if errors.Is(err, node.ErrConfigChanged) {
					return s.leadErr(either, err)
				}
				s.Log.Debug("releaser: cannot count the input topic's partitions (asked again before the next release)", zap.Error(err))
			}
		}
		passedAt := s.Now()
		var batch []*ledger.Unit
		closedTo := int64(math.MinInt64)
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			pubCtx, cancel := s.PublishContext(soft, wctx)
			err := s.PublishUnits(pubCtx, batch, passedAt)
			cancel()
			batch = batch[:0]
			return err
		}
		checked := false
		for {
			w, ok := m.Next()
			if !ok || soft.Err() != nil || lctx.Err() != nil {
				break
			}
			if !checked {
				if err := s.recheckProgressID(either, r.Client(), w.Start); err != nil {
					return s.leadErr(either, err)
				}
				// The partials of the windows below were read before this
				// count: none holds an event written after a change
				// (partitions.go). A count that cannot be had holds them.
				if err := s.checkInputPartitions(either, writes, r.Client(), led, n, w.Start); err != nil {
					if errors.Is(err, node.ErrConfigChanged) || either.Err() != nil {
						return s.leadErr(either, err)
					}
					s.Log.Warn("releaser: cannot count the input topic's partitions; windows held", zap.Error(err))
					break
				}
				countedAt = s.Now()
				checked = true
			}
			recCtx, cancel := s.PublishContext(soft, wctx)
			means := avgs.means(w)
			units, err := s.Rel.RecordAdmitted(recCtx, w.Start, w, means, nil)
			cancel()
			if err != nil {
				return s.releaseErr(soft, lctx, w.Start, err)
			}
			s.NoteWindowBound(s.windowBounds(w, means)) // the operator's drop share and warning (never in a release)
			if in, all := w.Included(); in < all || incomplete != nil && incomplete(w.Start) != "" {
				s.Stats.IncompleteWindows.Add(1) // released with "complete": false (release.Coverage)
			}
			m.Released(w)
			avgs.released(w.Start)
			s.Ready.PartialsLost.Store(false) // a complete window: every partial of it was read
			closedTo = w.Start + s.SizeMs
			batch = append(batch, units...)
			if len(batch) >= node.MaxPublishBatch {
				if err := flush(); err != nil {
					return s.releaseErr(soft, lctx, closedTo, err)
				}
			}
		}
		if err := flush(); err != nil {
			return s.releaseErr(soft, lctx, closedTo, err)
		}
		if closedTo != math.MinInt64 && lctx.Err() == nil {
			s.PruneRunning(writes, &prunedFrom)
		}
		if off, ok := m.Reread(); ok {
			// The next window's partials that came while it was past the
			// merger's sums limit (a partition lagged far behind) are
			// read again for their counts (partial.Merger, "Memory").
			s.Log.Info("releaser: reading the partials topic again for the counts of the next window, which came while it was too far ahead to hold them",
				zap.String("window_start", release.RFC3339(m.ReleasedTo())), zap.Int64("from_offset", off))
			r.ReadFrom(off)
		}
		if gaps := m.Gaps(); len(gaps) > 0 {
			k := fmt.Sprint(gaps[0].Window)
			for _, g := range gaps {
				k += fmt.Sprintf("/%d", g.Partition)
			}
			if k != gapKey || s.Now().Sub(gapLogged) > time.Minute {
				s.logGaps(gaps)
				gapKey, gapLogged = k, s.Now()
			}
			s.Stats.PartialGaps.Store(int64(len(gaps)))
			s.Ready.PartialsGap.Store(true)
		} else {
			s.clearGaps()
			gapKey = ""
		}
		// A window held for over a minute by the same partitions is worth
		// a warning (between windows some partition always lags a little).
		if lag := m.Lagging(); len(lag) > 0 {
			if w := m.ReleasedTo(); w != heldWindow || heldSince.IsZero() {
				heldWindow, heldSince = w, s.Now()
			} else if s.Now().Sub(heldSince) > time.Minute {
				s.Log.Warn("releaser: a window has been held for over a minute by source partitions that have not passed it: their bounder lags or is down"+
					" (with window.watermark event, a partition that is not idle — read to its end and silent for window.idle_partition_timeout — holds windows: see docs/distributed.md)",
					zap.Ints("partitions", lag), zap.String("window_start", release.RFC3339(w)))
				heldSince = s.Now()
			}
		}
		// No commit after a reset (see resets above).
		if c := m.CommitPoint(); c > committed && resets.Load() == resetBase {
			// Like a publish, the commit after a release survives a soft
			// stop (drain timeout), not a revocation.
			comCtx, cancel := s.PublishContext(soft, lctx)
			err := r.Commit(comCtx, c)
			cancel()
			if err != nil {
				if lctx.Err() != nil || soft.Err() != nil {
					return nil
				}
				s.Log.Warn("partials offset commit failed; will retry after the next release", zap.Error(err))
			} else {
				committed = c
				s.Stats.Commits.Add(1)
			}
		}
		if soft.Err() != nil {
			return nil
		}
	}
}

// logForeign logs a partial the merger skipped as foreign (partial.Merger,
// "Foreign records"); it is counted in dpstage_partials_total{result="foreign"}.
// skipMalformed skips a partial that claims the releaser's counting config
// but does not fit it (cells or average vectors of other shapes, a Next
// that is not its window's end): never merged and never fatal — a crash
// would stop every releaser that reads it, for the partials retention
// (issue 22 item 2, poison partials). The Merger is unchanged by it, so
// its window still waits for that partition's partial of it: held, and
// reported as a gap, never released without it.
func (s *stage) skipMalformed(offset int64, p *partial.Partial, err error) {
	reason := partial.ReasonOf(err)
	s.Stats.Partials[partial.Foreign].Add(1)
	s.Stats.PartialsMalformed[reason].Add(1)
	s.Log.Error("releaser: a partial that does not fit this counting config, or carries values no bounder makes, was skipped (not merged); its window waits for that partition's partial of it",
		zap.Int64("offset", offset), zap.String("window_start", release.RFC3339(p.WindowStart)), zap.Int("partition", p.Partition), zap.Stringer("reason", reason), zap.Error(err))
}

func (s *stage) logForeign(offset int64, p *partial.Partial, n int) {
	fields := []zap.Field{zap.Int64("offset", offset), zap.String("window_start", release.RFC3339(p.WindowStart)), zap.Int("partition", p.Partition)}
	if p.WindowMs != s.SizeMs || p.Partitions != n {
		s.Log.Error("releaser: a partial made for another window size or input partition count was skipped: it is no partial of this config's windows, and the partition's own partial of the window is still awaited"+
			" (a replica runs another window.size, or counted another partition count; a bounder refuses to resume a partition under another window size)",
			append(fields, zap.Int64("partial_window_ms", p.WindowMs), zap.Int64("window_ms", s.SizeMs), zap.Int("partial_partitions", p.Partitions), zap.Int("input_partitions", n))...)
		return
	}
	s.Log.Error("releaser: a partial made under another counting config (events, window rules, histograms, contribution, input topic, partitioner) was not merged: its window is released without that source partition's counts (the release's metadata says which share of the partitions it covers); "+
		"finish the rolling config change (every replica on one config)",
		append(fields, zap.String("partial_config", p.Config), zap.String("releaser_config", s.CountingConfig))...)
}

// lostWriteGrace is how long the ledger write in flight when the group
// session was lost runs on, to the broker's answer, before it is cut
// (runReleaser): a refusal or a commit takes a request round trip or two
// when the brokers answer (kgo retries a coordinator move or a concurrent
// transaction within it); only brokers that do not answer reach it.
// fencedProbeTimeout bounds the probe that follows (fencedProbe).
const (
	lostWriteGrace     = 10 * time.Second
	fencedProbeTimeout = 10 * time.Second
)

// ZombieExitWithin bounds how long a releaser that resumes after a pause
// past its group session (sessionTimeout, kafka.session_timeout) and was
// taken over keeps running, from its resumption to its exit with the
// fenced error, when its brokers answer: kgo's next heartbeat
// (kafkapartial.HeartbeatInterval) is answered that the group dropped it;
// the ledger write it had in flight gets the broker's answer within
// lostWriteGrace; the fence probe within fencedProbeTimeout. Each is a
// request round trip or two in practice: 0.07 to 0.73 s from SIGCONT to the
// exit, measured with three processes on a 2-core machine at load 19–30.
func ZombieExitWithin(sessionTimeout time.Duration) time.Duration {
	return kafkapartial.HeartbeatInterval(sessionTimeout) + lostWriteGrace + fencedProbeTimeout
}

// mergeSumsLimit, when > 0, is the merger's sums limit in windows (tests
// only: partial.Merger.SetSumsLimit; its default otherwise).
var mergeSumsLimit int

// leadErr is err unless ctx ended (a revocation or a stop is no error).
func (s *stage) leadErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// releaseErr is releaseFailed's rule for the releaser role: a fenced
// release log always stops the stage (a zombie); a revocation or a stop
// only ends the active releaser; anything else stops the stage.
func (s *stage) releaseErr(soft, lctx context.Context, w int64, err error) error {
	if errors.Is(err, kafkalog.ErrFenced) || soft.Err() == nil && lctx.Err() == nil {
		return fmt.Errorf("release up to window %s failed: %w", release.RFC3339(w), err)
	}
	return nil
}

// layout is the shape of the counts the partials carry: per config
// histogram its bins and groups.
func (s *stage) layout() partial.Layout {
	var l partial.Layout
	for _, h := range s.Cfg.Histograms {
		l.Bins = append(l.Bins, len(h.Bins))
		l.Groups = append(l.Groups, len(h.GroupNames()))
		// One partition's window tracks at most max_tracked_users users,
		// each counting at most max_events_per_user events per histogram.
		l.MaxTotal = append(l.MaxTotal, float64(s.Cfg.Contribution.MaxTrackedUsers)*float64(s.Cfg.Contribution.MaxEventsPerUser))
		if h.IsAverage() {
			l.AverageCells += h.Average.Users * (len(h.Bins) + 1)
		}
		l.Selects = append(l.Selects, h.Selects())
	}
	// A selecting histogram's keyed cells (partial/keyed.go): decode keeps
	// keys of at most decode.MaxKeyBytes; a partition's keys count each
	// tracked user in at most max_groups_per_user keys.
	c := &s.Cfg.Contribution
	l.MaxKeyBytes, l.MaxEventsPerUser = decode.MaxKeyBytes, c.MaxEventsPerUser
	l.MaxKeyUsers = float64(c.MaxGroupsPerUser) * float64(c.MaxTrackedUsers)
	return l
}

// ensureInternalTopics creates the internal topics that are missing and
// checks the others (kafkapartial.EnsureTopics). The progress topic has
// the input topic's partition count, so the input topic must exist: it is
// waited for, with a log line, until ctx ends.
func (s *stage) ensureInternalTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(slices.Concat(s.Kgo, []kgo.Opt{kgo.SeedBrokers(s.Brokers...)})...)
	if err != nil {
		return fmt.Errorf("distributed: admin client: %w", err)
	}
	defer cl.Close()
	d := s.Cfg.Kafka.Distributed
	t := kafkapartial.Topics{Input: s.Cfg.Kafka.InputTopic, Partials: s.Cfg.Kafka.PartialsTopic(), Progress: s.Cfg.Kafka.ProgressTopic(),
		Ledger: s.Cfg.State.LedgerTopic, Output: s.Cfg.Kafka.OutputTopic, Period: s.Cfg.Privacy.Budget.Period.D(), ReplicationFactor: d.ReplicationFactor, Create: d.CreateTopics}
	backoff := retry.Backoff{Initial: 200 * time.Millisecond, Max: 5 * time.Second}
	logged := false
	for {
		n, err := kafkapartial.EnsureTopics(ctx, cl, t)
		if err == nil {
			s.Ready.SetConnected()
			s.Log.Info("internal topics ready", zap.Int("input_partitions", n), zap.String("partials", t.Partials),
				zap.String("progress", t.Progress), zap.String("ledger", t.Ledger))
			return nil
		}
		if pe := (*kafkapartial.InputPartitionsChangedError)(nil); errors.As(err, &pe) {
			return s.partitionsChanged(-1, pe.Was, pe.Now)
		}
		if errors.Is(err, kafkapartial.ErrTopicConfig) || ctx.Err() != nil {
			return fmt.Errorf("distributed: %w", err)
		}
		wait := backoff.Next()
		if errors.Is(err, kafkapartial.ErrNoInput) {
			if !logged {
				s.Log.Warn("waiting for the input topic to exist (the progress topic gets its partition count)", zap.String("input_topic", t.Input))
				logged = true
			}
		} else {
			s.Log.Warn("cannot create or check the internal topics; retrying", zap.Error(err), zap.Duration("wait", wait))
		}
		if err := retry.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// fencedProbe asks a release log this instance may have lost whether a
// newer owner fenced it: it records the log's histogram-since map again,
// unchanged (the same keys keep their values, ledger.NextSince), which a
// fenced producer cannot. It returns the fenced error, or nil when the
// record went through (nobody took the log over; it is left unchanged).
// Any other failure is logged: the instance stands down either way.
func (s *stage) fencedProbe(led *kafkalog.Log) error {
	ctx, cancel := context.WithTimeout(context.Background(), fencedProbeTimeout)
	defer cancel()
	next, err := s.ResumeWindow()
	if err == nil {
		keys, _ := s.SinceKeys(s.progressIDKeys())
		_, err = led.HistogramSince(ctx, keys, next)
	}
	switch {
	case errors.Is(err, kafkalog.ErrFenced):
		return fmt.Errorf("distributed: the release group session was lost (paused or cut off past kafka.session_timeout) and a newer releaser took the release log over: %w", err)
	case err != nil:
		s.Log.Warn("releaser: lost its group session; could not ask the release log whether it was taken over (standing down all the same)", zap.Error(err))
	default:
		s.Log.Info("releaser: lost its group session before another releaser took the release log over; standing down")
	}
	return nil
}

// logGaps logs the gaps that hold the next window (partial.Merger.Gaps):
// which source partitions miss their partial of it, why, and what to do.
func (s *stage) logGaps(gaps []partial.Gap) {
	var lost, late []int
	var firsts []string
	for _, g := range gaps {
		if g.StartedAfter() {
			late = append(late, g.Partition)
			firsts = append(firsts, release.RFC3339(g.First))
		} else {
			lost = append(lost, g.Partition)
		}
	}
	w := gaps[0].Window
	fix := "; to count the window again from the input, stop every replica and start them with a new kafka.distributed.internal_topic_prefix and state.ledger_topic set to " +
		strconv.Quote(s.Cfg.State.LedgerTopic) + " (the same release log): their bounders start at the release log's resume window and re-read the input's retained events; " +
		"with contribution.max_windows_per_user only at a budget period's start; see docs/distributed.md, \"When a window is complete\""
	if len(lost) > 0 {
		s.Log.Error("releaser: window held: source partitions passed it without their partial, which was lost on the partials topic (deleted or recreated, retention past the release group's committed offset, an unclean leader election); "+
			"releasing it would release their events as zeros"+fix,
			zap.String("window_start", release.RFC3339(w)), zap.Ints("partitions", lost), zap.String("partials_topic", s.Cfg.Kafka.PartialsTopic()))
	}
	if len(late) > 0 {
		s.Log.Error("releaser: window held: source partitions were counted from a later window, without the progress of the deployment that counted them before "+
			"(a switch from an older version's single-process mode, a changed kafka.group_id or internal_topic_prefix, or a lost progress topic): their events of the window were never counted; "+
			"releasing it would release them as zeros"+fix,
			zap.String("window_start", release.RFC3339(w)), zap.Ints("partitions", late), zap.Strings("first_windows", firsts))
	}
}

// clearGaps resets the gap gauge and readiness condition (no window is
// held for a gap, or this instance no longer releases).
func (s *stage) clearGaps() {
	s.Stats.PartialGaps.Store(0)
	s.Ready.PartialsGap.Store(false)
}

// partialsLost reports a data loss on the partials topic: a metric, the
// readiness condition (until a complete window is released) and an error
// line. The loss itself holds no window; a partial it took holds its
// window as a gap (partial.Merger), never released as zeros.
func (s *stage) partialsLost(what string) {
	s.Stats.PartialsDataLoss.Add(1)
	s.Ready.PartialsLost.Store(true)
	s.Log.Error("releaser: data loss on the partials topic: "+what+"; windows whose partials were lost are held (see partials_gap), never released without them",
		zap.String("partials_topic", s.Cfg.Kafka.PartialsTopic()))
}

// checkPartialsLoss compares the release group's committed offset on the
// partials topic with the topic's offsets when a lead starts: a committed
// offset below the log start (retention or a deletion passed it while no
// releaser read) or above the last stable offset (the topic was deleted
// and created again) means records the releaser needed are gone — the
// reader would resume at the log start without a word (kgo resets a
// partition it has not consumed yet silently).
func (s *stage) checkPartialsLoss(ctx context.Context, r *kafkapartial.Reader) error {
	topic := s.Cfg.Kafka.PartialsTopic()
	offs, err := kadm.NewClient(r.Client()).FetchOffsets(ctx, s.Cfg.Kafka.ReleaseGroupID())
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return fmt.Errorf("distributed: the release group's committed offset on %q: %w", topic, err)
	}
	o, ok := offs.Lookup(topic, 0)
	if !ok || o.At < 0 {
		return nil // nothing committed: read from the start
	}
	start, lso, err := kafkapartial.Offsets(ctx, r.Client(), topic, 0)
	if err != nil {
		return fmt.Errorf("distributed: offsets of %q: %w", topic, err)
	}
	switch {
	case o.At < start:
		s.partialsLost(fmt.Sprintf("the release group committed offset %d, the topic now starts at %d (retention or a deletion passed the committed offset while no releaser read)", o.At, start))
	case o.At > lso:
		s.partialsLost(fmt.Sprintf("the release group committed offset %d, the topic now ends at %d (it was deleted and created again)", o.At, lso))
	}
	return nil
}
