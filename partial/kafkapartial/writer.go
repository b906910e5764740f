package kafkapartial

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/partial"
)

// The bounder's writer.
//
// A [Writer] is the transactional producer of one input partition p: the
// only writer of p's Partials (to the partials topic, partition 0) and of
// progress partition p, under the transactional id of p
// (config.Kafka.BoundTransactionalID). Fencing argument (as in
// ledger/kafkalog's package doc, with "owner of p" for "owner of the log"):
//
//  1. [OpenWriter] runs InitProducerID for p's id. The coordinator bumps
//     the epoch and aborts the previous owner's open transaction before it
//     answers (or completes a commit already prepared). From then on every
//     produce and EndTxn of an older owner is refused: a zombie commits
//     nothing more, and what it wrote after the fence lies behind an abort
//     marker that read_committed readers never see.
//  2. [Writer.Restore] then reads progress partition p read_committed up to
//     its last stable offset taken after step 1: only p's id writes there,
//     so nothing is open and the LSO is the end of everything p's owners
//     ever committed. Each Emit commits a window's Partial, admissions and
//     Progress together, so the restored Progress is that of the last
//     window whose Partial is visible to the releaser, and the admissions
//     restored are exactly those of the windows emitted. A checkpoint of
//     the admissions (snapshot.go) is committed in a window's transaction
//     with that window's Progress, which points at it, so the checkpoint
//     and the admissions records after it are the same state.
//  3. While this owner commits, no other does (step 1 with this owner as
//     the zombie); its commit then fails with ErrFenced.
//
// Hence every (window, partition) has at most one committed Partial (the
// new owner resumes at the restored Next), and at least one as long as an
// owner keeps running (each window from Next on is emitted in order).

// Errors of a Writer.
var (
	// ErrFenced: a newer owner of the input partition opened a writer with
	// the same transactional id. The Writer refuses every later call; the
	// caller must stop working on the partition (the group has moved it).
	ErrFenced = errors.New("kafkapartial: fenced by a newer owner of the input partition")
	// ErrUnusable: a transaction failed with an unknown outcome, or the
	// producer's state is unknown. The Writer refuses every later call.
	ErrUnusable = errors.New("kafkapartial: writer unusable after a failed transaction")
	// ErrClosed: the Writer was closed.
	ErrClosed = errors.New("kafkapartial: writer closed")
)

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Brokers are the seed brokers.
	Brokers []string
	// PartialsTopic (one partition) and ProgressTopic (one partition per
	// input partition, compacted) are the internal topics.
	PartialsTopic, ProgressTopic string
	// Partition is the input partition p; its progress lives in partition
	// p of ProgressTopic.
	Partition int
	// TransactionalID is p's fixed transactional id
	// (config.Kafka.BoundTransactionalID(p)).
	TransactionalID string
	// TransactionTimeout bounds how long a crashed owner's open
	// transaction holds the topics' last stable offsets back when no new
	// owner opens. Zero: 10s.
	TransactionTimeout time.Duration
	// PartialsJSON writes the Partials in the JSON encoding of older
	// versions (partial.Partial.EncodeJSON) rather than Arrow
	// (kafka.distributed.partials_format json: an upgrade's first roll).
	PartialsJSON bool
	// SplitBytes is the record size a Partial is split into parts beyond
	// (partial.Partial.Split); 0: partial.MaxRecordBytes (tests set less).
	SplitBytes int
	// ClientOpts are extra kgo options (TLS, SASL, logging). They must not
	// change the isolation level, partitioner or transactional id.
	ClientOpts []kgo.Opt
}

func (c WriterConfig) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("kafkapartial: no brokers")
	case c.PartialsTopic == "" || c.ProgressTopic == "":
		return errors.New("kafkapartial: no internal topics")
	case c.Partition < 0:
		return fmt.Errorf("kafkapartial: partition %d < 0", c.Partition)
	case c.TransactionalID == "":
		return errors.New("kafkapartial: no transactional id")
	case c.TransactionTimeout < 0:
		return fmt.Errorf("kafkapartial: transaction timeout %v < 0", c.TransactionTimeout)
	}
	return nil
}

// Writer writes one input partition's Partials and progress, one
// transaction per window. Its methods are safe for concurrent use.
type Writer struct {
	cfg WriterConfig
	cl  *kgo.Client

	// mu guards dead and open, and serializes transactions.
	mu   sync.Mutex
	dead error // non-nil: every call returns it
	// open: a transaction was begun and neither committed, aborted nor
	// attempted to commit (Close aborts it).
	open bool

	// ckpt is the partition's checkpoint state (snapshot.go); guarded by
	// mu.
	ckpt ckptState

	// beforeCommit, when set (tests), runs inside every transaction after
	// its records were acknowledged and before the commit.
	beforeCommit func()
}

// OpenWriter makes p's transactional producer and fences every older one
// (InitProducerID): see the fencing argument above.
func OpenWriter(ctx context.Context, cfg WriterConfig) (*Writer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.TransactionTimeout == 0 {
		cfg.TransactionTimeout = 10 * time.Second
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.TransactionalID(cfg.TransactionalID),
		kgo.TransactionTimeout(cfg.TransactionTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafkapartial: producer: %w", err)
	}
	w := &Writer{cfg: cfg, cl: cl}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return nil, w.classify(fmt.Errorf("init producer id %q: %w", cfg.TransactionalID, err))
	}
	return w, nil
}

// Emission is what one window's close writes, in one transaction.
type Emission struct {
	// Partial goes to the partials topic, partition 0.
	Partial *partial.Partial
	// Admitted (the window's admissions, chunked), Tombstones (keys of
	// admissions of periods that are over) and Progress go to progress
	// partition p.
	Admitted   []*partial.Admitted
	Tombstones [][]byte
	Progress   *partial.Progress
	// Snapshot, when set (Writer.SnapshotDue), is the cross-window
	// bound's state after this window, written as a checkpoint instead of
	// the window's admissions (Admitted must then be empty; snapshot.go).
	Snapshot *Snapshot
}

// Emit writes e in one transaction and returns once its commit is
// confirmed. Any error kills the Writer (ErrFenced when a newer owner
// fenced it, ErrUnusable otherwise): the caller stops and a new owner (or a
// new Writer of this process, if it still owns p) restores from Kafka.
func (w *Writer) Emit(ctx context.Context, e Emission) error {
	if e.Partial == nil || e.Progress == nil {
		return errors.New("kafkapartial: emission without partial or progress")
	}
	if e.Snapshot != nil && slices.ContainsFunc(e.Admitted, func(a *partial.Admitted) bool { return a.View == 0 }) {
		return errors.New("kafkapartial: emission with both a checkpoint and the base window's admissions records (a view's may come with it)")
	}
	return w.run(ctx, func() txnPlan { return w.planEmit(e) })
}

// Mark writes partition p's Idle record (window.watermark: event) in a
// transaction of its own: only the partition's current owner can say it is
// idle or active again.
func (w *Writer) Mark(ctx context.Context, d *partial.Idle) error {
	if d == nil || d.Partition != w.cfg.Partition {
		return errors.New("kafkapartial: idle record of another partition")
	}
	return w.transact(ctx, []*kgo.Record{{Topic: w.cfg.PartialsTopic, Partition: 0, Key: partial.IdleKey(d.Partition), Value: d.Encode()}})
}

// Start records a fresh partition's first Progress (its first window,
// offset and user-hash key) in a transaction of its own, before anything is
// counted: a worker that loses the partition before its first Emit hands
// the same first window and key to the next owner, so when the partition's
// windows begin does not depend on when it moved. Errors as Emit.
func (w *Writer) Start(ctx context.Context, pr *partial.Progress) error {
	if pr == nil {
		return errors.New("kafkapartial: start without progress")
	}
	return w.transact(ctx, []*kgo.Record{{Topic: w.cfg.ProgressTopic, Partition: int32(w.cfg.Partition), Key: []byte(partial.ProgressKey), Value: pr.Encode()}})
}

// transact writes recs in one transaction and commits it.
func (w *Writer) transact(ctx context.Context, recs []*kgo.Record) error {
	return w.run(ctx, func() txnPlan { return txnPlan{first: recs} })
}

// txnPlan is what one transaction writes.
type txnPlan struct {
	first []*kgo.Record
	// then, when set, returns the records produced once first was
	// acknowledged (their offsets are then known).
	then func() []*kgo.Record
	// committed, when set, runs once the commit is confirmed.
	committed func()
}

// run makes the plan (w.mu held, so it may read the Writer's state),
// writes it in one transaction and commits it.
func (w *Writer) run(ctx context.Context, mk func() txnPlan) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead != nil {
		return w.dead
	}
	plan := mk()
	recs := plan.first
	st := txnStart{at: time.Now()}
	if id, epoch, err := w.cl.ProducerID(ctx); err == nil {
		st.id, st.epoch, st.known = id, epoch, true
	}
	if err := w.cl.BeginTransaction(); err != nil {
		return w.fail(ctx, txnStart{}, fmt.Errorf("begin transaction: %w", err))
	}
	w.open = true
	if err := w.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return w.fail(ctx, st, fmt.Errorf("produce: %w", err))
	}
	if plan.then != nil {
		if err := w.cl.ProduceSync(ctx, plan.then()...).FirstErr(); err != nil {
			return w.fail(ctx, st, fmt.Errorf("produce: %w", err))
		}
	}
	if w.beforeCommit != nil {
		w.beforeCommit()
	}
	// No abort after a commit was attempted (ledger/kafkalog's transact
	// says why: kgo's abort would re-initialise the producer id, which the
	// embedded broker accepts, fencing a newer owner). A transaction left
	// open is aborted by the next owner's InitProducerID or its timeout.
	w.open = false
	if err := w.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return w.fail(ctx, st, fmt.Errorf("commit: %w", err))
	}
	if plan.committed != nil {
		plan.committed()
	}
	return nil
}

// fail aborts the open transaction (when no commit was attempted) and
// kills the Writer (w.mu held). The failure of the transaction started at
// st is classified (classifyTxn) before the abort, which may re-initialise
// the producer id.
func (w *Writer) fail(ctx context.Context, st txnStart, err error) error {
	classified := w.classifyTxn(ctx, st, err)
	if w.open {
		if aerr := w.abort(ctx); aerr != nil {
			classified = fmt.Errorf("%w (abort: %w)", classified, aerr)
		}
	}
	w.dead = classified
	return w.dead
}

// abort ends the open transaction with an abort (w.mu held).
func (w *Writer) abort(ctx context.Context) error {
	w.open = false
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return w.cl.EndTransaction(actx, kgo.TryAbort)
}

// classify wraps err in ErrFenced when the broker refused the producer's
// epoch, or refused a commit because the transaction is no longer the
// producer's (INVALID_TXN_STATE: a newer owner's InitProducerID aborted
// it), ErrUnusable otherwise.
func (w *Writer) classify(err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.InvalidTxnState) {
		return fmt.Errorf("%w (transactional id %q): %w", ErrFenced, w.cfg.TransactionalID, err)
	}
	return fmt.Errorf("%w: %w", ErrUnusable, err)
}

// closeAbortTimeout bounds Close's abort, so that a stop is not held by
// an unreachable coordinator (issue 22: SIGTERM within the drain timeout).
// A transaction Close could not abort is aborted by the broker at its
// transaction timeout, or by the partition's next owner, whose
// InitProducerID fences it.
const closeAbortTimeout = 2 * time.Second

// Close aborts a transaction begun and never ended (so that it does not
// hold the last stable offsets back until its timeout), within
// closeAbortTimeout, and closes the producer.
func (w *Writer) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if errors.Is(w.dead, ErrClosed) {
		return
	}
	if w.open {
		w.open = false
		ctx, cancel := context.WithTimeout(context.Background(), closeAbortTimeout)
		_ = w.cl.EndTransaction(ctx, kgo.TryAbort)
		cancel()
	}
	w.dead = ErrClosed
	w.cl.Close()
}
