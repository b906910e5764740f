package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// Admitted is the decision of the cross-window bound for one base
// boundary: the users (keyed hashes, decode.Event.User) admitted, in their
// budget period, to the base window ending there (Users) and to each
// longer window ending there (Views).
type Admitted struct {
	Period int64
	// Users are the users admitted to the base window (window.size): the
	// admission state of the histograms at window.size.
	Users []uint64
	// Views are the admissions of the histograms with their own, longer
	// window (histograms[].window) whose window ends at this boundary: one
	// admission state per window size (the plan's "Views").
	Views []ViewAdmitted
}

// ViewAdmitted is the users admitted to one window of the histograms
// whose own window is WindowMs long.
type ViewAdmitted struct {
	WindowMs int64
	Users    []uint64
}

var (
	bucketAdmissions = []byte("admissions")
	keyUserHash      = []byte("user_hash_key")
)

// viewBucket is the name of the admissions bucket of the window size
// windowMs (histograms[].window): "admissions/<ms>"; the base window's is
// bucketAdmissions.
func viewBucket(windowMs int64) []byte {
	return []byte(string(bucketAdmissions) + "/" + strconv.FormatInt(windowMs, 10))
}

// putAdmitted adds one admitted window to the count of every user of adm,
// in the base window's state and in each view's (in tx), and deletes each
// state's admissions of the periods before adm.Period.
//
// Layout: bucket admissions (the base window; admissions/<window ms> for
// a longer window size) → one bucket per period (periodKey) → user hash
// (8 bytes, big-endian) → admitted windows (uint16, big-endian).
func putAdmitted(tx *bolt.Tx, adm *Admitted) error {
	if adm == nil {
		return nil
	}
	if err := putAdmittedIn(tx, bucketAdmissions, adm.Period, adm.Users); err != nil {
		return err
	}
	seen := map[int64]bool{}
	for _, v := range adm.Views {
		if v.WindowMs <= 0 || seen[v.WindowMs] {
			return fmt.Errorf("admissions of window size %d ms: not a positive size, or given twice", v.WindowMs)
		}
		seen[v.WindowMs] = true
		if err := putAdmittedIn(tx, viewBucket(v.WindowMs), adm.Period, v.Users); err != nil {
			return fmt.Errorf("admissions of the %d ms windows: %w", v.WindowMs, err)
		}
	}
	return nil
}

// putAdmittedIn is putAdmitted for one admission state (bucket name).
func putAdmittedIn(tx *bolt.Tx, name []byte, period int64, admitted []uint64) error {
	root, err := tx.CreateBucketIfNotExists(name)
	if err != nil {
		return err
	}
	pk := periodKey(period)
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
	if len(admitted) == 0 {
		return nil
	}
	b, err := root.CreateBucketIfNotExists(pk)
	if err != nil {
		return err
	}
	b.FillPercent = 0.9 // keys are random hashes: splits leave pages half full otherwise
	users := slices.Clone(admitted)
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
	var names [][]byte // the base window's state and every view's
	err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		if bytes.Equal(name, bucketAdmissions) || bytes.HasPrefix(name, append(slices.Clip(bucketAdmissions), '/')) {
			names = append(names, slices.Clone(name))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := pruneAdmissionsIn(tx.Bucket(name), periodMs, before); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// pruneAdmissionsIn is pruneAdmissions for one admission state.
func pruneAdmissionsIn(root *bolt.Bucket, periodMs, before int64) error {
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
	return l.admissionsIn(bucketAdmissions, period)
}

// ViewAdmissions is Admissions for the histograms whose own window is
// windowMs long (histograms[].window): the users' admitted windows of that
// size in the period (Admitted.Views).
func (l *Ledger) ViewAdmissions(period, windowMs int64) (map[uint64]uint16, error) {
	return l.admissionsIn(viewBucket(windowMs), period)
}

func (l *Ledger) admissionsIn(name []byte, period int64) (map[uint64]uint16, error) {
	out := map[uint64]uint16{}
	err := l.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(name)
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
		return nil, fmt.Errorf("ledger: read admissions (%s) of period %d: %w", name, period, err)
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
