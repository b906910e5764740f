package ledger

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

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
