package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/partial"
	"github.com/dpstage/stage/partial/kafkapartial"
)

// progressState is one progress partition folded (latest value per key).
type progressState struct {
	progress *partial.Progress
	snapAt   int64 // offset of the live checkpoint's part 0, -1: none
	admAfter int   // admissions records present after it
}

// readProgress folds every partition of the progress topic, read
// read_committed from its start.
func readProgress(t *testing.T, h *e2e.Harness, cfg *config.Config) map[int32]*progressState {
	t.Helper()
	topic := cfg.Kafka.ProgressTopic()
	parts := map[int32]kgo.Offset{}
	for p := range int32(distParts) {
		parts[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Broker.Addr()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The bounders go on writing: read each partition up to its last
	// stable offset now (the record below it is a transaction marker).
	end := map[int32]int64{}
	for p := range int32(distParts) {
		start, lso, err := kafkapartial.Offsets(ctx, cl, topic, p)
		if err != nil {
			t.Fatal(err)
		}
		if lso > start {
			end[p] = lso
		}
	}
	type kv struct {
		off int64
		val []byte
	}
	latest := map[int32]map[string]kv{}
	for len(end) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading the progress topic: %v", ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			lso, ok := end[r.Partition]
			if !ok || r.Offset >= lso {
				return
			}
			if r.Offset+1 >= lso {
				delete(end, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			if latest[r.Partition] == nil {
				latest[r.Partition] = map[string]kv{}
			}
			latest[r.Partition][string(r.Key)] = kv{r.Offset, r.Value}
		})
	}
	out := map[int32]*progressState{}
	for p, m := range latest {
		st := &progressState{snapAt: -1}
		if v := m[partial.ProgressKey].val; v != nil {
			if st.progress, err = partial.DecodeProgress(v); err != nil {
				t.Fatal(err)
			}
		}
		if s := m["snap/0"]; s.val != nil {
			st.snapAt = s.off
		}
		for k, v := range m {
			if len(k) > 4 && k[:4] == "adm/" && v.val != nil && st.snapAt >= 0 && v.off > st.snapAt {
				st.admAfter++
			}
		}
		out[p] = st
	}
	return out
}

// TestDistTakeoverFromCheckpoint (issue 22, takeover restore cost): one
// of two bounders is stopped mid-stream and the other takes its
// partitions over (fence, restore from the progress topic): still exactly
// one Partial per (window, partition) and exact sums. With
// contribution.max_windows_per_user 1, every partition checkpoints its
// admissions at the users' first window (its Progress points at the
// checkpoint), and admissions of new users later in the period follow it
// as admissions records. A bounder is stopped; the other one takes its
// partitions over, restoring from the checkpoint plus the records after
// it, and no user counts in a second window of the period, also when
// that window was emitted by the stopped bounder. (It replaces
// TestDistBounderTakeover, which checked the same without new users.)
func TestDistTakeoverFromCheckpoint(t *testing.T) {
	h := e2e.New(t)
	cfg := distConfig(t, h)
	cfg.Contribution.MaxWindowsPerUser = 1
	a, b := startBounder(t, cfg, h), startBounder(t, cfg, h)
	waitStarted(t, h, cfg)
	emittedWith := func(what string, after int64) {
		e2e.WaitFor(t, what, 20*time.Second, func() bool {
			got := map[int]bool{}
			for _, p := range readPartials(t, h, cfg) {
				if p.WindowStart >= after {
					got[p.Partition] = true
				}
			}
			return len(got) == distParts
		})
	}
	var evs []e2e.Event
	for i := range 4 {
		batch := liveEvents("u", 40) // the same users in every window
		if i > 0 {
			batch = append(batch, liveEvents("v", 9)...) // and new ones from the second on
		}
		produceKeyed(t, h, batch)
		evs = append(evs, batch...)
		switch i {
		case 0:
			emittedWith("the users' first window emitted", batch[len(batch)-1].At.Truncate(time.Second).UnixMilli())
			for p, st := range readProgress(t, h, cfg) {
				if st.snapAt < 0 || st.progress == nil || st.progress.Snap == nil || *st.progress.Snap != st.snapAt {
					t.Fatalf("progress partition %d: checkpoint at %d, progress %+v: want a checkpoint the progress points at", p, st.snapAt, st.progress)
				}
			}
		case 1:
			emittedWith("the new users' first window emitted", batch[len(batch)-1].At.Truncate(time.Second).UnixMilli())
			after := 0
			for _, st := range readProgress(t, h, cfg) {
				after += st.admAfter
			}
			if after == 0 {
				t.Fatal("no admissions records after the checkpoints")
			}
			a.stop()
		}
		time.Sleep(time.Second)
	}
	through := time.Now().Truncate(time.Second).UnixMilli()
	checkPartials(t, h, cfg, admittedEvents(evs, time.Second, time.Hour, 1), through)
	if err := b.failed(); err != nil {
		t.Errorf("bounder failed: %v", err)
	}
}
