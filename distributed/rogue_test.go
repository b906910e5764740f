package distributed

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/partial"
)

// TestDistReleaserSkipsRoguePartials (issue 28 item 3): a partial that
// decodes and has the config's shape but carries values no bounder makes
// is skipped like a malformed record, counted by reason, and the windows
// come out exact from the partitions' own partials, the committed offset
// passing it. One rogue partial per case:
//
//   - a negative count (stopped every releaser in turn: the mechanism
//     refused the merged count, and each next releaser read it again);
//   - a count above what its users allow (max_tracked_users ×
//     max_events_per_user: 1,000,000 here — the distributed mode has no
//     cap by default, so there is no such bound without one);
//   - a window start off the window grid (stayed pending for good and
//     froze the committed offset before it).
func TestDistReleaserSkipsRoguePartials(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason partial.Reason
		rogue  func(e *distEnv) *partial.Partial
	}{
		{"negative count", partial.ReasonCount, func(e *distEnv) *partial.Partial {
			return e.partialOf(0, 0, cells{0: {0: {3, -5, 0, 0, 0}}})
		}},
		{"count above its users' bound", partial.ReasonCount, func(e *distEnv) *partial.Partial {
			return e.partialOf(0, 1, cells{1: {0: {6e5, 6e5}}})
		}},
		{"window off the grid", partial.ReasonGrid, func(e *distEnv) *partial.Partial {
			p := e.partialOf(0, 1, cells{0: {0: {1, 0, 0, 0, 0}}})
			p.WindowStart += 30_000
			p.Next += 30_000
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newDistEnv(t, 2)
			e.cfg.Contribution.MaxTrackedUsers = 1_000_000
			r := e.start(t)
			tr := truth{}
			e.write(t, "test-bound/rogue", true, tc.rogue(e))
			for w := range 2 {
				for p := range e.n {
					e.emit(t, tr, w, p)
				}
			}
			out := e.readOut(t, 2*unitsPerWindow, 30*time.Second, time.Second)
			for k, rl := range checkOnce(t, out, 2) {
				checkExact(t, rl, tr[k])
			}
			if n := r.s.Stats.Partials[partial.Foreign].Load(); n != 1 {
				t.Errorf("%d partials counted foreign (skipped), want 1", n)
			}
			if n := r.s.Stats.PartialsMalformed[tc.reason].Load(); n != 1 {
				t.Errorf("%d partials skipped for reason %s, want 1", n, tc.reason)
			}
			checkCommittedToEnd(t, e)
			if err := r.stop(t); err != nil {
				t.Errorf("releaser stopped with %v", err)
			}
		})
	}
}

// checkCommittedToEnd checks that the release group's committed offset
// reaches the partials topic's end (past its last record, and its
// transaction's commit marker) within 10 s.
func checkCommittedToEnd(t *testing.T, e *distEnv) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, e.cfg.Kafka.PartialsTopic())
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(e.cfg.Kafka.PartialsTopic(), 0)
	waitFor(t, "the partials offset committed past the last partial", 10*time.Second, func() bool {
		offs, err := adm.FetchOffsets(ctx, e.cfg.Kafka.ReleaseGroupID())
		if err != nil {
			t.Fatal(err)
		}
		o, _ := offs.Lookup(e.cfg.Kafka.PartialsTopic(), 0)
		return o.At == end.Offset-1
	})
}

// produceRaw writes records to the partials topic's partition 0, outside
// any transaction (a writer that is no bounder).
func (e *distEnv) produceRaw(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.b.Addr()), kgo.DefaultProduceTopic(e.cfg.Kafka.PartialsTopic()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
