package ledger

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// keyLastEnd (in the meta bucket) is the largest window end recorded by
// RecordWindow: the base boundary the stage resumes from. With histograms
// of their own, longer windows (histograms[].window) the last unit by key
// (LastWindow, the largest window *start*) does not say which boundary was
// recorded last: a boundary at which only a long window closes records a
// unit whose start lies before the last start recorded. Written in the same
// transaction as the units, so it is never ahead of or behind them. Ledgers
// written before it existed lack it (then every unit is one base window:
// LastWindow + window.size is the same boundary).
var keyLastEnd = []byte("last_window_end")

// putLastEnd raises the recorded last window end to end (in tx).
func putLastEnd(tx *bolt.Tx, end int64) error {
	b := tx.Bucket(bucketMeta)
	if v := b.Get(keyLastEnd); len(v) == 8 && int64(binary.BigEndian.Uint64(v)^(1<<63)) >= end {
		return nil
	}
	v := make([]byte, 8)
	binary.BigEndian.PutUint64(v, uint64(end)^(1<<63))
	return b.Put(keyLastEnd, v)
}

// LastWindowEnd returns the largest window end (Unix ms) of a unit recorded
// by RecordWindow, and false when none was recorded since this record
// existed (an empty ledger, or one written by an older version: use
// LastWindow).
func (l *Ledger) LastWindowEnd() (int64, bool, error) {
	var end int64
	var ok bool
	err := l.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get(keyLastEnd)
		if v == nil {
			return nil
		}
		if len(v) != 8 {
			return fmt.Errorf("malformed last window end %x", v)
		}
		end, ok = int64(binary.BigEndian.Uint64(v)^(1<<63)), true
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("ledger: last window end: %w", err)
	}
	return end, ok, nil
}
