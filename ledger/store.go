package ledger

import "context"

// Store is the release log as the stage uses it: what release.Releaser and
// the pipeline read and write, whichever durable medium holds it. Two
// implementations satisfy it: *Ledger (a bbolt file under state.dir, the
// single-process default) and *kafkalog.Log (a compacted Kafka topic
// written by a transactional producer, so that an instance on another
// machine restores it from Kafka alone; issue #14).
//
// Both keep the invariants of the package doc: a unit recorded is never
// recorded again (ErrAlreadyRecorded), and a period's recorded spend, its
// reservations and its admissions are those of exactly the windows
// recorded — each written in the same transaction as the window's units.
//
// # Contexts
//
// The methods that write take a context. A Kafka transaction is a network
// round trip that can hang on an unreachable broker; the context bounds it,
// and a write cut short leaves the kafkalog.Log unusable (its outcome is
// unknown: the caller reopens it, which restores from the topic, or
// exits). bbolt's transactions are local and short: *Ledger ignores the
// context. The reads serve memory (kafkalog) or a local file (bbolt) and
// take none.
//
// A write that returns an error has recorded nothing the caller may rely
// on; in particular a window whose RecordWindowAdmitted failed must not be
// published (the write-ahead order: record, publish, mark published).
type Store interface {
	// Lookup returns the recorded unit for (histogram, windowStart), if any.
	Lookup(histogram string, windowStart int64) (*Unit, bool, error)
	// RecordWindowAdmitted records the units of one window, the period's
	// RDP spend after them (empty: unchanged), their (ε, δ) charges,
	// budget, reservations and the window's admissions, all or nothing
	// (Ledger.RecordWindowAdmitted).
	RecordWindowAdmitted(ctx context.Context, units []*Unit, spentAfter Curve, adm *Admitted) error
	// MarkPublishedKeys marks the units with the given keys published.
	MarkPublishedKeys(ctx context.Context, keys [][]byte) error
	// Units calls fn for every recorded unit in (window start, histogram)
	// order until fn returns false.
	Units(fn func(*Unit) bool) error

	// Spent, ApproxSpent, PeriodLimit and Reservations restore a budget
	// period (release.LedgerStore).
	Spent(period int64) (Curve, bool, error)
	ApproxSpent(period int64) (Approx, bool, error)
	PeriodLimit(period int64) (Limit, bool, error)
	Reservations(period int64) ([]string, error)
	// ReservationUnit returns the unit that made a period's reservation
	// (its recorded charge is the reservation's), if still recorded.
	ReservationUnit(period int64, key string) (*Unit, bool, error)
	// Admissions returns, per user hash, the windows of the period the
	// user was admitted to by the cross-window bound.
	Admissions(period int64) (map[uint64]uint16, error)
	// ViewAdmissions is Admissions for the histograms whose own window is
	// windowMs long (histograms[].window; Admitted.Views).
	ViewAdmissions(period, windowMs int64) (map[uint64]uint16, error)

	// LastWindow and FirstUnitWindow are the largest and smallest recorded
	// window starts; LastWindowEnd the largest recorded window end.
	LastWindow() (int64, bool, error)
	FirstUnitWindow() (int64, bool, error)
	LastWindowEnd() (int64, bool, error)

	// Meta returns the recorded metadata; SetMeta records m unless some is
	// recorded (then it returns that one and stored = false).
	Meta() (Meta, bool, error)
	SetMeta(ctx context.Context, m Meta) (got Meta, stored bool, err error)
	// UserHashKey returns the recorded 16-byte user hash key, first
	// recording the result of gen if none is.
	UserHashKey(ctx context.Context, gen func() ([]byte, error)) ([]byte, error)
	// HistogramSince records and returns since which base window each
	// histogram key of the running config has been counted without a
	// break (Ledger.HistogramSince).
	HistogramSince(ctx context.Context, keys []string, next int64) (map[string]int64, error)
	// Prune deletes published units older than before and the state of
	// the periods that ended before it (Ledger.Prune).
	Prune(ctx context.Context, before int64) (units, periods int, err error)

	Close() error
}

var _ Store = (*Ledger)(nil)
