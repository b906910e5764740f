package ledger

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"
)

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
func putReservation(b *bolt.Bucket, u *Unit, key string) error {
	k := append(periodKey(u.Period), key...)
	if b.Get(k) != nil {
		return fmt.Errorf("%s: period reservation %q is already recorded", u.Histogram, key)
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

// ReservationUnit returns the unit that made the period reservation key in
// the period starting at period (Unix ms) — its Charge or Approx is the
// reservation's charge, or with Unit.TopUp the difference charged — and
// whether it is still recorded (false: no such
// reservation, or its unit was pruned).
func (l *Ledger) ReservationUnit(period int64, key string) (*Unit, bool, error) {
	var u *Unit
	err := l.db.View(func(tx *bolt.Tx) error {
		uk := tx.Bucket(bucketReservations).Get(append(periodKey(period), key...))
		if uk == nil {
			return nil
		}
		v := tx.Bucket(bucketUnits).Get(uk)
		if v == nil {
			return nil
		}
		u = new(Unit)
		return json.Unmarshal(v, u)
	})
	if err != nil {
		return nil, false, fmt.Errorf("ledger: read reservation %q of period %d: %w", key, period, err)
	}
	return u, u != nil, nil
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

func periodKey(p int64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, uint64(p)^(1<<63))
	return k
}
