package distributed_test

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

// waitEmitted waits until every input partition emitted the window of at.
func waitEmitted(t *testing.T, h *e2e.Harness, cfg *config.Config, what string, at time.Time) {
	t.Helper()
	w := at.Truncate(cfg.Window.Size.D()).UnixMilli()
	e2e.WaitFor(t, what, 20*time.Second, func() bool {
		got := map[int]bool{}
		for _, p := range readPartials(t, h, cfg) {
			if p.WindowStart >= w {
				got[p.Partition] = true
			}
		}
		return len(got) == distParts
	})
}

// checkCheckpoints checks that every progress partition has a checkpoint
// of the cross-window bound and that its Progress points at it.
func checkCheckpoints(t *testing.T, h *e2e.Harness, cfg *config.Config) {
	t.Helper()
	got := readProgress(t, h, cfg)
	if len(got) != distParts {
		t.Fatalf("%d progress partitions written, want %d", len(got), distParts)
	}
	for p, st := range got {
		if st.snapAt < 0 || st.progress == nil || st.progress.Snap == nil || *st.progress.Snap != st.snapAt {
			t.Fatalf("progress partition %d: checkpoint at %d, progress %+v: want a checkpoint the progress points at", p, st.snapAt, st.progress)
		}
	}
}

// admissionsAfterCheckpoints counts the admissions records present after
// the checkpoints, over every progress partition.
func admissionsAfterCheckpoints(t *testing.T, h *e2e.Harness, cfg *config.Config) int {
	t.Helper()
	n := 0
	for _, st := range readProgress(t, h, cfg) {
		n += st.admAfter
	}
	return n
}
