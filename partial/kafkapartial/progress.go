package kafkapartial

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/internal/lib/kafkaoffset"

	"github.com/dpstage/stage/partial"
)

// AdmittedRecord is one admissions record still present in a progress
// partition, with its key.
type AdmittedRecord struct {
	Key string
	*partial.Admitted
}

// Restored is a progress partition's committed state.
type Restored struct {
	// Progress is the latest Progress; nil for a partition never emitted.
	Progress *partial.Progress
	// Snapshot is the partition's latest checkpoint of the cross-window
	// bound (partial.Snapshot), nil when it has none.
	Snapshot *Checkpoint
	// Admitted are the admissions records not tombstoned (after the
	// checkpoint, when there is one), in log order of their latest write.
	Admitted []AdmittedRecord
	// Records and Bytes (keys and values) count the records the restore
	// read, markers left out: what a takeover costs.
	Records int
	Bytes   int64
}

// Checkpoint is a restored partial.Snapshot, its parts put together.
type Checkpoint struct {
	Period, Next int64
	Parts        int
	// Counts is closed_u per user hash.
	Counts map[uint64]uint16
}

// Counts is the cross-window bound's state of period: closed_u per user
// hash, the checkpoint's (when it is of period) plus one per Admitted
// record of period after it. It is what the partition's last committed
// owner held after the windows it emitted (partial.Snapshot).
func (r *Restored) Counts(period int64) map[uint64]uint16 {
	counts := map[uint64]uint16{}
	if c := r.Snapshot; c != nil && c.Period == period {
		for u, n := range c.Counts {
			counts[u] = n
		}
	}
	for _, a := range r.Admitted {
		if a.Period != period || a.View != 0 {
			continue
		}
		for _, u := range a.Users {
			counts[u]++
		}
	}
	return counts
}

// ViewCounts is Counts for the admission state of the histograms whose own
// window is view ms long (partial.Admitted.View > 0): one per Admitted
// record of that view and period. A checkpoint holds the base window's
// state only, and never tombstones a view's records (Writer.planEmit): a
// view has one window per view length, so its records are few (24 a day
// per partition for an hour view) and stay until their period is over.
func (r *Restored) ViewCounts(period, view int64) map[uint64]uint16 {
	counts := map[uint64]uint16{}
	for _, a := range r.Admitted {
		if a.Period != period || a.View != view {
			continue
		}
		for _, u := range a.Users {
			counts[u]++
		}
	}
	return counts
}

// restoreTail is how many offsets below the last stable offset Restore
// reads first to find the latest Progress: an Emit's transaction ends
// with it, so it is the record just before the LSO's commit marker unless
// the last transaction was aborted (a fenced owner's); then the read is
// widened fourfold until it finds one.
const restoreTail = 2

// Restore reads progress partition p read_committed up to the last stable
// offset taken first, and folds it (latest value per key, tombstones
// delete). Call it after OpenWriter fenced the previous owner: only p's
// transactional id writes to the partition, so no transaction is open
// there and the LSO is the end of everything committed. Every read keeps
// control records and stops at the record just below the LSO: a
// partition written only transactionally ends with a commit or abort
// marker, and the last batch of a partition (in the active segment) is
// never compacted, so that record is always there.
//
// Checkpoints (partial.Snapshot): the latest Progress is found first, in
// the last records (restoreTail, widened until one is found). When it
// points at a checkpoint (Progress.Snap), the partition is folded from
// there, not from its start. That fold equals the fold from the start:
// a checkpoint's transaction tombstones every Admitted record and every
// older checkpoint part still present before it (Emit), so no key whose
// latest record lies before the checkpoint is alive. A Progress without
// a checkpoint (an older bounder's, or none written yet) is folded from
// the start, as before.
//
// A new kind of record in the progress topic must keep this true: its
// latest record must come after the checkpoint (written again with it),
// or be of no use once the checkpoint is written; otherwise a takeover
// from the checkpoint loses it. folded.add refuses keys it does not know.
func (w *Writer) Restore(ctx context.Context) (*Restored, error) {
	w.mu.Lock()
	dead := w.dead
	w.mu.Unlock()
	if dead != nil {
		return nil, dead
	}
	topic, p := w.cfg.ProgressTopic, int32(w.cfg.Partition)
	start, lso, err := Offsets(ctx, w.cl, topic, p)
	if err != nil {
		return nil, fmt.Errorf("kafkapartial: restore %s/%d: %w", topic, p, err)
	}
	if lso <= start {
		out := &Restored{}
		w.restored(out)
		return out, nil
	}
	var records int
	var bytes int64
	fold := func(from int64) (*folded, error) {
		f, err := w.fold(ctx, from, lso)
		if f != nil {
			records, bytes = records+f.records, bytes+f.bytes
		}
		return f, err
	}
	var f *folded
	from, k := max(start, lso-restoreTail), int64(restoreTail)
	for {
		if f, err = fold(from); err != nil {
			return nil, err
		}
		if f.progress != nil || from == start {
			break
		}
		k *= 4
		from = max(start, lso-k)
	}
	switch pr := f.progress; {
	case pr == nil || pr.Snap == nil:
		if from > start {
			f, err = fold(start)
		}
	case *pr.Snap < start:
		return nil, fmt.Errorf("kafkapartial: restore %s/%d: the checkpoint at offset %d is below the partition's start %d (the progress topic must be cleanup.policy=compact, without time retention): %w",
			topic, p, *pr.Snap, start, partial.ErrFormat)
	case *pr.Snap < from:
		f, err = fold(*pr.Snap)
	}
	if err != nil {
		return nil, err
	}
	out, err := f.result()
	if err != nil {
		return nil, fmt.Errorf("kafkapartial: restore %s/%d: %w", topic, p, err)
	}
	out.Records, out.Bytes = records, bytes
	w.restored(out)
	return out, nil
}

// folded is a progress partition folded from some offset to the LSO.
type folded struct {
	progress *partial.Progress
	adm      map[string]*partial.Admitted
	order    []string
	snaps    map[string]*partial.Snapshot
	records  int
	bytes    int64
}

// fold reads progress partition p read_committed over [from, lso).
func (w *Writer) fold(ctx context.Context, from, lso int64) (*folded, error) {
	topic, p := w.cfg.ProgressTopic, int32(w.cfg.Partition)
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(w.cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, w.cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafkapartial: restore consumer: %w", err)
	}
	defer cl.Close()
	f := &folded{adm: map[string]*partial.Admitted{}, snaps: map[string]*partial.Snapshot{}}
	for done := false; !done; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return f, fmt.Errorf("kafkapartial: restore %s/%d to offset %d: %w", topic, p, lso, err)
		}
		if err := fs.Err(); err != nil {
			return f, fmt.Errorf("kafkapartial: restore %s/%d: fetch: %w", topic, p, err)
		}
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			if done || ferr != nil || r.Offset >= lso {
				done = true
				return
			}
			if r.Offset+1 >= lso {
				done = true
			}
			if r.Attrs.IsControl() || r.Offset < from {
				return
			}
			f.records++
			f.bytes += int64(len(r.Key) + len(r.Value))
			ferr = f.add(r, int(p))
		})
		if ferr != nil {
			return f, fmt.Errorf("kafkapartial: restore %s/%d: %w", topic, p, ferr)
		}
	}
	return f, nil
}

// add folds one record of progress partition p in.
func (f *folded) add(r *kgo.Record, p int) error {
	key := string(r.Key)
	switch {
	case key == partial.ProgressKey:
		if r.Value == nil {
			f.progress = nil
			return nil
		}
		pr, err := partial.DecodeProgress(r.Value)
		if err != nil {
			return err
		}
		if pr.Partition != p {
			return fmt.Errorf("%w: progress of partition %d in progress partition %d", partial.ErrFormat, pr.Partition, p)
		}
		f.progress = pr
	case strings.HasPrefix(key, "adm/"):
		if r.Value == nil {
			delete(f.adm, key)
			return nil
		}
		a, err := partial.DecodeAdmitted(r.Value)
		if err != nil {
			return err
		}
		if _, ok := f.adm[key]; !ok {
			f.order = append(f.order, key)
		}
		f.adm[key] = a
	case partial.IsSnapshotKey(r.Key):
		if r.Value == nil {
			delete(f.snaps, key)
			return nil
		}
		s, err := partial.DecodeSnapshot(r.Value)
		if err != nil {
			return err
		}
		if key != string(partial.SnapshotKey(s.Part)) {
			return fmt.Errorf("%w: snapshot part %d under key %q", partial.ErrFormat, s.Part, key)
		}
		f.snaps[key] = s
	default:
		return fmt.Errorf("%w: unknown key %q in progress partition %d", partial.ErrFormat, key, p)
	}
	return nil
}

// result is the folded state, its checkpoint's parts checked and put
// together.
func (f *folded) result() (*Restored, error) {
	out := &Restored{Progress: f.progress}
	for _, k := range f.order {
		if a, ok := f.adm[k]; ok {
			out.Admitted = append(out.Admitted, AdmittedRecord{Key: k, Admitted: a})
		}
	}
	if len(f.snaps) > 0 {
		var first *partial.Snapshot
		c := &Checkpoint{Counts: map[uint64]uint16{}}
		for _, s := range f.snaps {
			if first == nil {
				first = s
				c.Period, c.Next, c.Parts = s.Period, s.Next, s.Parts
			}
			if s.Period != first.Period || s.Next != first.Next || s.Parts != first.Parts || s.Users != first.Users {
				return nil, fmt.Errorf("%w: snapshot parts of two checkpoints (next %d and %d)", partial.ErrFormat, first.Next, s.Next)
			}
			_ = s.Each(func(u uint64, n uint16) { c.Counts[u] = n }) // checked by DecodeSnapshot
		}
		if len(f.snaps) != first.Parts || len(c.Counts) != first.Users {
			return nil, fmt.Errorf("%w: checkpoint of next %d incomplete: %d of %d parts, %d of %d users", partial.ErrFormat, first.Next, len(f.snaps), first.Parts, len(c.Counts), first.Users)
		}
		if f.progress != nil && first.Next > f.progress.Next {
			return nil, fmt.Errorf("%w: checkpoint of next %d after the progress's next %d", partial.ErrFormat, first.Next, f.progress.Next)
		}
		out.Snapshot = c
	}
	if pr := f.progress; pr != nil && pr.Snap != nil && out.Snapshot == nil {
		return nil, fmt.Errorf("%w: the progress points at a checkpoint at offset %d that is not there", partial.ErrFormat, *pr.Snap)
	}
	return out, nil
}

// Offsets returns the log start offset and the last stable offset of
// topic/p.
func Offsets(ctx context.Context, cl *kgo.Client, topic string, p int32) (start, lso int64, err error) {
	return kafkaoffset.Committed(ctx, cl, topic, p)
}
