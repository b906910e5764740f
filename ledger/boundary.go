package ledger

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

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

// keyHistogramSince holds HistogramSince's map (JSON) in the meta bucket.
var keyHistogramSince = []byte("histogram_since")

// HistogramSince records, in one transaction, since which base window each
// histogram of the running config (keys: a histogram's name and window
// size, see pipeline) has been counted without a break, and returns it:
// the recorded value for a key the previous session had too, next (this
// session's first window) for a key it did not have, and math.MinInt64
// for every key when the ledger has recorded no window yet (nothing was
// committed before). Keys of the previous session that the running config
// lacks are dropped, so a histogram removed and added back starts again.
//
// A histogram with a window longer than window.size must not release a
// window that began before its key's value: while it was absent, offsets
// were committed past events of that window, and which of them a restart
// re-reads depends on other users' events (ground rule 7).
func (l *Ledger) HistogramSince(_ context.Context, keys []string, next int64) (map[string]int64, error) {
	var out map[string]int64
	err := l.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta)
		old := map[string]int64{}
		if v := b.Get(keyHistogramSince); v != nil {
			if err := json.Unmarshal(v, &old); err != nil {
				return fmt.Errorf("malformed %s: %w", keyHistogramSince, err)
			}
		}
		first, _ := tx.Bucket(bucketUnits).Cursor().First()
		out = NextSince(old, keys, next, first == nil)
		v, err := json.Marshal(out)
		if err != nil {
			return err
		}
		return b.Put(keyHistogramSince, v)
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: histogram since: %w", err)
	}
	return out, nil
}

// NextSince is HistogramSince's rule, shared by the Store implementations:
// for each key, its value in old (the previous session's map), else
// math.MinInt64 when no window is recorded yet (fresh), else next.
func NextSince(old map[string]int64, keys []string, next int64, fresh bool) map[string]int64 {
	out := make(map[string]int64, len(keys))
	for _, k := range keys {
		switch v, ok := old[k]; {
		case ok:
			out[k] = v
		case fresh:
			out[k] = math.MinInt64
		default:
			out[k] = next
		}
	}
	return out
}
