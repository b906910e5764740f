package kafkapartial

import (
	"context"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/partial"
)

// owner is a bounder of one partition as pipeline's emit drives a Writer
// with the cross-window bound: its Admissions, the admissions keys it
// knows (tombstoned when their period is over; at a checkpoint the Writer
// tombstones every one left, which pipeline's emit lists as well).
type owner struct {
	w    *Writer
	adm  *aggregate.Admissions
	keys map[string]int64
	ckpt bool // write checkpoints when due
	// period is the budget period's length.
	period int64
}

const testPeriod = 10 * minute

// takeOver opens a Writer of p (fencing the previous owner) and restores
// p's state as pipeline's runWorker does.
func takeOver(t *testing.T, c *kfake.Cluster, p, k int, next int64, ckpt bool) (*owner, *Restored) {
	return takeOverPeriod(t, c, p, k, next, ckpt, testPeriod)
}

func takeOverPeriod(t *testing.T, c *kfake.Cluster, p, k int, next int64, ckpt bool, periodMs int64) (*owner, *Restored) {
	t.Helper()
	w := openWriter(t, c, p)
	rs, err := w.Restore(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	adm, err := aggregate.NewAdmissions(k)
	if err != nil {
		t.Fatal(err)
	}
	period := next - next%periodMs
	adm.Restore(period, rs.Counts(period))
	o := &owner{w: w, adm: adm, keys: map[string]int64{}, ckpt: ckpt, period: periodMs}
	for _, a := range rs.Admitted {
		o.keys[a.Key] = a.Period
	}
	return o, rs
}

// emit closes window win with users eligible, as pipeline's emit does.
func (o *owner) emit(t *testing.T, p int, win int64, users []uint64) {
	t.Helper()
	period := win - win%o.period
	o.adm.Forget(period)
	admitted := o.adm.Close(period, users)
	e := emission(p, win)
	e.Admitted = partial.ChunkAdmitted(period, win, admitted)
	if o.ckpt && o.w.SnapshotDue(period, len(admitted)) {
		e.Admitted, e.Snapshot = nil, &Snapshot{Period: period, Counts: o.adm.Counts(period)}
	}
	for k, per := range o.keys {
		if per < period {
			e.Tombstones = append(e.Tombstones, []byte(k))
		}
	}
	if err := o.w.Emit(ctxT(t), e); err != nil {
		t.Fatal(err)
	}
	for _, k := range e.Tombstones {
		delete(o.keys, string(k))
	}
	if e.Snapshot != nil {
		clear(o.keys) // the Writer tombstoned them (pipeline's emit lists them too)
	}
	for _, a := range e.Admitted {
		o.keys[string(partial.AdmittedKey(a.Period, a.Window, a.Chunk))] = a.Period
	}
}

// foldAll folds p's whole progress partition, from its start, as a
// Restore without checkpoints does.
func foldAll(t *testing.T, w *Writer) *Restored {
	t.Helper()
	start, lso, err := Offsets(ctxT(t), w.cl, progressTopic, int32(w.cfg.Partition))
	if err != nil {
		t.Fatal(err)
	}
	f, err := w.fold(ctxT(t), start, lso)
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.result()
	if err != nil {
		t.Fatal(err)
	}
	r.Records, r.Bytes = f.records, f.bytes
	return r
}

// TestCheckpointRestoreExact: a partition's owner emits windows over two
// budget periods with max_windows_per_user 3 (checkpoints when due, one
// of two parts); after every window a new owner takes over (fencing the
// old one) and restores exactly the old owner's closed_u, from the latest
// checkpoint plus the admissions records after it, reading less than the
// whole partition; folding the whole partition from its start (an older
// bounder's restore) gives the same state. The partition starts with
// admissions records of a bounder without checkpoints (old data), and
// one takeover happens over a transaction the fenced owner left open
// (aborted records at the partition's end).
func TestCheckpointRestoreExact(t *testing.T) {
	c := newCluster(t, 1)
	const k = 3
	rng := rand.New(rand.NewPCG(1, 2))
	pool := make([]uint64, 40000)
	for i := range pool {
		pool[i] = rng.Uint64() | 1
	}
	usersOf := func(win int64) []uint64 {
		n := 50 + rng.IntN(200)
		if win == 4*minute {
			return pool // a checkpoint of two parts
		}
		var us []uint64
		seen := map[uint64]bool{}
		for range n {
			u := pool[rng.IntN(300)]
			if !seen[u] {
				seen[u] = true
				us = append(us, u)
			}
		}
		return us
	}
	o, _ := takeOver(t, c, 0, k, 0, false) // old data: no checkpoints
	var snaps int
	for win := int64(0); win < 2*testPeriod+3*minute; win += minute {
		if win == 2*minute {
			o.ckpt = true // upgraded: checkpoints from now on
		}
		if win == 7*minute {
			// The owner is paused inside a transaction when the next one
			// fences it: its records are aborted at the partition's end.
			inTxn, resume := make(chan struct{}), make(chan struct{})
			o.w.beforeCommit = func() { close(inTxn); <-resume }
			errc := make(chan error, 1)
			e := emission(0, win, pool[:500]...)
			go func() { errc <- o.w.Emit(context.Background(), e) }()
			<-inTxn
			want := o.adm.Counts(win - win%testPeriod)
			o2 := openWriter(t, c, 0)
			close(resume)
			if err := <-errc; err == nil {
				t.Fatal("the fenced owner's commit succeeded")
			}
			rs, err := o2.Restore(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := rs.Counts(win - win%testPeriod); !maps.Equal(got, want) {
				t.Fatalf("window %d: restored %d users after an aborted transaction, the owner had %d", win/minute, len(got), len(want))
			}
			if rs.Progress == nil || rs.Progress.Next != win {
				t.Fatalf("window %d: restored progress %+v after an aborted transaction, want next %d", win/minute, rs.Progress, win)
			}
			o, _ = takeOver(t, c, 0, k, win, true)
		}
		due := o.w.SnapshotDue(win-win%testPeriod, 1)
		o.emit(t, 0, win, usersOf(win))
		if o.ckpt && due {
			snaps++
		}
		period := win - win%testPeriod
		want := o.adm.Counts(period)
		var rs *Restored
		o, rs = takeOver(t, c, 0, k, win+minute, o.ckpt)
		if got := rs.Counts(period); !maps.Equal(got, want) {
			t.Fatalf("window %d: restored %d users, the owner had %d", win/minute, len(got), len(want))
		}
		if len(want) == 0 {
			t.Fatalf("window %d: no admissions", win/minute)
		}
		all := foldAll(t, o.w)
		if o.ckpt && rs.Records >= all.Records {
			t.Fatalf("window %d: the restore read %d records, the whole partition has %d", win/minute, rs.Records, all.Records)
		}
		if got := all.Counts(period); !maps.Equal(got, want) {
			t.Fatalf("window %d: the whole partition folds to another state (%d users, the owner had %d)", win/minute, len(got), len(want))
		}
		if o.ckpt != (rs.Snapshot != nil) || o.ckpt != (rs.Progress.Snap != nil) {
			t.Fatalf("window %d: checkpoint %v restored %+v", win/minute, o.ckpt, rs.Progress)
		}
		if win == 4*minute && rs.Snapshot.Parts != 2 {
			t.Fatalf("checkpoint of %d users in %d parts, want 2", len(rs.Snapshot.Counts), rs.Snapshot.Parts)
		}
		if win > 4*minute && rs.Snapshot.Period > 0 && rs.Snapshot.Parts != 1 {
			t.Fatalf("window %d: checkpoint in %d parts, want 1", win/minute, rs.Snapshot.Parts)
		}
	}
	if snaps < 3 {
		t.Errorf("%d checkpoints written, want several", snaps)
	}
}

// TestCheckpointRestoreCost measures a takeover's restore of one
// partition after 20 windows of 10⁴ users each, without checkpoints (as
// before) and with them, from one run: the same users in every window
// (max_windows_per_user 20: every window admits them all; the state is
// 10⁴ users), and, the worst case for checkpoints, new users in every
// window (the state is 2·10⁵ users). It also reports the bytes written
// to the progress partition.
func TestCheckpointRestoreCost(t *testing.T) {
	const users, windows = 10000, 20
	rng := rand.New(rand.NewPCG(3, 4))
	for _, distinct := range []bool{false, true} {
		c := newCluster(t, 2)
		us := make([]uint64, users*windows)
		for i := range us {
			us[i] = rng.Uint64() | 1
		}
		type result struct {
			recs         int
			bytes, wrote int64
			took         time.Duration
		}
		var res [2]result
		for p, ckpt := range []bool{false, true} {
			o, _ := takeOverPeriod(t, c, p, windows, 0, ckpt, time.Hour.Milliseconds())
			for win := range int64(windows) {
				batch := us[:users]
				if distinct {
					batch = us[win*users : (win+1)*users]
				}
				o.emit(t, p, win*minute, batch)
			}
			want := o.adm.Counts(0)
			wrote := foldAll(t, o.w).Bytes
			at := time.Now()
			_, rs := takeOverPeriod(t, c, p, windows, windows*minute, ckpt, time.Hour.Milliseconds())
			res[p] = result{rs.Records, rs.Bytes, wrote, time.Since(at)}
			if got := rs.Counts(0); len(got) == 0 || !maps.Equal(got, want) {
				t.Fatalf("checkpoints %v: restored %d users, want %d", ckpt, len(got), len(want))
			}
		}
		t.Logf("takeover restore after %d windows × %d users (new users every window: %v): without checkpoints %d records, %d bytes read (%d written), %v; with checkpoints %d records, %d bytes read (%d written), %v",
			windows, users, distinct, res[0].recs, res[0].bytes, res[0].wrote, res[0].took, res[1].recs, res[1].bytes, res[1].wrote, res[1].took)
		if limit := map[bool]int64{false: 5, true: 1}[distinct]; res[1].bytes*limit > res[0].bytes {
			t.Errorf("with checkpoints the restore read %d bytes, without %d: want at most 1/%d", res[1].bytes, res[0].bytes, limit)
		}
	}
}

// TestSnapshotRecordSize: a checkpoint's parts stay under 512 KiB each,
// also at K = 65535 (3-byte counts); the sizes at 10⁴ and 10⁵ users are
// logged.
func TestSnapshotRecordSize(t *testing.T) {
	for _, tc := range []struct {
		users int
		count uint16
	}{{10000, 1}, {100000, 1}, {100000, 65535}} {
		counts := map[uint64]uint16{}
		rng := rand.New(rand.NewPCG(5, uint64(tc.users)))
		for len(counts) < tc.users {
			counts[rng.Uint64()] = tc.count
		}
		parts := partial.SplitSnapshot(0, minute, counts)
		total, largest := 0, 0
		got := map[uint64]uint16{}
		for _, s := range parts {
			b := s.Encode()
			total += len(b)
			largest = max(largest, len(b))
			d, err := partial.DecodeSnapshot(b)
			if err != nil {
				t.Fatal(err)
			}
			_ = d.Each(func(u uint64, n uint16) { got[u] = n })
		}
		t.Logf("%d users (counts %d): %d parts, %d bytes, largest part %d bytes", tc.users, tc.count, len(parts), total, largest)
		if largest > 512<<10 {
			t.Errorf("%d users: a part of %d bytes", tc.users, largest)
		}
		if !maps.Equal(got, counts) {
			t.Errorf("%d users: decoded %d", tc.users, len(got))
		}
	}
}
