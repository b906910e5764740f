// Package ledger is the stage's durable memory: which releases were made,
// with which values, and how much privacy budget each period has spent. It
// is what lets the stage keep its two promises across crashes and restarts:
//
//   - a window is released at most once: the released values are recorded
//     before they are published, and after a restart a recorded release is
//     published again with the same values, never with fresh noise;
//   - privacy spent is never forgotten: the charge of a release is written in
//     the same transaction as its record, so the budget restored at start-up
//     is exactly the sum of the recorded releases' charges.
//
// The unit of recording is a [Unit]: everything one histogram releases for one
// window (one message per declared group, or one status message when the
// budget refused the release). The ledger is a bbolt database file under the
// configured state directory.
//
// Invariant: a unit recorded is never recorded again (ErrAlreadyRecorded);
// a period's recorded spend is the composition of its units' charges.
//
// # Why the RDP spend is stored absolute and the (ε, δ) spend as sums
//
// The (ε, δ) charges of a period are added in the record's transaction
// (ApproxSpent: plain sums, order-free). The RDP spend is stored as the
// period's whole curve after the window (RecordWindow's spentAfter), not
// added here from the units' Charge curves, although each unit carries its
// charge: the curve is composed by the budget book (budget.Book.After),
// which adds order by order with upward rounding (budget.AddUp) on its grid
// of orders and aligns a charge made on another grid (an order changed
// between two windows of a period). Adding in the ledger would repeat that
// arithmetic in a second place that must agree with the book bit for bit
// (the stage checks it: "budget book disagrees with ledger"), for no gain in
// crash safety — the absolute curve is written in the same transaction as
// the units, so it is always the spend of exactly the units recorded, and
// every unit's own Charge stays in the log for audits (the crash test sums
// them and compares). Old state directories keep opening: the schema is
// unchanged.
package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Errors returned when opening the ledger.
var (
	// ErrLocked: another process holds the state database. Stop the other
	// stage instance or point state.dir elsewhere.
	ErrLocked = errors.New("ledger: state database is locked by another process")
	// ErrIncompatible: the database was written by an incompatible version.
	ErrIncompatible = errors.New("ledger: state database has an incompatible schema")
)

// Errors returned by recording.
var (
	// ErrAlreadyRecorded: a unit with the same key exists; the caller must
	// republish the recorded unit instead of drawing again.
	ErrAlreadyRecorded = errors.New("ledger: unit already recorded")
)

const schemaVersion = 1

var (
	bucketMeta    = []byte("meta")
	bucketUnits   = []byte("units")
	bucketPeriods = []byte("periods")
	bucketApprox  = []byte("approx")
	bucketLimits  = []byte("limits")
	// bucketReservations holds the period reservations made: key period
	// key (8 bytes) + reservation key, value the unit key that made it.
	// Pruned with the period (not with the units): a period's later units
	// stay covered after the unit that made the reservation is pruned.
	bucketReservations = []byte("reservations")
	keySchema          = []byte("schema")
)

// Status says what a unit recorded.
type Status string

const (
	// StatusReleased: the unit holds private releases.
	StatusReleased Status = "released"
	// StatusBudgetExhausted: the budget refused the release; the unit holds
	// the status message that says so, and charged nothing.
	StatusBudgetExhausted Status = "budget_exhausted"
)

// Curve is an RDP curve on a grid of orders: Epsilons[i] is the RDP ε at
// Orders[i]. +Inf is stored as JSON null.
type Curve struct {
	Orders   []float64 `json:"orders"`
	Epsilons []float64 `json:"-"`
}

type curveJSON struct {
	Orders   []float64  `json:"orders"`
	Epsilons []*float64 `json:"epsilons"`
}

// MarshalJSON stores +Inf as null, which JSON cannot otherwise carry.
func (c Curve) MarshalJSON() ([]byte, error) {
	out := curveJSON{Orders: c.Orders, Epsilons: make([]*float64, len(c.Epsilons))}
	for i, e := range c.Epsilons {
		if !math.IsInf(e, 1) {
			v := e
			out.Epsilons[i] = &v
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads null as +Inf.
func (c *Curve) UnmarshalJSON(b []byte) error {
	var in curveJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	if len(in.Orders) != len(in.Epsilons) {
		return fmt.Errorf("ledger: curve has %d orders but %d epsilons", len(in.Orders), len(in.Epsilons))
	}
	c.Orders = in.Orders
	c.Epsilons = make([]float64, len(in.Epsilons))
	for i, e := range in.Epsilons {
		if e == nil {
			c.Epsilons[i] = math.Inf(1)
		} else {
			c.Epsilons[i] = *e
		}
	}
	return nil
}

// Unit is what one histogram releases for one window.
type Unit struct {
	Histogram   string `json:"histogram"`
	WindowStart int64  `json:"window_start_ms"`
	WindowEnd   int64  `json:"window_end_ms"`
	// Period is the start (Unix ms) of the budget period charged.
	Period int64  `json:"period_ms"`
	Status Status `json:"status"`
	// Charge is the RDP curve added to the period's spend by this unit
	// (empty for StatusBudgetExhausted).
	Charge Curve `json:"charge"`
	// Approx is the (ε, δ)-DP charge of a unit released by a mechanism
	// without an RDP curve (an average histogram's simplex Dirichlet
	// release); nil otherwise. Record adds it to the period's ApproxSpend.
	Approx *Approx `json:"approx,omitempty"`
	// Reservation is the key of the period reservation this unit charged
	// (contribution.max_windows_per_user: its Charge or Approx is the
	// reservation's, covering the histogram's later units of the period);
	// RecordWindow records it in the period's reservations. Empty otherwise.
	Reservation string `json:"reservation,omitempty"`
	// CoveredBy is the key of the period reservation that covers this
	// released unit, which charged nothing itself (empty Charge, nil
	// Approx); empty otherwise.
	CoveredBy string `json:"covered_by,omitempty"`
	// Limit is the period budget (ε, δ) in force when the unit was
	// recorded. Record keeps the first released unit's for each period,
	// lowered by any later unit's that is lower (PeriodLimit, LowerLimit): a
	// budget raised in the middle of a period — also back after a cut —
	// takes effect from the next period only.
	Limit *Limit `json:"limit,omitempty"`
	// Messages are the exact output messages, in publish order.
	Messages []Message `json:"messages"`
	// Published is set once every message was acknowledged by the output
	// topic.
	Published bool `json:"published"`
	// RecordedAt is wall-clock time of recording, for operators.
	RecordedAt time.Time `json:"recorded_at"`
}

// Approx is an (ε, δ)-DP charge, or a period's basic composition of such
// charges (the ε's add and the δ's add).
type Approx struct {
	Epsilon  float64 `json:"epsilon"`
	Delta    float64 `json:"delta"`
	Releases int     `json:"releases"`
}

// LowerLimit is a period's recorded budget rec (ok: one is recorded) after
// recording u: a released unit records its budget (u.Limit) when none is
// recorded yet; any unit — released or budget_exhausted — whose budget is
// below the recorded one in ε or δ lowers it to the lower of each (the
// neighbour relation stays the first one recorded). It returns the new
// budget and whether it changed. So the budget a period is held to never
// rises within the period: a cut recorded once stays in force until the
// period ends, even when the budget is raised back (budget.Book takes the
// lower of the recorded budget and its own).
func LowerLimit(rec Limit, ok bool, u *Unit) (Limit, bool) {
	if u.Limit == nil {
		return rec, false
	}
	if !ok {
		if u.Status != StatusReleased {
			return rec, false // nothing spent under it: a raise before the first release applies
		}
		return *u.Limit, true
	}
	out := rec
	out.Epsilon = math.Min(rec.Epsilon, u.Limit.Epsilon)
	out.Delta = math.Min(rec.Delta, u.Limit.Delta)
	return out, out.Epsilon != rec.Epsilon || out.Delta != rec.Delta
}

// Limit is a period's (ε, δ) budget.
type Limit struct {
	Epsilon float64 `json:"epsilon"`
	Delta   float64 `json:"delta"`
	// Neighbour is the privacy.neighbour relation the period's first charge
	// was calibrated under ("" in ledgers written before it was recorded).
	// The stage refuses to charge the period under a weaker relation
	// (add_remove after replace: pipeline.ErrConfigChanged).
	Neighbour string `json:"neighbour,omitempty"`
}

// Message is one output record.
type Message struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
}

// Key identifies a unit: histogram name and window start.
func (u *Unit) Key() []byte { return UnitKey(u.Histogram, u.WindowStart) }

// UnitKey orders units by window start, then histogram.
func UnitKey(histogram string, windowStart int64) []byte {
	k := make([]byte, 8, 8+len(histogram))
	binary.BigEndian.PutUint64(k, uint64(windowStart)^(1<<63)) // sign flip keeps negative times ordered
	return append(k, histogram...)
}

// Ledger is the durable state. Its methods are safe for concurrent use
// (bbolt serializes writers).
type Ledger struct {
	db *bolt.DB
}

// Open opens (creating if needed) the ledger in dir.
func Open(dir string) (*Ledger, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("ledger: create state dir %q: %w", dir, err)
	}
	path := filepath.Join(dir, "stage.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("ledger: open %q: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketUnits, bucketPeriods, bucketApprox, bucketLimits, bucketReservations} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		v := meta.Get(keySchema)
		if v == nil {
			return meta.Put(keySchema, []byte{schemaVersion})
		}
		if len(v) != 1 || v[0] != schemaVersion {
			return ErrIncompatible
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("ledger: initialise %q: %w", path, err)
	}
	return &Ledger{db: db}, nil
}

// Close closes the database.
func (l *Ledger) Close() error { return l.db.Close() }

// Lookup returns the recorded unit for (histogram, windowStart), if any.
func (l *Ledger) Lookup(histogram string, windowStart int64) (*Unit, bool, error) {
	var u *Unit
	err := l.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketUnits).Get(UnitKey(histogram, windowStart))
		if v == nil {
			return nil
		}
		u = new(Unit)
		return json.Unmarshal(v, u)
	})
	if err != nil {
		return nil, false, fmt.Errorf("ledger: lookup %s@%d: %w", histogram, windowStart, err)
	}
	return u, u != nil, nil
}

// Record durably stores u and, in the same transaction, for a released
// unit: sets the RDP spend of u.Period to spentAfter (the period's spend
// including u.Charge) when spentAfter is not empty, adds an Approx charge to
// the period's ApproxSpent, and keeps u.Limit as the period's budget if none
// is recorded yet; any unit with a lower budget lowers it (LowerLimit). The caller has checked the spend against the budget.
// Record refuses a unit whose key is already recorded (ErrAlreadyRecorded):
// a window is released at most once.
func (l *Ledger) Record(u *Unit, spentAfter Curve) error {
	return l.RecordWindow([]*Unit{u}, spentAfter)
}

// RecordWindow records the units of one window — every histogram's — in one
// transaction, as Record does for one: either all of them are recorded or
// none is. spentAfter is the RDP spend of their period after all of them
// (empty: unchanged). All units must end at the same time, in the same
// period: one base window's units, with the units of longer histogram
// windows (histograms[].window) that end with it. The largest end recorded
// is kept (LastWindowEnd).
//
// Why one transaction: a window recorded in part (a crash between two
// histograms' records) would have to be closed again from whatever events
// are still uncommitted, and which those are depends on where other users'
// later events sit in the partitions; a histogram added by a config change
// would likewise be released for an already-recorded window from partial
// data. With whole windows, a window is either recorded for every histogram
// of the config in force or not at all.
func (l *Ledger) RecordWindow(units []*Unit, spentAfter Curve) error {
	return l.RecordWindowAdmitted(context.Background(), units, spentAfter, nil)
}

// RecordWindowAdmitted is RecordWindow that also records, in the same
// transaction, the users admitted to the window by the cross-window bound
// (adm; nil without one): each one's count of admitted windows in
// adm.Period grows by one, and the admissions of earlier periods are
// deleted (their windows are all closed). A window whose units are recorded
// has its admissions recorded, and one whose units are not (a crash before
// the commit) has none: after a restart the window is computed again from
// its events, with the same admissions.
func (l *Ledger) RecordWindowAdmitted(_ context.Context, units []*Unit, spentAfter Curve, adm *Admitted) error {
	if len(units) == 0 {
		return nil
	}
	if adm != nil && adm.Period != units[0].Period {
		return fmt.Errorf("ledger: record window: admissions of period %d with units of period %d", adm.Period, units[0].Period)
	}
	vals := make([][]byte, len(units))
	for i, u := range units {
		if u.WindowEnd != units[0].WindowEnd || u.Period != units[0].Period {
			return fmt.Errorf("ledger: record window: units of windows ending at %d and %d in one record", units[0].WindowEnd, u.WindowEnd)
		}
		v, err := json.Marshal(u)
		if err != nil {
			return fmt.Errorf("ledger: encode unit: %w", err)
		}
		vals[i] = v
	}
	spent, err := json.Marshal(spentAfter)
	if err != nil {
		return fmt.Errorf("ledger: encode spend: %w", err)
	}
	err = l.db.Update(func(tx *bolt.Tx) error {
		ub := tx.Bucket(bucketUnits)
		for _, u := range units {
			if ub.Get(u.Key()) != nil {
				return fmt.Errorf("%s: %w", u.Histogram, ErrAlreadyRecorded)
			}
		}
		if err := putLastEnd(tx, units[0].WindowEnd); err != nil {
			return err
		}
		if err := putAdmitted(tx, adm); err != nil {
			return err
		}
		released := false
		lb := tx.Bucket(bucketLimits)
		var limit Limit
		limitOK, limitChanged := false, false
		if v := lb.Get(periodKey(units[0].Period)); v != nil {
			if err := json.Unmarshal(v, &limit); err != nil {
				return fmt.Errorf("decode budget of period %d: %w", units[0].Period, err)
			}
			limitOK = true
		}
		for i, u := range units {
			if err := ub.Put(u.Key(), vals[i]); err != nil {
				return err
			}
			if next, changed := LowerLimit(limit, limitOK, u); changed {
				limit, limitOK, limitChanged = next, true, true
			}
			if u.Status != StatusReleased {
				continue
			}
			released = true
			if u.Approx != nil {
				if err := addApprox(tx.Bucket(bucketApprox), u.Period, *u.Approx); err != nil {
					return err
				}
			}
			if u.Reservation != "" {
				if err := putReservation(tx.Bucket(bucketReservations), u); err != nil {
					return err
				}
			}
		}
		if limitChanged {
			v, err := json.Marshal(&limit)
			if err != nil {
				return err
			}
			if err := lb.Put(periodKey(units[0].Period), v); err != nil {
				return err
			}
		}
		if released && len(spentAfter.Orders) > 0 {
			return tx.Bucket(bucketPeriods).Put(periodKey(units[0].Period), spent)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ledger: record %s@%d: %w", units[0].Histogram, units[0].WindowStart, err)
	}
	return nil
}

// MarkPublished records that every message of the unit was acknowledged.
func (l *Ledger) MarkPublished(histogram string, windowStart int64) error {
	err := l.db.Update(func(tx *bolt.Tx) error {
		units := tx.Bucket(bucketUnits)
		key := UnitKey(histogram, windowStart)
		v := units.Get(key)
		if v == nil {
			return fmt.Errorf("no unit recorded")
		}
		var u Unit
		if err := json.Unmarshal(v, &u); err != nil {
			return err
		}
		if u.Published {
			return nil
		}
		u.Published = true
		nv, err := json.Marshal(&u)
		if err != nil {
			return err
		}
		return units.Put(key, nv)
	})
	if err != nil {
		return fmt.Errorf("ledger: mark %s@%d published: %w", histogram, windowStart, err)
	}
	return nil
}

// Spent returns the recorded spend of the period starting at period (Unix
// ms), and whether any was recorded.
func (l *Ledger) Spent(period int64) (Curve, bool, error) {
	var c Curve
	var ok bool
	err := l.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketPeriods).Get(periodKey(period))
		if v == nil {
			return nil
		}
		ok = true
		return json.Unmarshal(v, &c)
	})
	if err != nil {
		return Curve{}, false, fmt.Errorf("ledger: read spend of period %d: %w", period, err)
	}
	return c, ok, nil
}

// addApprox adds c to the approximate-DP spend of period p (in tx).
func addApprox(b *bolt.Bucket, p int64, c Approx) error {
	var cur Approx
	if v := b.Get(periodKey(p)); v != nil {
		if err := json.Unmarshal(v, &cur); err != nil {
			return fmt.Errorf("decode approx spend: %w", err)
		}
	}
	cur.Epsilon = addUp(cur.Epsilon, c.Epsilon)
	cur.Delta = addUp(cur.Delta, c.Delta)
	cur.Releases += max(c.Releases, 1)
	v, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	return b.Put(periodKey(p), v)
}

// putReservation records the period reservation u made (in tx); a key the
// period already holds is an error (a reservation is charged once).
func putReservation(b *bolt.Bucket, u *Unit) error {
	k := append(periodKey(u.Period), u.Reservation...)
	if b.Get(k) != nil {
		return fmt.Errorf("%s: period reservation %q is already recorded", u.Histogram, u.Reservation)
	}
	return b.Put(k, u.Key())
}

// Reservations returns the keys of the period reservations recorded in the
// period starting at period (Unix ms), in key order.
func (l *Ledger) Reservations(period int64) ([]string, error) {
	var keys []string
	pk := periodKey(period)
	err := l.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketReservations).Cursor()
		for k, _ := c.Seek(pk); k != nil && bytes.HasPrefix(k, pk); k, _ = c.Next() {
			keys = append(keys, string(k[len(pk):]))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: read reservations of period %d: %w", period, err)
	}
	return keys, nil
}

// PeriodLimit returns the budget recorded with the first released unit of
// the period starting at period (Unix ms), lowered by any later unit
// recorded under a lower one (LowerLimit), and whether one was recorded.
func (l *Ledger) PeriodLimit(period int64) (Limit, bool, error) {
	var lim Limit
	var ok bool
	err := l.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketLimits).Get(periodKey(period))
		if v == nil {
			return nil
		}
		ok = true
		return json.Unmarshal(v, &lim)
	})
	if err != nil {
		return Limit{}, false, fmt.Errorf("ledger: read budget of period %d: %w", period, err)
	}
	return lim, ok, nil
}

// addUp is a + b (both ≥ 0) rounded toward +∞: a recorded sum of privacy
// charges is never below the exact sum (budget.AddUp; the ledger does not
// import budget).
func addUp(a, b float64) float64 {
	s := a + b
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return s
	}
	var e float64 // the rounding error of s, exactly (2Sum)
	if math.Abs(a) >= math.Abs(b) {
		e = b - (s - a)
	} else {
		e = a - (s - b)
	}
	if e > 0 {
		return math.Nextafter(s, math.Inf(1))
	}
	return s
}

// ApproxSpent returns the basic composition of the (ε, δ)-DP charges
// recorded in the period starting at period (Unix ms), and whether any was
// recorded.
func (l *Ledger) ApproxSpent(period int64) (Approx, bool, error) {
	var a Approx
	var ok bool
	err := l.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketApprox).Get(periodKey(period))
		if v == nil {
			return nil
		}
		ok = true
		return json.Unmarshal(v, &a)
	})
	if err != nil {
		return Approx{}, false, fmt.Errorf("ledger: read approx spend of period %d: %w", period, err)
	}
	return a, ok, nil
}

// Units calls fn for every recorded unit in (window start, histogram) order
// until fn returns false.
func (l *Ledger) Units(fn func(*Unit) bool) error {
	return l.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketUnits).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			var u Unit
			if err := json.Unmarshal(v, &u); err != nil {
				return fmt.Errorf("ledger: decode unit %x: %w", k, err)
			}
			if !fn(&u) {
				return nil
			}
		}
		return nil
	})
}

// LastWindow returns the largest recorded window start, if any unit exists.
func (l *Ledger) LastWindow() (int64, bool, error) {
	var last int64
	var ok bool
	err := l.db.View(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bucketUnits).Cursor().Last()
		if k == nil {
			return nil
		}
		if len(k) < 8 {
			return fmt.Errorf("ledger: malformed unit key %x", k)
		}
		last = int64(binary.BigEndian.Uint64(k[:8]) ^ (1 << 63))
		ok = true
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("ledger: last window: %w", err)
	}
	return last, ok, nil
}

func periodKey(p int64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, uint64(p)^(1<<63))
	return k
}

var keyMeta = []byte("stage")

// Meta is what the ledger was written under. It is recorded once, before the
// first window is consumed, and checked at every start: the windows and the
// budget periods of the recorded releases only make sense with the same
// window size and period.
type Meta struct {
	// FirstWindow is the start (Unix ms) of the first window the stage
	// releases. It is chosen without looking at the data (window.start, or
	// the wall clock at the first start): which windows get a release must
	// not depend on any user's events. Earlier events are late.
	FirstWindow int64 `json:"first_window_ms"`
	WindowMs    int64 `json:"window_ms"`
	PeriodMs    int64 `json:"period_ms"`
}

// Meta returns the recorded metadata, if any.
func (l *Ledger) Meta() (Meta, bool, error) {
	var m Meta
	var ok bool
	err := l.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get(keyMeta)
		if v == nil {
			return nil
		}
		ok = true
		return json.Unmarshal(v, &m)
	})
	if err != nil {
		return Meta{}, false, fmt.Errorf("ledger: read metadata: %w", err)
	}
	return m, ok, nil
}

// SetMeta records m unless metadata is already recorded (then it returns the
// recorded one and ok = false).
func (l *Ledger) SetMeta(_ context.Context, m Meta) (Meta, bool, error) {
	var cur Meta
	stored := false
	err := l.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta)
		if v := b.Get(keyMeta); v != nil {
			return json.Unmarshal(v, &cur)
		}
		v, err := json.Marshal(m)
		if err != nil {
			return err
		}
		cur, stored = m, true
		return b.Put(keyMeta, v)
	})
	if err != nil {
		return Meta{}, false, fmt.Errorf("ledger: record metadata: %w", err)
	}
	return cur, stored, nil
}

// FirstUnitWindow returns the smallest recorded window start, if any unit
// exists (for ledgers written before Meta existed).
func (l *Ledger) FirstUnitWindow() (int64, bool, error) {
	var first int64
	var ok bool
	err := l.db.View(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bucketUnits).Cursor().First()
		if k == nil {
			return nil
		}
		if len(k) < 8 {
			return fmt.Errorf("ledger: malformed unit key %x", k)
		}
		first = int64(binary.BigEndian.Uint64(k[:8]) ^ (1 << 63))
		ok = true
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("ledger: first window: %w", err)
	}
	return first, ok, nil
}

// MarkPublishedKeys marks the units with the given keys (Unit.Key) published,
// in one transaction.
func (l *Ledger) MarkPublishedKeys(_ context.Context, keys [][]byte) error {
	err := l.db.Update(func(tx *bolt.Tx) error {
		units := tx.Bucket(bucketUnits)
		for _, key := range keys {
			v := units.Get(key)
			if v == nil {
				return fmt.Errorf("no unit recorded under %x", key)
			}
			var u Unit
			if err := json.Unmarshal(v, &u); err != nil {
				return err
			}
			if u.Published {
				continue
			}
			u.Published = true
			nv, err := json.Marshal(&u)
			if err != nil {
				return err
			}
			if err := units.Put(key, nv); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ledger: mark %d units published: %w", len(keys), err)
	}
	return nil
}

// Prune deletes published units whose window starts before `before` (Unix
// ms), and the spend of periods that ended before it, in one transaction.
// It never deletes an unpublished unit (it must be republished with the
// same values) nor any unit of the last recorded window (the stage resumes
// from it, and a resumed stage must never go back to an earlier window). It
// returns how many units and periods it deleted.
func (l *Ledger) Prune(_ context.Context, before int64) (units, periods int, err error) {
	meta, ok, err := l.Meta()
	if err != nil {
		return 0, 0, err
	}
	last, haveLast, err := l.LastWindow()
	if err != nil {
		return 0, 0, err
	}
	if haveLast && before > last {
		before = last
	}
	err = l.db.Update(func(tx *bolt.Tx) error {
		ub := tx.Bucket(bucketUnits)
		c := ub.Cursor()
		var del [][]byte
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) < 8 {
				return fmt.Errorf("malformed unit key %x", k)
			}
			if int64(binary.BigEndian.Uint64(k[:8])^(1<<63)) >= before {
				break // keys are ordered by window start
			}
			var u Unit
			if err := json.Unmarshal(v, &u); err != nil {
				return err
			}
			if u.Published {
				del = append(del, append([]byte(nil), k...))
			}
		}
		for _, k := range del {
			if err := ub.Delete(k); err != nil {
				return err
			}
		}
		units = len(del)
		if !ok || meta.PeriodMs <= 0 {
			return nil // without the period length, keep every spend
		}
		var err error
		if periods, err = prunePeriods(tx.Bucket(bucketPeriods), meta.PeriodMs, before); err != nil {
			return err
		}
		if _, err = prunePeriods(tx.Bucket(bucketApprox), meta.PeriodMs, before); err != nil {
			return err
		}
		if err = pruneAdmissions(tx, meta.PeriodMs, before); err != nil {
			return err
		}
		if _, err = prunePeriods(tx.Bucket(bucketLimits), meta.PeriodMs, before); err != nil {
			return err
		}
		return pruneReservations(tx.Bucket(bucketReservations), meta.PeriodMs, before)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("ledger: prune before %d: %w", before, err)
	}
	return units, periods, nil
}

// prunePeriods deletes the entries of a per-period bucket whose period
// ended before `before`, and returns how many it deleted.
func prunePeriods(b *bolt.Bucket, periodMs, before int64) (int, error) {
	c := b.Cursor()
	var del [][]byte
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) != 8 {
			return 0, fmt.Errorf("malformed period key %x", k)
		}
		start := int64(binary.BigEndian.Uint64(k) ^ (1 << 63))
		if start+periodMs > before {
			break
		}
		del = append(del, append([]byte(nil), k...))
	}
	for _, k := range del {
		if err := b.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(del), nil
}

// pruneReservations deletes the reservations of the periods that ended
// before `before` (keys: period key + reservation key).
func pruneReservations(b *bolt.Bucket, periodMs, before int64) error {
	c := b.Cursor()
	var del [][]byte
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) < 8 {
			return fmt.Errorf("malformed reservation key %x", k)
		}
		if int64(binary.BigEndian.Uint64(k[:8])^(1<<63))+periodMs > before {
			break
		}
		del = append(del, append([]byte(nil), k...))
	}
	for _, k := range del {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Admitted is the decision of the cross-window bound for one window: the
// users (keyed hashes, decode.Event.User) admitted to it in its budget
// period.
type Admitted struct {
	Period int64
	Users  []uint64
}

var (
	bucketAdmissions = []byte("admissions")
	keyUserHash      = []byte("user_hash_key")
)

// putAdmitted adds one admitted window to the count of every user of adm
// (in tx) and deletes the admissions of the periods before adm.Period.
//
// Layout: bucket admissions → one bucket per period (periodKey) → user
// hash (8 bytes, big-endian) → admitted windows (uint16, big-endian).
func putAdmitted(tx *bolt.Tx, adm *Admitted) error {
	if adm == nil {
		return nil
	}
	root, err := tx.CreateBucketIfNotExists(bucketAdmissions)
	if err != nil {
		return err
	}
	pk := periodKey(adm.Period)
	var old [][]byte
	c := root.Cursor()
	for k, _ := c.First(); k != nil && string(k) < string(pk); k, _ = c.Next() {
		old = append(old, append([]byte(nil), k...))
	}
	for _, k := range old {
		if err := root.DeleteBucket(k); err != nil {
			return fmt.Errorf("delete admissions of an earlier period: %w", err)
		}
	}
	if len(adm.Users) == 0 {
		return nil
	}
	b, err := root.CreateBucketIfNotExists(pk)
	if err != nil {
		return err
	}
	b.FillPercent = 0.9 // keys are random hashes: splits leave pages half full otherwise
	users := slices.Clone(adm.Users)
	slices.Sort(users) // sequential puts touch each page once
	var k [8]byte
	for i, u := range users {
		if i > 0 && u == users[i-1] {
			return fmt.Errorf("user %x admitted twice to one window", u)
		}
		binary.BigEndian.PutUint64(k[:], u)
		n := uint16(0)
		if v := b.Get(k[:]); len(v) == 2 {
			n = binary.BigEndian.Uint16(v)
		}
		if n == math.MaxUint16 {
			return fmt.Errorf("user %x admitted to more than %d windows", u, math.MaxUint16)
		}
		var v [2]byte
		binary.BigEndian.PutUint16(v[:], n+1)
		if err := b.Put(k[:], v[:]); err != nil {
			return err
		}
	}
	return nil
}

// pruneAdmissions deletes the admissions of the periods that ended before
// `before` (RecordWindowAdmitted deletes them too, when a window of a later
// period is recorded with admissions; this covers a bound turned off).
func pruneAdmissions(tx *bolt.Tx, periodMs, before int64) error {
	root := tx.Bucket(bucketAdmissions)
	if root == nil {
		return nil
	}
	var del [][]byte
	c := root.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) != 8 {
			return fmt.Errorf("malformed admissions period key %x", k)
		}
		if int64(binary.BigEndian.Uint64(k)^(1<<63))+periodMs > before {
			break
		}
		del = append(del, append([]byte(nil), k...))
	}
	for _, k := range del {
		if err := root.DeleteBucket(k); err != nil {
			return err
		}
	}
	return nil
}

// Admissions returns, per user, the number of recorded windows of the
// period starting at period (Unix ms) the user was admitted to (see
// RecordWindowAdmitted).
func (l *Ledger) Admissions(period int64) (map[uint64]uint16, error) {
	out := map[uint64]uint16{}
	err := l.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketAdmissions)
		if root == nil {
			return nil
		}
		b := root.Bucket(periodKey(period))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if len(k) != 8 || len(v) != 2 {
				return fmt.Errorf("malformed admission %x: %x", k, v)
			}
			out[binary.BigEndian.Uint64(k)] = binary.BigEndian.Uint16(v)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: read admissions of period %d: %w", period, err)
	}
	return out, nil
}

// UserHashKey returns the 16-byte key of the stage's user hash recorded in
// the ledger's metadata, first recording the result of gen if none is. The
// key must survive restarts (per-user state of the cross-window bound is
// kept under it) and is a secret, like the rest of the state directory: a
// producer who knew it could predict which events count.
func (l *Ledger) UserHashKey(_ context.Context, gen func() ([]byte, error)) ([]byte, error) {
	var key []byte
	err := l.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta)
		if v := b.Get(keyUserHash); v != nil {
			if len(v) != 16 {
				return fmt.Errorf("recorded user hash key has %d bytes, want 16", len(v))
			}
			key = append([]byte(nil), v...)
			return nil
		}
		k, err := gen()
		if err != nil {
			return err
		}
		if len(k) != 16 {
			return fmt.Errorf("user hash key has %d bytes, want 16", len(k))
		}
		key = append([]byte(nil), k...)
		return b.Put(keyUserHash, key)
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: user hash key: %w", err)
	}
	return key, nil
}
