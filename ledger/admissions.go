package ledger

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	bolt "go.etcd.io/bbolt"
)

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
