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
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
				if err := putReservation(tx.Bucket(bucketReservations), u, u.Reservation); err != nil {
					return err
				}
			}
			if sc := u.Selection; sc != nil && sc.Reservation != "" {
				if sc.Approx == nil {
					return fmt.Errorf("%s: selection reservation %q without its charge", u.Histogram, sc.Reservation)
				}
				if err := addApprox(tx.Bucket(bucketApprox), u.Period, *sc.Approx); err != nil {
					return err
				}
				if err := putReservation(tx.Bucket(bucketReservations), u, sc.Reservation); err != nil {
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
