package kafkapartial

import (
	"cmp"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/partial"
)

// Checkpoints of the cross-window bound (issue 22, "takeover restore
// cost").
//
// Without them a takeover folds the whole progress partition: every
// Admitted record of the budget period, one per (window, 20,000 users),
// about 290 MB per partition and day at 10⁴ users per one-minute window.
// With them the Writer now and then writes the period's state itself
// (partial.Snapshot: closed_u per user, O(users of the period)) in a
// window's transaction, instead of that window's Admitted records, with:
//
//   - tombstones of every Admitted record still present (any period) and
//     of the previous checkpoint's parts the new one does not overwrite,
//     placed before the new parts: compaction can drop everything the
//     checkpoint folds in, so the topic holds O(users) per partition, not
//     O(admission records), once the cleaner has run (and the tombstones
//     themselves after delete.retention.ms);
//   - the window's Progress, whose Snap is the offset of the checkpoint's
//     first part (the parts are produced and acknowledged first, inside
//     the transaction, so their offsets are known before the Progress is
//     produced).
//
// All in one transaction: a read_committed reader sees the checkpoint, the
// tombstones and the Progress pointing at it together, or none of them,
// so the checkpoint always agrees with the resume offset. It holds the
// state after the windows before Progress.Next exactly: the bounder
// builds it from its aggregate.Admissions after closing the window, which
// is the state restored at its start plus the admissions of the windows it
// emitted since, each committed (the Writer dies on any failed
// transaction, and its owner restarts from Kafka).
//
// When (SnapshotDue): at a window that admits someone, when the users of
// the Admitted records written since the last checkpoint, this window's
// included, are at least the checkpoint's users, or the checkpoint is of
// another period (or there is none). So a takeover reads at most about
// twice the checkpoint's users (plus one small Progress per window since),
// and the checkpoints written over a period add up to at most about twice
// its admissions: a user counts 8–11 bytes in a checkpoint and about 21
// in an Admitted record, so the bytes written do not grow.

// Snapshot is the state an Emission's checkpoint holds: closed_u per user
// hash of Period after the emitted window (aggregate.Admissions.Counts).
type Snapshot struct {
	Period int64
	Counts map[uint64]uint16
}

// ckptState is what a Writer knows of its partition's checkpoint and
// admissions records (guarded by Writer.mu).
type ckptState struct {
	// off is the offset of the latest checkpoint's first part, when a
	// Progress points at it (nil: none).
	off *int64
	// parts, users and period are the latest checkpoint's (parts 0: none
	// present).
	parts, users int
	period       int64
	// since is the number of users in the Admitted records written after
	// it.
	since int
	// live are the keys of the base window's Admitted records present (not
	// tombstoned).
	live map[string]struct{}
	// views are the views' Admitted records present (partial.Admitted.View
	// > 0), key → value. A checkpoint holds the base window's state only;
	// it writes these records again after its first part, so that a
	// restore from it, which reads from there on, still finds every view's
	// state.
	views map[string][]byte
}

// restored sets the checkpoint state from a Restore.
func (w *Writer) restored(r *Restored) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := ckptState{live: map[string]struct{}{}, views: map[string][]byte{}}
	if r.Progress != nil && r.Progress.Snap != nil {
		off := *r.Progress.Snap
		c.off = &off
	}
	if s := r.Snapshot; s != nil {
		c.parts, c.users, c.period = s.Parts, len(s.Counts), s.Period
	}
	for _, a := range r.Admitted {
		if a.View > 0 {
			c.views[a.Key] = a.Encode() // not folded into checkpoints: see ckptState.views
			continue
		}
		c.live[a.Key] = struct{}{}
		c.since += len(a.Users)
	}
	w.ckpt = c
}

// SnapshotDue reports whether the Emit of a window of period that admits
// n users should carry a checkpoint (Emission.Snapshot) instead of the
// window's Admitted records: see the rule above.
func (w *Writer) SnapshotDue(period int64, n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &w.ckpt
	return n > 0 && (c.off == nil || c.period != period || c.since+n >= c.users)
}

// planEmit builds e's transaction (w.mu held).
func (w *Writer) planEmit(e Emission) txnPlan {
	p := int32(w.cfg.Partition)
	rec := func(key, value []byte) *kgo.Record {
		return &kgo.Record{Topic: w.cfg.ProgressTopic, Partition: p, Key: key, Value: value}
	}
	recs := make([]*kgo.Record, 0, 2+len(e.Admitted)+len(e.Tombstones))
	if w.cfg.PartialsJSON {
		recs = append(recs, &kgo.Record{Topic: w.cfg.PartialsTopic, Partition: 0, Key: e.Partial.Key(), Value: e.Partial.EncodeJSON()})
	} else {
		// A Partial whose keys exceed a record goes in parts, in order
		// (partial/parts.go).
		for _, q := range e.Partial.Split(cmp.Or(w.cfg.SplitBytes, partial.MaxRecordBytes)) {
			recs = append(recs, &kgo.Record{Topic: w.cfg.PartialsTopic, Partition: 0, Key: q.Key(), Value: q.Encode()})
		}
	}
	for _, a := range e.Admitted {
		if e.Snapshot != nil && a.View > 0 {
			continue // written after the checkpoint's first part, below
		}
		recs = append(recs, rec(a.Key(), a.Encode()))
	}
	dead := map[string]bool{}
	tomb := func(k []byte) {
		if !dead[string(k)] {
			dead[string(k)] = true
			recs = append(recs, rec(k, nil))
		}
	}
	for _, k := range e.Tombstones {
		tomb(k)
	}
	var parts []*partial.Snapshot
	if e.Snapshot != nil {
		for k := range w.ckpt.live {
			tomb([]byte(k))
		}
		parts = partial.SplitSnapshot(e.Snapshot.Period, e.Progress.Next, e.Snapshot.Counts)
		for i := len(parts); i < w.ckpt.parts; i++ {
			tomb(partial.SnapshotKey(i))
		}
	}
	pr := *e.Progress
	plan := txnPlan{first: recs}
	if len(parts) == 0 {
		if w.ckpt.off != nil {
			off := *w.ckpt.off
			pr.Snap = &off
		}
		plan.first = append(plan.first, rec([]byte(partial.ProgressKey), pr.Encode()))
	} else {
		first := rec(partial.SnapshotKey(0), parts[0].Encode())
		plan.first = append(plan.first, first)
		for _, s := range parts[1:] {
			plan.first = append(plan.first, rec(partial.SnapshotKey(s.Part), s.Encode()))
		}
		// The views' records, again after the first part (ckptState.views):
		// those present and not tombstoned now, and this window's.
		keys := slices.Sorted(maps.Keys(w.ckpt.views))
		for _, k := range keys {
			if !dead[k] {
				plan.first = append(plan.first, rec([]byte(k), w.ckpt.views[k]))
			}
		}
		for _, a := range e.Admitted {
			if a.View > 0 {
				plan.first = append(plan.first, rec(a.Key(), a.Encode()))
			}
		}
		plan.then = func() []*kgo.Record {
			off := first.Offset // set by the acknowledged produce
			pr.Snap = &off
			return []*kgo.Record{rec([]byte(partial.ProgressKey), pr.Encode())}
		}
	}
	plan.committed = func() {
		c := &w.ckpt
		if c.live == nil {
			c.live = map[string]struct{}{}
		}
		if c.views == nil {
			c.views = map[string][]byte{}
		}
		for k := range dead {
			delete(c.live, k)
			delete(c.views, k)
		}
		for _, a := range e.Admitted {
			if a.View > 0 {
				c.views[string(a.Key())] = a.Encode() // not folded into checkpoints
				continue
			}
			c.live[string(a.Key())] = struct{}{}
			c.since += len(a.Users)
		}
		if len(parts) > 0 {
			c.off, c.parts, c.users, c.period, c.since = pr.Snap, len(parts), parts[0].Users, e.Snapshot.Period, 0
		}
	}
	return plan
}
