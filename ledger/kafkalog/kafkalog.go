package kafkalog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/budget"
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

// restore folds the records of cfg's partition below offset until, read
// read_committed from the start, into a new state.
func restore(ctx context.Context, cfg Config, until int64) (*state, error) {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: {cfg.Partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	defer cl.Close()
	st := newState()
	last := int64(-1)
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read to offset %d, reached %d: %w", until, last, err)
		}
		if err := fs.Err(); err != nil {
			return nil, fmt.Errorf("fetch: %w", err)
		}
		var done bool
		var aerr error
		fs.EachRecord(func(r *kgo.Record) {
			if done || aerr != nil {
				return
			}
			if r.Offset >= until {
				done = true // our barrier, or a newer owner's
				return
			}
			last = r.Offset
			aerr = st.apply(r)
		})
		if aerr != nil {
			return nil, aerr
		}
		if done {
			return st, st.checkParts()
		}
	}
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
	if epochRefused(err) {
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

// Lookup returns the recorded unit for (histogram, windowStart), if any.
func (l *Log) Lookup(histogram string, windowStart int64) (*ledger.Unit, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return nil, false, l.dead
	}
	u, ok, err := l.st.unit(string(ledger.UnitKey(histogram, windowStart)))
	if err != nil {
		return nil, false, fmt.Errorf("kafkalog: lookup %s@%d: %w", histogram, windowStart, err)
	}
	return u, ok, nil
}

// RecordWindow records the units of one window — every histogram's — in one
// Kafka transaction, with ledger.Ledger.RecordWindow's meaning: either all
// of them are recorded or none is; a unit already recorded refuses the whole
// window (ledger.ErrAlreadyRecorded); for released units the period's budget
// is kept if none is recorded yet, (ε, δ) charges are added to the period's
// approx spend, and the period's RDP spend becomes spentAfter (when not
// empty). All units must be of the same window and period.
func (l *Log) RecordWindow(ctx context.Context, units []*ledger.Unit, spentAfter ledger.Curve) error {
	return l.RecordWindowAdmitted(ctx, units, spentAfter, nil)
}

// RecordWindowAdmitted is RecordWindow that also records, in the same
// transaction, the users admitted to the window by the cross-window bound
// (adm; nil without one), as ledger.Ledger.RecordWindowAdmitted does: each
// one's count of admitted windows in adm.Period grows by one, and the
// admissions of earlier periods are deleted (tombstoned). The period
// reservations the units make (ledger.Unit.Reservation) and the largest
// window end recorded (LastWindowEnd) are written in the same transaction.
func (l *Log) RecordWindowAdmitted(ctx context.Context, units []*ledger.Unit, spentAfter ledger.Curve, adm *ledger.Admitted) error {
	if len(units) == 0 {
		return nil
	}
	w, p := units[0].WindowStart, units[0].Period
	if adm != nil && adm.Period != p {
		return fmt.Errorf("kafkalog: record window: admissions of period %d with units of period %d", adm.Period, p)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return l.dead
	}
	recs, err := l.windowRecords(units, spentAfter, adm)
	if err != nil {
		return fmt.Errorf("kafkalog: record %s@%d: %w", units[0].Histogram, w, err)
	}
	if err := l.commit(ctx, recs); err != nil {
		return fmt.Errorf("kafkalog: record window %d (period %d): %w", w, p, err)
	}
	return nil
}

// windowRecords are the records of RecordWindow(units, spentAfter) on the
// current state (l.mu held).
func (l *Log) windowRecords(units []*ledger.Unit, spentAfter ledger.Curve, adm *ledger.Admitted) ([]*kgo.Record, error) {
	end, p := units[0].WindowEnd, units[0].Period
	seen := map[string]bool{}
	var recs []*kgo.Record
	for _, u := range units {
		// One boundary: every unit ends there (a histogram's own, longer
		// window starts earlier), in one period.
		if u.WindowEnd != end || u.Period != p {
			return nil, fmt.Errorf("units of windows ending at %d and %d in one record", end, u.WindowEnd)
		}
		k := string(u.Key())
		if _, ok := l.st.units[k]; ok || seen[k] {
			return nil, fmt.Errorf("%s: %w", u.Histogram, ledger.ErrAlreadyRecorded)
		}
		seen[k] = true
		rs, err := unitRecords(u)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rs...)
	}
	if l.st.lastEnd == nil || *l.st.lastEnd < end {
		recs = append(recs, newRecord(keyLastEnd, []byte(strconv.FormatInt(end, 10))))
	}
	ar, err := l.admitRecords(end, adm)
	if err != nil {
		return nil, err
	}
	recs = append(recs, ar...)
	released := false
	limit, limitOK := l.st.limits[p]
	limitChanged := false
	approx := l.st.approx[p]
	resv := map[string]bool{}
	addedApprox := false
	for _, u := range units {
		if next, changed := ledger.LowerLimit(limit, limitOK, u); changed {
			limit, limitOK, limitChanged = next, true, true
		}
		if u.Status != ledger.StatusReleased {
			continue
		}
		released = true
		if u.Reservation != "" {
			if _, ok := l.st.reservations[p][u.Reservation]; ok || resv[u.Reservation] {
				return nil, fmt.Errorf("%s: period reservation %q is already recorded", u.Histogram, u.Reservation)
			}
			resv[u.Reservation] = true
			recs = append(recs, newRecord(reservationRecordKey(p, u.Reservation), u.Key()))
		}
		if u.Approx != nil {
			approx.Epsilon = budget.AddUp(approx.Epsilon, u.Approx.Epsilon)
			approx.Delta = budget.AddUp(approx.Delta, u.Approx.Delta)
			approx.Releases += max(u.Approx.Releases, 1)
			addedApprox = true
		}
	}
	if limitChanged {
		r, err := jsonRecord(periodRecordKey(prefixLimit, p), &limit)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	if addedApprox {
		r, err := jsonRecord(periodRecordKey(prefixApprox, p), approx)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	if released && len(spentAfter.Orders) > 0 {
		r, err := jsonRecord(periodRecordKey(prefixSpend, p), spentAfter)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// admitRecords are the admissions records of a window ending at end
// (RecordWindowAdmitted; l.mu held): tombstones for the admissions of the
// periods before adm.Period, then the admitted users in chunks.
func (l *Log) admitRecords(end int64, adm *ledger.Admitted) ([]*kgo.Record, error) {
	if adm == nil {
		return nil, nil
	}
	var recs []*kgo.Record
	for _, p := range sortedKeys(l.st.admitKeys) {
		if p < adm.Period {
			recs = append(recs, tombstones(l.st.admitKeys[p])...)
		}
	}
	users := slices.Clone(adm.Users)
	slices.Sort(users)
	for i := 1; i < len(users); i++ {
		if users[i] == users[i-1] {
			return nil, fmt.Errorf("user %x admitted twice to one window", users[i])
		}
	}
	counts := l.st.admitted[adm.Period]
	for _, u := range users {
		if counts[u] == math.MaxUint16 {
			return nil, fmt.Errorf("user %x admitted to more than %d windows", u, math.MaxUint16)
		}
	}
	for c := 0; c*admitChunk < len(users); c++ {
		part := users[c*admitChunk : min((c+1)*admitChunk, len(users))]
		v := make([]byte, 8*len(part))
		for i, u := range part {
			binary.BigEndian.PutUint64(v[8*i:], u)
		}
		k := admitRecordKey(adm.Period, end, c)
		if l.st.admitKeys[adm.Period][k] {
			return nil, fmt.Errorf("admissions of the window ending at %d are already recorded", end)
		}
		recs = append(recs, newRecord(k, v))
	}
	return recs, nil
}

// tombstones are null-valued records for the keys of ks, in key order.
func tombstones(ks map[string]bool) []*kgo.Record {
	keys := make([]string, 0, len(ks))
	for k := range ks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		recs[i] = newRecord(k, nil)
	}
	return recs
}

func sortedKeys[V any](m map[int64]V) []int64 {
	ks := keysOf(m)
	slices.Sort(ks)
	return ks
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

// MarkPublished records, in one transaction, that every message of the
// unit was acknowledged.
func (l *Log) MarkPublished(ctx context.Context, histogram string, windowStart int64) error {
	return l.MarkPublishedKeys(ctx, [][]byte{ledger.UnitKey(histogram, windowStart)})
}

// MarkPublishedKeys marks the units with the given keys (ledger.Unit.Key)
// published, in one transaction. Units already published are left alone.
func (l *Log) MarkPublishedKeys(ctx context.Context, keys [][]byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return l.dead
	}
	var recs []*kgo.Record
	for _, k := range keys {
		u, ok, err := l.st.unit(string(k))
		if err != nil {
			return fmt.Errorf("kafkalog: mark published: %w", err)
		}
		if !ok {
			return fmt.Errorf("kafkalog: mark published: no unit recorded under %x", k)
		}
		if u.Published {
			continue
		}
		rs, err := l.st.publishedRecords(string(k))
		if err != nil {
			return fmt.Errorf("kafkalog: mark published: %w", err)
		}
		recs = append(recs, rs...)
	}
	if len(recs) == 0 {
		return nil
	}
	if err := l.commit(ctx, recs); err != nil {
		return fmt.Errorf("kafkalog: mark %d units published: %w", len(recs), err)
	}
	return nil
}

// Spent returns the recorded RDP spend of the period starting at period
// (Unix ms), and whether any was recorded.
func (l *Log) Spent(period int64) (ledger.Curve, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return ledger.Curve{}, false, l.dead
	}
	c, ok := l.st.spent[period]
	if !ok {
		return ledger.Curve{}, false, nil
	}
	return ledger.Curve{Orders: append([]float64(nil), c.Orders...), Epsilons: append([]float64(nil), c.Epsilons...)}, true, nil
}

// ApproxSpent returns the basic composition of the (ε, δ) charges recorded
// in the period starting at period (Unix ms), and whether any was recorded.
func (l *Log) ApproxSpent(period int64) (ledger.Approx, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return ledger.Approx{}, false, l.dead
	}
	a, ok := l.st.approx[period]
	return a, ok, nil
}

// PeriodLimit returns the budget recorded with the first released unit of
// the period starting at period (Unix ms), lowered by any later unit
// recorded under a lower one (ledger.LowerLimit), and whether one was
// recorded.
func (l *Log) PeriodLimit(period int64) (ledger.Limit, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return ledger.Limit{}, false, l.dead
	}
	lim, ok := l.st.limits[period]
	return lim, ok, nil
}

// LastWindow returns the largest recorded window start, if any unit exists.
func (l *Log) LastWindow() (int64, bool, error) {
	return l.extremeWindow(func(a, b int64) bool { return a > b })
}

// FirstUnitWindow returns the smallest recorded window start, if any unit
// exists.
func (l *Log) FirstUnitWindow() (int64, bool, error) {
	return l.extremeWindow(func(a, b int64) bool { return a < b })
}

func (l *Log) extremeWindow(better func(a, b int64) bool) (int64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return 0, false, l.dead
	}
	var best int64
	ok := false
	for k := range l.st.units {
		if w := windowOf(k); !ok || better(w, best) {
			best, ok = w, true
		}
	}
	return best, ok, nil
}

// Units calls fn for every recorded unit in (window start, histogram) order
// until fn returns false. It iterates over a snapshot: fn may call the Log.
func (l *Log) Units(fn func(*ledger.Unit) bool) error {
	l.mu.Lock()
	if l.dead != nil {
		l.mu.Unlock()
		return l.dead
	}
	keys := l.st.sortedUnitKeys()
	vals := make([][]byte, len(keys))
	parts := make([]map[int][]byte, len(keys))
	for i, k := range keys {
		// The values are never changed in place (apply stores clones);
		// a split unit's part map is, so it is copied.
		vals[i], parts[i] = l.st.units[k], maps.Clone(l.st.parts[k])
	}
	l.mu.Unlock()
	for i, v := range vals {
		u, err := decodeUnit(v, parts[i])
		if err != nil {
			return fmt.Errorf("kafkalog: decode unit %x: %w", keys[i], err)
		}
		if !fn(u) {
			return nil
		}
	}
	return nil
}

// Meta returns the recorded metadata, if any.
func (l *Log) Meta() (ledger.Meta, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return ledger.Meta{}, false, l.dead
	}
	if l.st.meta == nil {
		return ledger.Meta{}, false, nil
	}
	return *l.st.meta, true, nil
}

// SetMeta records m (in a transaction) unless metadata is already recorded;
// then it returns the recorded one and stored = false.
func (l *Log) SetMeta(ctx context.Context, m ledger.Meta) (ledger.Meta, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return ledger.Meta{}, false, l.dead
	}
	if l.st.meta != nil {
		return *l.st.meta, false, nil
	}
	r, err := jsonRecord(keyMeta, m)
	if err != nil {
		return ledger.Meta{}, false, err
	}
	if err := l.commit(ctx, []*kgo.Record{r}); err != nil {
		return ledger.Meta{}, false, fmt.Errorf("kafkalog: record metadata: %w", err)
	}
	return m, true, nil
}

// Prune deletes (tombstones, in one transaction) the published units whose
// window starts before `before` (Unix ms), and the spend, approx spend and
// budget of periods that ended before it, as ledger.Ledger.Prune does: never
// an unpublished unit, never a unit of the last recorded window. It returns
// how many units and RDP period spends it deleted.
func (l *Log) Prune(ctx context.Context, before int64) (units, periods int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return 0, 0, l.dead
	}
	last, haveLast := int64(math.MinInt64), false
	for k := range l.st.units {
		if w := windowOf(k); !haveLast || w > last {
			last, haveLast = w, true
		}
	}
	if haveLast && before > last {
		before = last
	}
	var recs []*kgo.Record
	for _, k := range l.st.sortedUnitKeys() {
		if windowOf(k) >= before {
			break
		}
		u, _, err := l.st.unit(k)
		if err != nil {
			return 0, 0, fmt.Errorf("kafkalog: prune: %w", err)
		}
		if u.Published {
			recs = append(recs, l.st.unitTombstones(u)...)
			units++
		}
	}
	if m := l.st.meta; m != nil && m.PeriodMs > 0 {
		ended := func(p int64) bool { return p+m.PeriodMs <= before }
		for _, pp := range []struct {
			prefix string
			keys   []int64
		}{
			{prefixSpend, keysOf(l.st.spent)},
			{prefixApprox, keysOf(l.st.approx)},
			{prefixLimit, keysOf(l.st.limits)},
		} {
			slices.Sort(pp.keys)
			for _, p := range pp.keys {
				if ended(p) {
					recs = append(recs, newRecord(periodRecordKey(pp.prefix, p), nil))
					if pp.prefix == prefixSpend {
						periods++
					}
				}
			}
		}
	}
	if m := l.st.meta; m != nil && m.PeriodMs > 0 {
		for _, p := range sortedKeys(l.st.reservations) {
			if p+m.PeriodMs <= before {
				ks := make(map[string]bool, len(l.st.reservations[p]))
				for rk := range l.st.reservations[p] {
					ks[reservationRecordKey(p, rk)] = true
				}
				recs = append(recs, tombstones(ks)...)
			}
		}
		for _, p := range sortedKeys(l.st.admitKeys) {
			if p+m.PeriodMs <= before {
				recs = append(recs, tombstones(l.st.admitKeys[p])...)
			}
		}
	}
	if len(recs) == 0 {
		return 0, 0, nil
	}
	if err := l.commit(ctx, recs); err != nil {
		return 0, 0, fmt.Errorf("kafkalog: prune before %d: %w", before, err)
	}
	return units, periods, nil
}

func keysOf[V any](m map[int64]V) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// Reservations returns the keys of the period reservations recorded in the
// period starting at period (Unix ms), in key order.
func (l *Log) Reservations(period int64) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return nil, l.dead
	}
	var keys []string
	for k := range l.st.reservations[period] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// Admissions returns, per user, the number of recorded windows of the
// period starting at period (Unix ms) the user was admitted to (see
// RecordWindowAdmitted).
func (l *Log) Admissions(period int64) (map[uint64]uint16, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return nil, l.dead
	}
	out := make(map[uint64]uint16, len(l.st.admitted[period]))
	for u, n := range l.st.admitted[period] {
		out[u] = n
	}
	return out, nil
}

// LastWindowEnd returns the largest window end (Unix ms) recorded, if any.
func (l *Log) LastWindowEnd() (int64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return 0, false, l.dead
	}
	if l.st.lastEnd == nil {
		return 0, false, nil
	}
	return *l.st.lastEnd, true, nil
}

// UserHashKey returns the 16-byte user hash key recorded in the log, first
// recording (in a transaction of its own) the result of gen if none is.
// The key is a secret: whoever reads the topic can predict which events
// count (package doc, "Topic settings": ACLs).
func (l *Log) UserHashKey(ctx context.Context, gen func() ([]byte, error)) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return nil, l.dead
	}
	if l.st.userKey != nil {
		return bytes.Clone(l.st.userKey), nil
	}
	k, err := gen()
	if err != nil {
		return nil, fmt.Errorf("kafkalog: user hash key: %w", err)
	}
	if len(k) != 16 {
		return nil, fmt.Errorf("kafkalog: user hash key has %d bytes, want 16", len(k))
	}
	if err := l.commit(ctx, []*kgo.Record{newRecord(keyUserHash, bytes.Clone(k))}); err != nil {
		return nil, fmt.Errorf("kafkalog: record user hash key: %w", err)
	}
	return bytes.Clone(k), nil
}

// HistogramSince is ledger.Ledger.HistogramSince, the map written in one
// transaction.
func (l *Log) HistogramSince(ctx context.Context, keys []string, next int64) (map[string]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return nil, l.dead
	}
	out := ledger.NextSince(l.st.since, keys, next, len(l.st.units) == 0)
	r, err := jsonRecord(keyHistogramSince, out)
	if err != nil {
		return nil, fmt.Errorf("kafkalog: histogram since: %w", err)
	}
	if err := l.commit(ctx, []*kgo.Record{r}); err != nil {
		return nil, fmt.Errorf("kafkalog: record histogram since: %w", err)
	}
	return out, nil
}

var _ ledger.Store = (*Log)(nil)
