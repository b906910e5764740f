package ledger

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

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
