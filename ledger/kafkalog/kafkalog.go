package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/internal/lib/kafkatxn"
	"github.com/dpstage/stage/ledger"
)

// Errors of the log. Refusals of a record use ledger's sentinels
// (ledger.ErrAlreadyRecorded), so callers check one set of errors for both
// ledgers.
var (
	// ErrFenced: a newer owner opened the log with the same transactional
	// id. The Log refuses every later call; the process must stop acting
	// as the owner (close it and exit).
	ErrFenced = errors.New("kafkalog: fenced by a newer owner of the transactional id")
	// ErrUnusable: a transaction failed and its outcome, or the producer's
	// state, is unknown. The Log refuses every later call; open a new one
	// (it restores from the topic) if this process still owns the id.
	ErrUnusable = errors.New("kafkalog: release log unusable after a failed transaction; reopen it to restore from the topic")
	// ErrClosed: the Log was closed.
	ErrClosed = errors.New("kafkalog: release log closed")
	// ErrTopicConfig: the topic is missing or configured so that records
	// could be lost (see the package doc for the settings).
	ErrTopicConfig = errors.New("kafkalog: release log topic misconfigured")
	// ErrIncompatible: the topic holds a record this version does not
	// understand.
	ErrIncompatible = errors.New("kafkalog: incompatible record in the release log topic")
)

// Config configures a Log.
type Config struct {
	// Brokers are the seed brokers (host:port).
	Brokers []string
	// Topic is the log topic (settings: package doc).
	Topic string
	// Partition of Topic this log owns (one partition per owner).
	Partition int32
	// TransactionalID is the owner's fixed transactional id: a function of
	// Topic and Partition, the same on every instance that may own it.
	TransactionalID string
	// TransactionTimeout bounds how long a transaction of a crashed owner
	// holds the partition's last stable offset back when no new owner
	// opens (a new owner's Open aborts it at once). Zero: 10s.
	TransactionTimeout time.Duration
	// SkipTopicCheck skips the DescribeConfigs check at Open (for brokers
	// that refuse it to this principal). The settings still apply.
	SkipTopicCheck bool
	// ClientOpts are extra kgo options (TLS, SASL, logging) for every
	// client the log makes. They must not change the isolation level,
	// partitioner or transactional id.
	ClientOpts []kgo.Opt
}

func (c Config) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("kafkalog: no brokers")
	case c.Topic == "":
		return errors.New("kafkalog: no topic")
	case c.Partition < 0:
		return fmt.Errorf("kafkalog: partition %d < 0", c.Partition)
	case c.TransactionalID == "":
		return errors.New("kafkalog: no transactional id")
	case c.TransactionTimeout < 0:
		return fmt.Errorf("kafkalog: transaction timeout %v < 0", c.TransactionTimeout)
	}
	return nil
}

// Log is a release log on one partition of a compacted topic, written by
// one transactional producer. Its methods are safe for concurrent use.
type Log struct {
	cfg Config
	cl  *kgo.Client // the transactional producer

	// mu guards st and dead, and serializes transactions: at most one is
	// open on cl, and state changes are applied in commit order.
	mu   sync.Mutex
	st   *state
	dead error // non-nil: every call returns it (ErrFenced, ErrTimedOut, ErrUnusable, ErrClosed)

	// beforeCommit, when set (tests), runs inside every transaction after
	// its records were acknowledged and before the commit.
	beforeCommit func()
}

// Open fences every older producer of cfg.TransactionalID, restores the
// log's committed state from the topic and returns the Log (package doc:
// "Opening"). It fails with ErrTopicConfig when the topic is missing or
// misconfigured, ErrFenced when a newer owner opened meanwhile.
func Open(ctx context.Context, cfg Config) (*Log, error) {
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
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafkalog: producer: %w", err)
	}
	l := &Log{cfg: cfg, cl: cl, st: newState()}
	if err := l.open(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	return l, nil
}

func (l *Log) open(ctx context.Context) error {
	if !l.cfg.SkipTopicCheck {
		if err := checkTopic(ctx, l.cl, l.cfg.Topic, l.cfg.Partition); err != nil {
			return err
		}
	}
	// 1. Fence: InitProducerID bumps the epoch of the id; the coordinator
	// aborts the older producer's open transaction before answering.
	id, epoch, err := l.cl.ProducerID(ctx)
	if err != nil {
		return l.classify(fmt.Errorf("init producer id %q: %w", l.cfg.TransactionalID, err))
	}
	// 2. Barrier: committed data at our epoch, the end of the restore.
	open, err := jsonRecord(keyOpen, struct {
		ProducerID int64     `json:"producer_id"`
		Epoch      int16     `json:"epoch"`
		OpenedAt   time.Time `json:"opened_at"`
	}{id, epoch, time.Now().UTC()})
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.transact(ctx, []*kgo.Record{open}); err != nil {
		return fmt.Errorf("kafkalog: open %s/%d: %w", l.cfg.Topic, l.cfg.Partition, err)
	}
	// 3. Restore everything committed below the barrier.
	st, err := restore(ctx, l.cfg, open.Offset)
	if err != nil {
		return fmt.Errorf("kafkalog: restore %s/%d: %w", l.cfg.Topic, l.cfg.Partition, err)
	}
	l.st = st
	return nil
}

// transact writes recs in one transaction to the log's partition and
// commits it. Any error leaves the Log dead (l.mu held).
func (l *Log) transact(ctx context.Context, recs []*kgo.Record) error {
	for _, r := range recs {
		r.Topic, r.Partition = l.cfg.Topic, l.cfg.Partition
	}
	st := txnStart{at: time.Now()}
	if id, epoch, err := l.cl.ProducerID(ctx); err == nil {
		st.id, st.epoch, st.known = id, epoch, true
	}
	if err := l.cl.BeginTransaction(); err != nil {
		return l.fail(ctx, txnStart{}, fmt.Errorf("begin transaction: %w", err), false)
	}
	if err := l.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return l.fail(ctx, st, fmt.Errorf("produce: %w", err), true)
	}
	if l.beforeCommit != nil {
		l.beforeCommit()
	}
	if err := l.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		// No abort after a commit was attempted: its outcome may be
		// unknown, and kgo's abort would then re-initialise the producer
		// id at the old epoch (KIP-360), which the embedded broker accepts
		// and so fences a newer owner that opened meanwhile (review of
		// issue #14). The transaction, if still open, is aborted by the
		// next owner's InitProducerID or by the transaction timeout.
		return l.fail(ctx, st, fmt.Errorf("commit: %w", err), false)
	}
	return nil
}

// fail tries to abort the open transaction (inTxn), so that a crashed-looking
// owner does not hold the last stable offset back, and kills the Log: its
// memory may no longer match the committed log. The failure of the
// transaction started at st is classified (classifyTxn) before the abort,
// which may re-initialise the producer id. l.mu held.
func (l *Log) fail(ctx context.Context, st txnStart, err error, inTxn bool) error {
	classified := l.classifyTxn(ctx, st, err)
	if inTxn {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		aerr := l.cl.EndTransaction(actx, kgo.TryAbort)
		cancel()
		if aerr != nil {
			classified = fmt.Errorf("%w (abort: %w)", classified, aerr)
		}
	}
	l.dead = classified
	return l.dead
}

// classify wraps err in ErrFenced when the broker refused the producer's
// epoch, ErrUnusable otherwise.
func (l *Log) classify(err error) error {
	if kafkatxn.EpochRefused(err) {
		return fmt.Errorf("%w (transactional id %q): %w", ErrFenced, l.cfg.TransactionalID, err)
	}
	return fmt.Errorf("%w: %w", ErrUnusable, err)
}

// Close closes the Log's client. Every transaction of the Log ended before
// its call returned, except one whose commit failed (transact): that one
// the next owner's InitProducerID or the transaction timeout aborts.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if errors.Is(l.dead, ErrClosed) {
		return nil
	}
	l.dead = ErrClosed
	l.cl.Close()
	return nil
}

// commit writes recs in one transaction and, once committed, applies them
// to the state (l.mu held).
func (l *Log) commit(ctx context.Context, recs []*kgo.Record) error {
	if err := l.transact(ctx, recs); err != nil {
		return err
	}
	for _, r := range recs {
		if err := l.st.apply(r); err != nil {
			// Committed but not applied: memory no longer matches.
			l.dead = fmt.Errorf("%w: apply committed record: %w", ErrUnusable, err)
			return l.dead
		}
	}
	return nil
}

var _ ledger.Store = (*Log)(nil)
