package distributed

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/consume"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/retry"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/partial"
	"github.com/dpstage/stage/partial/kafkapartial"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/source"
	"github.com/dpstage/stage/window"
)

// The bounder role (dist.go).
//
// Membership: a kgo group client in kafka.group_id on the input topic,
// cooperative-sticky, without offset commits, with the input topic's
// fetching paused: kgo only decides which member bounds which partition;
// the input is read with kafka-go (consume.Consume) from the offset kept in
// the progress topic. OnPartitionsAssigned starts a worker per partition;
// OnPartitionsRevoked and OnPartitionsLost stop them and wait (kgo calls
// them before it gives the partitions up).
//
// A worker of input partition p (boundWorker.run): open p's transactional
// writer (fencing every older owner of p) → restore p's progress → run the
// consume loop of p on a one-partition session from the restored offset →
// close each window p's watermark passes, in order, and emit its Partial,
// admissions and the new progress in one transaction (emit). Only after
// the commit is confirmed is the offset tracker advanced.
//
// Failures: a worker whose writer is fenced (kafkapartial.ErrFenced)
// ends and logs: another owner of p exists, the group has moved p or is
// about to. The process stays up; if p is still assigned to this member
// after the session timeout, a new worker starts (it restores from Kafka
// and fences in turn), so a fence that the group does not follow up never
// stalls p for good. Any other failure of a worker (the progress
// unreadable, a commit with an unknown outcome, the input topic's
// partition count changed) stops the stage (node.Node.Fail): it restarts and
// restores from Kafka, rather than look healthy while p stands still.

// bounder is the bounder role of one process.
type bounder struct {
	s     *stage
	ctx   context.Context // the role's: ends the workers
	cl    *kgo.Client     // the group client (also used for offset look-ups)
	topic string

	mu sync.Mutex // guards workers
	// workers are the running workers by input partition.
	workers map[int32]*workerHandle

	// stray counts input records the group client fetched although the
	// input topic is paused (must stay 0; tests).
	stray atomic.Int64

	peekMu sync.Mutex // guards peekAt and peekVal, and serializes logResume
	// peekAt is when logResume last read the release log's resume window
	// peekVal.
	peekAt  time.Time
	peekVal int64

	offMu sync.Mutex // guards offs
	// offs is, per owned input partition, the input offset of its last
	// emitted progress not yet committed to the consumer group
	// (commitLoop). Informational only — a bounder resumes from the
	// progress topic, never from the group's offsets — so that the usual
	// consumer-lag tools see the group's progress.
	offs map[int32]int64
}

// noteEmitted records p's resume offset for the next group commit.
func (b *bounder) noteEmitted(p int, offset int64) {
	b.offMu.Lock()
	if b.offs == nil {
		b.offs = map[int32]int64{}
	}
	b.offs[int32(p)] = offset
	b.offMu.Unlock()
}

// commitLoop commits, every second, the resume offsets of the windows
// emitted since the last commit to the consumer group (informational: see
// offs). It ends with ctx.
func (b *bounder) commitLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.offMu.Lock()
		offs := b.offs
		b.offs = nil
		b.offMu.Unlock()
		if len(offs) == 0 {
			continue
		}
		m := make(map[int32]kgo.EpochOffset, len(offs))
		for p, o := range offs {
			m[p] = kgo.EpochOffset{Epoch: -1, Offset: o}
		}
		b.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{b.topic: m}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil && ctx.Err() == nil {
				b.s.Log.Debug("bounder: informational offset commit failed (the progress topic holds the resume point)", zap.Error(err))
			}
		})
	}
}

// onBounder, when set (tests), sees each bounder runBounders makes.
var onBounder func(*bounder)

// workerHandle stops one partition's worker and waits for it.
type workerHandle struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// runBounders is the bounder role (dist.go): it keeps the workers of the
// partitions the group assigns this member until ctx ends, then stops them
// and leaves the group.
func (s *stage) runBounders(ctx context.Context) error {
	b := &bounder{s: s, ctx: ctx, topic: s.Cfg.Kafka.InputTopic, workers: map[int32]*workerHandle{}}
	left := s.leaveLimit(ctx)
	kctx, kill := context.WithCancel(context.Background()) // cl's context: CloseGroupClient cancels it
	defer kill()
	cl, err := kgo.NewClient(slices.Concat(s.Kgo, []kgo.Opt{
		kgo.WithContext(kctx),
		kgo.SeedBrokers(s.Brokers...),
		kgo.ConsumerGroup(s.Cfg.Kafka.GroupID),
		kgo.ConsumeTopics(b.topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(s.Cfg.Kafka.SessionTimeout.D()),
		kgo.HeartbeatInterval(min(3*time.Second, s.Cfg.Kafka.SessionTimeout.D()/3)),
		kgo.RebalanceTimeout(s.Cfg.Kafka.Rebalance().D()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { b.assigned(m[b.topic]) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { b.revoked(m[b.topic]) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			s.Ready.Standby.Store(false) // out of the group until it rejoins
			b.revoked(m[b.topic])
		}),
	})...)
	if err != nil {
		return fmt.Errorf("distributed: bounder group client: %w", err)
	}
	b.cl = cl
	if onBounder != nil {
		onBounder(b)
	}
	// Paused by topic: partitions assigned later are paused too (kgo keeps
	// the paused topics, not partitions).
	cl.PauseFetchTopics(b.topic)
	cctx, stopCommits := context.WithCancel(ctx)
	commitsDone := make(chan struct{})
	go func() { // owner: runBounders; ends before the client closes
		defer close(commitsDone)
		b.commitLoop(cctx)
	}()
	defer func() {
		stopCommits()
		<-commitsDone
		b.stopAll()
		kafkapartial.CloseGroupClient(cl, kill, left()) // leaves the group; its revoke finds no workers left
	}()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		if n := fs.NumRecords(); n > 0 {
			b.stray.Add(int64(n))
		}
		failed := false
		fs.EachError(func(t string, p int32, err error) {
			failed = true
			s.Log.Warn("bounder group client", zap.String("topic", t), zap.Int32("partition", p), zap.Error(err))
		})
		if errors.Is(fs.Err0(), kgo.ErrClientClosed) {
			break
		}
		if failed && retry.Sleep(ctx, time.Second) != nil { // a group error repeats at once: not a busy loop
			break
		}
	}
	return nil
}

// assigned starts a worker for each newly assigned partition.
func (b *bounder) assigned(parts []int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx.Err() != nil {
		return
	}
	for _, p := range parts {
		if _, ok := b.workers[p]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(b.ctx)
		h := &workerHandle{cancel: cancel, done: make(chan struct{})}
		b.workers[p] = h
		go func() { // owner: the bounder; ends with ctx (revoke, lost, stop)
			defer close(h.done)
			b.supervise(ctx, int(p))
		}()
	}
	b.s.Ready.Assigned.Store(len(b.workers) > 0)
	b.s.Ready.Standby.Store(len(b.workers) == 0) // kgo calls this at every join, also with nothing assigned
	b.s.Log.Info("bounder assigned partitions", zap.Int32s("partitions", parts), zap.Int32s("owned", b.ownedLocked()))
}

// ownedLocked returns the partitions this bounder works on now, sorted
// (the assignment logs say the set, not only the change). b.mu is held.
func (b *bounder) ownedLocked() []int32 { return slices.Sorted(maps.Keys(b.workers)) }

// revoked stops the workers of parts and waits for them.
func (b *bounder) revoked(parts []int32) {
	b.mu.Lock()
	var hs []*workerHandle
	for _, p := range parts {
		if h, ok := b.workers[p]; ok {
			h.cancel()
			hs = append(hs, h)
			delete(b.workers, p)
		}
	}
	b.s.Ready.Assigned.Store(len(b.workers) > 0)
	owned := b.ownedLocked()
	b.mu.Unlock()
	for _, h := range hs {
		<-h.done
	}
	b.s.DeleteLag(parts)
	b.offMu.Lock()
	for _, p := range parts {
		delete(b.offs, p) // its new owner commits it now
	}
	b.offMu.Unlock()
	if len(hs) > 0 {
		b.s.Log.Info("bounder revoked partitions", zap.Int32s("partitions", parts), zap.Int32s("owned", owned))
	}
}

// stopAll stops every worker and waits for them.
func (b *bounder) stopAll() {
	b.mu.Lock()
	parts := make([]int32, 0, len(b.workers))
	for p := range b.workers {
		parts = append(parts, p)
	}
	b.mu.Unlock()
	b.revoked(parts)
}

// supervise runs p's worker until ctx ends: again after a fence (see the
// failure rules above), the stage stopped on any other error.
func (b *bounder) supervise(ctx context.Context, p int) {
	for {
		err := b.runWorker(ctx, p)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, kafkapartial.ErrTimedOut) { // no newer owner: restore the committed progress and go on at once
			b.s.Log.Warn("bounder of input partition: a transaction outlived kafka.distributed.transaction_timeout and the broker aborted it; restarting from the committed progress",
				zap.Int("partition", p), zap.Error(err))
			continue
		}
		if !errors.Is(err, kafkapartial.ErrFenced) {
			if err == nil {
				err = errors.New("worker ended")
			}
			b.s.Fail(fmt.Errorf("bounder of input partition %d: %w", p, err))
			return
		}
		wait := b.s.Cfg.Kafka.SessionTimeout.D()
		b.s.Log.Warn("bounder of input partition fenced by a newer owner; stopped (restarted if still assigned after the session timeout)",
			zap.Int("partition", p), zap.Duration("wait", wait), zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// checkProgressWindow refuses to resume a partition whose progress was
// written under another window.size (node.ErrConfigChanged, as the
// single-process mode refuses a ledger of another window size): its Next
// and the partials it would emit lie on another grid than the release
// log's windows, and every releaser would have to skip them (partial.Merger,
// "Foreign records") while the partition held every window. A progress
// of an older bounder carries no window size (0); its Next and first window
// are then checked to lie on this size's grid, which catches every change
// that moves them off it.
func checkProgressWindow(pr *partial.Progress, sizeMs int64) error {
	got := pr.WindowMs
	if got == 0 && pr.Next%sizeMs == 0 && pr.First%sizeMs == 0 {
		return nil
	}
	if got == sizeMs {
		return nil
	}
	was := "another window.size (its next window " + release.RFC3339(pr.Next) + " is not on this size's grid)"
	if got != 0 {
		was = "window.size " + time.Duration(got*int64(time.Millisecond)).String()
	}
	return fmt.Errorf("%w: input partition %d was bounded with %s, the config says %s; windows of two sizes do not line up with the release log's — "+
		"revert window.size, or start a new deployment (a new state.ledger_topic and internal_topic_prefix, and a new output topic)",
		node.ErrConfigChanged, pr.Partition, was, time.Duration(sizeMs*int64(time.Millisecond)))
}

// checkProgressPeriod refuses to resume a partition whose progress was
// written under another privacy.budget.period (the second privacy review's
// finding): the cross-window bound's admissions are kept per period start,
// so a bounder of another period finds none of the current period's and
// admits every user to max_windows_per_user more windows — and its first
// checkpoint would tombstone the old period's. The releaser refuses a
// period change through the release log's metadata, but in a rolling
// change the releaser may still be a replica on the old config, merging
// the new bounders' partials under the old period's reservation. A
// progress of an older bounder carries no period (0): unknown, accepted.
func checkProgressPeriod(pr *partial.Progress, periodMs int64) error {
	if pr.PeriodMs == 0 || pr.PeriodMs == periodMs {
		return nil
	}
	return fmt.Errorf("%w: input partition %d was bounded with privacy.budget.period %s, the config says %s; the cross-window bound's admissions are kept per period — "+
		"revert privacy.budget.period, or start a new deployment (a new state.ledger_topic and internal_topic_prefix, and a new output topic)",
		node.ErrConfigChanged, pr.Partition, time.Duration(pr.PeriodMs*int64(time.Millisecond)), time.Duration(periodMs*int64(time.Millisecond)))
}

// runWorker bounds input partition p until ctx ends (nil) or it fails.
func (b *bounder) runWorker(ctx context.Context, p int) error {
	s := b.s
	cfg := s.Cfg
	pc := source.NewPartitionCounter(s.Dialer, s.Brokers, b.topic)
	defer pc.Close()
	n, err := pc.Count(ctx)
	if err != nil {
		return fmt.Errorf("count the input topic's partitions: %w", err)
	}
	if p >= n {
		return fmt.Errorf("input partition %d assigned, the topic has %d", p, n)
	}
	part, err := decode.ParsePartitioner(cfg.Kafka.Distributed.Partitioner)
	if err != nil {
		return err
	}
	w, err := kafkapartial.OpenWriter(ctx, kafkapartial.WriterConfig{
		Brokers: s.Brokers, PartialsTopic: cfg.Kafka.PartialsTopic(), ProgressTopic: cfg.Kafka.ProgressTopic(),
		Partition: p, TransactionalID: cfg.Kafka.BoundTransactionalID(p), ClientOpts: s.Kgo,
		TransactionTimeout: cfg.Kafka.Distributed.Txn(), PartialsJSON: cfg.Kafka.Distributed.PartialsFormat == config.PartialsJSON, SplitBytes: partialSplitBytes,
	})
	if err != nil {
		return err
	}
	defer w.Close()
	rs, err := w.Restore(ctx)
	if err != nil {
		return err
	}
	st := &boundState{p: p, n: n, adm: map[string]int64{}}
	if pr := rs.Progress; pr != nil {
		if pr.Partitions != n {
			return s.partitionsChanged(p, pr.Partitions, n) // partitions.go
		}
		if err := checkProgressWindow(pr, s.SizeMs); err != nil {
			return err
		}
		if err := checkProgressPeriod(pr, s.PeriodMs); err != nil {
			return err
		}
		st.offset, st.next, st.key = pr.Offset, pr.Next, siphash.KeyFromBytes(pr.UserKey)
		// A progress of an older bounder has no first window (0): its
		// partials then carry none, and a previous window.
		st.first, st.emitted = pr.First, pr.First == 0 || pr.Next > pr.First
	} else {
		// The partition's first start (or its progress was lost: a mode
		// switch, a changed group_id or internal_topic_prefix): its first
		// window is the one the release log resumes at (b.logResume), read
		// from the earliest offset, under a new secret key. Events of
		// earlier windows are late (recorded already, or before the
		// deployment's first window; never chosen by the data). Starting
		// at the wall clock's window instead would leave the windows from
		// the log's resume window on without this partition's counts: the
		// releaser holds such a window as a gap (partial.Merger).
		if st.next, err = b.logResume(ctx, p); err != nil {
			return err
		}
		st.first = st.next
		// Read from where the first counted window starts: countFrom, the
		// start of the longest histogram window open at st.next, whose
		// events before st.next still count (features.go) — not
		// st.next, which would skip them (the privacy review's finding).
		if st.offset, err = s.firstOffset(ctx, b.cl, b.topic, p, countFrom(cfg, st)); err != nil { // first.go
			return err
		}
		// s.UserKey is read only when a test set it (Options.HashKey): the
		// releaser's attach sets it concurrently otherwise.
		if s.HashKeySet {
			st.key = s.UserKey
		} else if st.key, err = siphash.NewKey(); err != nil {
			return err
		}
		// Recorded before anything is counted: an owner that takes the
		// partition over before the first window is emitted resumes with
		// this first window and key, not its own clock's (Writer.Start).
		if err := w.Start(ctx, &partial.Progress{Partition: p, Partitions: n, WindowMs: s.SizeMs, PeriodMs: s.PeriodMs, Offset: st.offset, Next: st.next, First: st.first, UserKey: st.key.Bytes()}); err != nil {
			return err
		}
	}
	sets, err := consume.NewWindowSets(cfg)
	if err != nil {
		return err
	}
	sess := &consume.Session{
		Topic:       b.topic,
		Parts:       []int{p},
		Trackers:    map[int]*source.OffsetTracker{p: source.NewOffsetTracker(st.offset)},
		Sets:        sets,
		First:       countFrom(cfg, st),
		Next:        st.next,
		UserKey:     &st.key,
		Partitioner: part,
		Partitions:  n,
	}
	sess.WM = s.NewWatermarks(cfg, sess.Parts)
	if sess.Adm, sess.ViewAdm, err = restoreAdmitted(cfg, s.PeriodOf(st.next), rs); err != nil {
		return err
	}
	for _, a := range rs.Admitted {
		st.adm[a.Key] = a.Period
	}
	s.Log.Info("bounder worker started", zap.Int("partition", p), zap.Int("partitions", n), zap.Int64("offset", st.offset),
		zap.String("next_window", release.RFC3339(st.next)), zap.Bool("restored", rs.Progress != nil),
		zap.Int("restored_records", rs.Records), zap.Int64("restored_bytes", rs.Bytes), zap.Bool("restored_checkpoint", rs.Snapshot != nil))

	cctx, stopConsume := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owner: runWorker; ends with cctx
		defer wg.Done()
		consume.Consume(cctx, s.Node, sess, p, st.offset)
	}()
	defer func() {
		stopConsume()
		wg.Wait()
		sess.ResetSets()
	}()
	return b.emitLoop(ctx, sess, st, w, pc)
}

// boundState is what a worker emits with each window besides its counts.
type boundState struct {
	p, n   int
	offset int64 // the input offset restored
	next   int64 // the first window not emitted
	// first is the partition's first window (partial.Progress.First; 0
	// when its progress predates it); emitted whether any window was
	// emitted (the next Partial's Prev is then next − size).
	first   int64
	emitted bool
	key     siphash.Key
	// adm are the admissions keys present in p's progress partition, with
	// their periods (tombstoned once their period is over).
	adm map[string]int64
	// marked (window.watermark: event) is what this worker last wrote in
	// an Idle record: markedNone before the first, so a new owner says at
	// once whether the partition is idle (its previous owner may have left
	// it marked idle); markedAt is when.
	marked   int8
	markedAt time.Time
}

// boundState.marked values.
const (
	markedNone int8 = iota
	markedIdle
	markedActive
)

// idleRemark is how often a partition that stays idle writes its Idle
// record again: half the idle timeout, which is the releaser's lease of an
// Idle record (partial.Merger.SetIdleClock), so a partition whose bounder
// died holds windows again one idle timeout after its last record. The
// releaser's commit point also stays at the latest record (so a releaser
// restarting there learns the partition is idle), and the partials
// topic's retention never deletes it.
func (s *stage) idleRemark() time.Duration { return s.Cfg.Window.IdlePartitionTimeout.D() / 2 }

// restoreAdmitted is the cross-window bound's state of period restored
// from p's checkpoint and the admissions records after it.
func restoreAdmitted(cfg *config.Config, period int64, rs *kafkapartial.Restored) (*aggregate.Admissions, map[int64]*aggregate.Admissions, error) {
	return consume.RestoreAdmissions(cfg, period, func(view int64) (map[uint64]uint16, error) {
		if view == 0 {
			return rs.Counts(period), nil
		}
		return rs.ViewCounts(period, view), nil
	})
}

// emitLoop closes and emits p's windows as its watermark passes them.
func (b *bounder) emitLoop(ctx context.Context, sess *consume.Session, st *boundState, w *kafkapartial.Writer, pc *source.PartitionCounter) error {
	s := b.s
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	recount := time.Now().Add(time.Second)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if now := time.Now(); now.After(recount) {
			recount = now.Add(time.Second)
			if m, err := pc.Count(ctx); err == nil && m != st.n {
				return s.partitionsChanged(st.p, st.n, m)
			}
		}
		if !s.Arrival {
			if err := b.markIdle(ctx, sess, st, w); err != nil {
				if ctx.Err() != nil && !errors.Is(err, kafkapartial.ErrFenced) {
					return nil
				}
				return fmt.Errorf("idle record of partition %d: %w", st.p, err)
			}
		}
		wm, _, ok := sess.WM.Current()
		if !ok {
			continue
		}
		for st.next+s.SizeMs <= wm {
			if ctx.Err() != nil {
				return nil
			}
			if err := b.emit(ctx, sess, st, w, wm); err != nil {
				if ctx.Err() != nil && !errors.Is(err, kafkapartial.ErrFenced) {
					return nil // stopped mid-transaction: the next owner emits it
				}
				return fmt.Errorf("emit window %s: %w", release.RFC3339(st.next), err)
			}
		}
	}
}

// markIdle (window.watermark: event) writes p's Idle record when p turns
// idle or active again (window.Watermarks.Idle: read to its end, no fetch
// failing, silent for window.idle_partition_timeout), at a worker's start,
// and every idleRemark while p stays idle. While p is idle the releaser
// releases the windows the other partitions passed without waiting for p,
// as the single-process stage's watermark leaves idle partitions out
// (partial.Merger). Unlike the single-process stage, whose windows are
// shared by every partition, p's open windows would then be released
// without p's counts: so p, turning idle, first closes and emits its
// windows up to the one of its latest event time. An event p reads for
// one of them afterwards is late (counted as late, as every event for a
// window its partition has closed).
func (b *bounder) markIdle(ctx context.Context, sess *consume.Session, st *boundState, w *kafkapartial.Writer) error {
	idle, latest, hasLatest := sess.WM.IdleLatest(st.p)
	now := time.Now()
	switch {
	case st.marked == markedNone:
	case idle && st.marked != markedIdle:
	case idle && now.Sub(st.markedAt) >= b.s.idleRemark():
	case !idle && st.marked == markedIdle:
	default:
		return nil
	}
	if idle && st.marked != markedIdle {
		// Turning idle: first emit every window up to the one of the
		// latest event time read, so that the events counted so far reach
		// the releaser (which from now on releases windows without waiting
		// for p); an event read later for one of those windows is late.
		if hasLatest {
			for last := window.Start(latest, b.s.SizeMs); st.next <= last; {
				if err := b.emit(ctx, sess, st, w, latest); err != nil {
					return fmt.Errorf("emit window %s before turning idle: %w", release.RFC3339(st.next), err)
				}
			}
			if !sess.WM.Idle(st.p) {
				return nil // events came during the emission: not idle after all (they are late for the windows emitted)
			}
		}
	}
	d := &partial.Idle{Partition: st.p, Partitions: st.n, WindowMs: b.s.SizeMs, Next: st.next, Idle: idle, Config: b.s.CountingConfig}
	if err := w.Mark(ctx, d); err != nil {
		return err
	}
	if was := st.marked; was == markedNone || idle != (was == markedIdle) {
		b.s.Log.Info("bounder: input partition idle state written (window.watermark event): an idle partition does not hold releases",
			zap.Int("partition", st.p), zap.Bool("idle", idle), zap.String("next_window", release.RFC3339(st.next)))
	}
	st.marked, st.markedAt = markedActive, now
	if idle {
		st.marked = markedIdle
	}
	return nil
}

// emit closes window st.next (closeWindow, as the single-process
// releaser does) and writes its Partial, admissions and
// the new progress in one transaction; only once it committed are the
// offsets advanced.
func (b *bounder) emit(ctx context.Context, sess *consume.Session, st *boundState, w *kafkapartial.Writer, wm int64) error {
	s := b.s
	win := st.next
	end := win + s.SizeMs
	period := s.PeriodOf(win)
	counts, users, views, err := consume.CloseWindow(s.Node, sess, win)
	if err != nil {
		return err
	}
	defer counts.Release()
	pt := &partial.Partial{WindowStart: win, WindowMs: s.SizeMs, Partition: st.p, Partitions: st.n, Next: end, Watermark: wm, Config: s.stampConfig(), First: st.first}
	if st.emitted {
		prev := win - s.SizeMs
		pt.Prev = &prev
	}
	s.addCells(pt, counts, end)
	for _, b := range counts.Bounds { // the window bound's drops, for the releaser's operator-side drop share
		if b.Dropped > 0 {
			pt.Dropped = append(pt.Dropped, partial.DropCell{H: b.H, N: b.Dropped})
		}
	}
	e := kafkapartial.Emission{Partial: pt}
	if sess.Adm != nil {
		e.Admitted = partial.ChunkAdmitted(period, win, users)
		if w.SnapshotDue(period, len(users)) { // a checkpoint instead, which tombstones every base admissions record (kafkapartial/snapshot.go)
			e.Admitted, e.Snapshot = nil, &kafkapartial.Snapshot{Period: period, Counts: sess.Adm.Counts(period)}
		}
		// The views' windows ending with win: their own records, never
		// folded into a checkpoint (kafkapartial.Restored.ViewCounts).
		for _, v := range views {
			e.Admitted = append(e.Admitted, partial.ChunkViewAdmitted(v.WindowMs, period, end-v.WindowMs, v.Users)...)
		}
	}
	for k, per := range st.adm {
		if per < period || (e.Snapshot != nil && !partial.IsViewAdmittedKey([]byte(k))) {
			e.Tombstones = append(e.Tombstones, []byte(k))
		}
	}
	tracker := sess.Trackers[st.p]
	tracker.Released(end)
	offset, _ := tracker.CommitPoint()
	if offset < st.offset {
		offset = st.offset
	}
	e.Progress = &partial.Progress{Partition: st.p, Partitions: st.n, WindowMs: s.SizeMs, PeriodMs: s.PeriodMs, Offset: offset, Next: end, First: st.first, UserKey: st.key.Bytes()}
	if err := w.Emit(ctx, e); err != nil {
		return err
	}
	// Committed: the window is emitted.
	s.Log.Debug("bounder emitted window", zap.Int("partition", st.p), zap.String("window", release.RFC3339(win)),
		zap.Int("cells", len(pt.Counts)), zap.Int64("offset", offset))
	tracker.MarkCommitted(offset)
	b.noteEmitted(st.p, offset)
	st.next, st.offset, st.emitted = end, offset, true
	for _, k := range e.Tombstones {
		delete(st.adm, string(k))
	}
	for _, a := range e.Admitted {
		st.adm[string(a.Key())] = a.Period
	}
	s.Stats.Commits.Add(1)
	return nil
}

// closedCells is what a Partial's cells are read from: the closed
// windows of one base boundary (*consume.Boundary), by config histogram
// index.
type closedCells interface {
	Counts(h, g int, dst []float64) []float64
	partial.KeySource
	KeptUsers(h int) []aggregate.KeptUser
}

// addCells adds to pt the cells of every histogram whose window ends at
// end: an average histogram's kept users, a selecting histogram's keys
// (keyed.go), and every other histogram's nonzero count vectors by group.
func (s *stage) addCells(pt *partial.Partial, counts closedCells, end int64) {
	var dst []float64
	for h, hc := range s.Cfg.Histograms {
		if !endsAt(s, h, end) {
			continue // its own window (histograms[].window) is still open: features.go
		}
		if hc.IsAverage() {
			if c := averageCell(counts, h); c != nil {
				pt.Averages = append(pt.Averages, *c)
			}
			continue
		}
		if hc.Selects() {
			if c := keyedCell(counts, h, len(hc.Bins)); c != nil {
				pt.Keyed = append(pt.Keyed, *c)
			}
			continue
		}
		for g := range max(1, len(hc.Groups)) {
			dst = counts.Counts(h, g, dst[:0])
			for _, c := range dst {
				if c != 0 {
					pt.Counts = append(pt.Counts, partial.Cell{H: h, G: g, Counts: append([]float64(nil), dst...)})
					break
				}
			}
		}
	}
}

// logResume is the first window of an input partition without progress:
// the window the release log resumes at (kafkalog.Peek), so that every
// partition starts counting where the releaser's next window is, whatever
// the wall clock of its bounder. A log nobody has attached to yet (a fresh
// deployment) is waited for: the releaser records the first window
// (window.start, or its wall clock's window) when it attaches, and every
// replica runs a releaser. One read serves the workers of this process
// that start together (peekMu).
func (b *bounder) logResume(ctx context.Context, p int) (int64, error) {
	s := b.s
	b.peekMu.Lock()
	defer b.peekMu.Unlock()
	if !b.peekAt.IsZero() && time.Since(b.peekAt) < 2*time.Second {
		return b.peekVal, nil
	}
	cfg := kafkalog.Config{Brokers: s.Brokers, Topic: s.Cfg.State.LedgerTopic, ClientOpts: s.Kgo}
	backoff := retry.Backoff{Initial: 200 * time.Millisecond, Max: 2 * time.Second}
	logged := false
	for {
		w, ok, err := kafkalog.Peek(ctx, cfg, s.SizeMs)
		if err == nil && ok {
			b.peekAt, b.peekVal = time.Now(), w
			s.Log.Info("bounder: input partition without progress starts at the release log's resume window",
				zap.Int("partition", p), zap.String("first_window", release.RFC3339(w)), zap.String("ledger_topic", cfg.Topic))
			return w, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if !logged {
			if err != nil {
				s.Log.Warn("bounder: cannot read the release log's resume window; retrying", zap.Int("partition", p), zap.Error(err))
			} else {
				s.Log.Info("bounder: waiting for a releaser to record the first window in the release log", zap.Int("partition", p), zap.String("ledger_topic", cfg.Topic))
			}
			logged = true
		}
		if err := retry.Sleep(ctx, backoff.Next()); err != nil {
			return 0, err
		}
	}
}
