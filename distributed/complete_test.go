package distributed_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/partial"
	"github.com/dpstage/stage/release"
)

// Issue 22, item 1: a window is released only with every input partition's
// partial of it; windows the stage was down for come out with their exact
// counts across a switch of mode or of internal topics, never as zeros.

const completeSize, completeLateness = time.Second, 300 * time.Millisecond

// searchView is one view of page "search" (bin 1 of pages) in group 0.
func searchView(user string, at time.Time) e2e.Event {
	return e2e.Event{User: user, At: at, Page: e2e.Pages[1], Country: e2e.Groups[0], Device: e2e.Devices[0]}
}

// releaseOf waits for the release of (pages, group 0, window w) on the
// output topic and returns it.
func releaseOf(t *testing.T, h *e2e.Harness, w time.Time, timeout time.Duration) release.Release {
	t.Helper()
	var got release.Release
	e2e.WaitFor(t, "the release of window "+w.UTC().Format(time.RFC3339), timeout, func() bool {
		out := h.ReadOutput(1, 2*time.Second, time.Second)
		for _, r := range out.Releases {
			if ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart); ws.Equal(w) && r.Histogram == "pages" && r.Group == e2e.Groups[0] {
				got = r
				return true
			}
		}
		return false
	})
	return got
}

// TestSwitchCarriesCounts: a deployment over a Kafka release log is
// stopped for a window in which two users viewed "search", then started
// again differently over the same release log. The window must be
// released exactly, [0 1 0 0 0] (the review's probe released it
// [0.2 0.2 0.2 0.2 0.2] after a switch from the single-process to the
// distributed mode: the bounders started at their wall clock's window and
// the merger released the windows before it without any partition).
//
//   - single to distributed: the bounders, finding no progress, start at
//     the release log's resume window and read the input from its start;
//   - another internal_topic_prefix (the same with another group_id over a
//     pinned state.ledger_topic): likewise, on the new progress topic;
//   - distributed to single, with the window emitted by the bounders but
//     not released (the releaser down): the single-process mode resumes
//     from the earliest offsets, not from the group's offsets that the
//     bounders committed past the window's events.
func TestSwitchCarriesCounts(t *testing.T) {
	t.Parallel() // its own broker and state; waits on the clock (CI time)
	cases := []struct {
		name string
		// a and b make the two deployments' configs from the distributed
		// one; between, when set, runs the bounders alone over a's config
		// while the window's events come.
		a, b    func(*config.Config)
		between bool
	}{
		{name: "single to distributed", a: single},
		{name: "another internal_topic_prefix", a: prefix("a."), b: prefix("b.")},
		{name: "distributed to single with the window emitted not released", b: single, between: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := e2e.New(t)
			h.Watermark = config.WatermarkArrival
			mk := func(f func(*config.Config)) *config.Config {
				cfg := distRunConfig(t, h, completeSize, completeLateness)
				if f != nil {
					f(cfg)
				}
				if err := cfg.Validate(); err != nil {
					t.Fatal(err)
				}
				return cfg
			}
			cfgA, cfgB := mk(tc.a), mk(tc.b)
			if !cfgA.Kafka.Distributed.Enabled {
				ensureLedgerTopic(t, h, cfgA)
			}
			a := h.Start(cfgA)
			e2e.WaitFor(t, "a first release", 30*time.Second, func() bool { return a.Stage.Stats().Releases.Load() > 0 })
			a.Stop(t)

			var bounders *bounderProc
			if tc.between {
				bounders = startBounder(t, cfgA, h)
			}
			w := time.Now().Truncate(completeSize).Add(completeSize)
			e2e.WaitPast(w.Add(50 * time.Millisecond))
			produceKeyed(t, h, []e2e.Event{searchView("u1", w.Add(100*time.Millisecond)), searchView("u2", w.Add(200*time.Millisecond))})
			if bounders != nil {
				e2e.WaitFor(t, "every partition's partial of the window", 20*time.Second, func() bool {
					got := map[int]bool{}
					for _, p := range readPartials(t, h, cfgA) {
						if p.WindowStart == w.UnixMilli() {
							got[p.Partition] = true
						}
					}
					return len(got) == distParts
				})
				time.Sleep(1500 * time.Millisecond) // the informational group commit (every second)
				bounders.stop()
				if err := bounders.failed(); err != nil {
					t.Fatal(err)
				}
			}
			e2e.WaitPast(w.Add(completeSize + completeLateness + 200*time.Millisecond))

			b := h.Start(cfgB)
			got := releaseOf(t, h, w, 30*time.Second)
			e2e.CheckExact(t, e2e.ReleaseKey(got), got, []float64{0, 2, 0, 0, 0}) // u1 and u2, one search each
			if g := b.Stage.Stats().PartialGaps.Load(); g != 0 {
				t.Errorf("%d partial gaps", g)
			}
		})
	}
}

func single(c *config.Config) { c.Kafka.Distributed = config.Distributed{} }

func prefix(p string) func(*config.Config) {
	return func(c *config.Config) { c.Kafka.Distributed.InternalTopicPrefix = p }
}

// ensureLedgerTopic creates the release log's topic (the single-process
// mode does not create it).
func ensureLedgerTopic(t *testing.T, h *e2e.Harness, cfg *config.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Broker.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact"), "retention.ms": kadm.StringPtr("-1")}, cfg.State.LedgerTopic); err != nil {
		t.Fatal(err)
	}
}

// TestDistFreshPartitionStartsAtLogResume: a partition without progress
// starts at the release log's resume window, not at its bounder's wall
// clock (a fresh deployment whose bounders start in a later window than
// the releaser recorded as the first, or after a switch), and says so in
// its partials (First, and no previous window in its first one).
func TestDistFreshPartitionStartsAtLogResume(t *testing.T) {
	h := e2e.New(t)
	cfg := distConfig(t, h) // the log's first window: now's
	first := time.Now().Add(-3 * time.Second).Truncate(time.Second).UnixMilli()
	cfg.State.LedgerTopic = "ledger2-" + h.Name
	seedLedgerMeta(t, h, cfg, first)
	startBounder(t, cfg, h)
	waitStarted(t, h, cfg)
	firsts := map[int]*partial.Partial{}
	for _, p := range readPartials(t, h, cfg) {
		if f, ok := firsts[p.Partition]; !ok || p.WindowStart < f.WindowStart {
			firsts[p.Partition] = p
		}
	}
	for part, p := range firsts {
		if p.WindowStart != first || p.First != first || p.Prev != nil {
			t.Errorf("partition %d: first partial of window %d (first %d, previous %v), want window %d, no previous", part, p.WindowStart, p.First, p.Prev, first)
		}
	}
}

// TestDistPartialsLostHeld: partials of a window with events, emitted
// and not released, are lost — the partials topic's records deleted past
// the release group's committed offset (as retention does while no
// releaser reads), or the topic deleted and created again. The window is
// held, never released without them (the review's probe released
// [5 1 0 4 2] as uniform zeros), and the releaser reports the gap
// (dpstage_partial_gaps, readiness partials_gap) and, where the committed
// offset shows it, the data loss (the broker drops a deleted topic's
// committed offsets, so a recreated topic shows as the gap alone).
func TestDistPartialsLostHeld(t *testing.T) {
	t.Parallel() // its own broker and state; waits on the clock (CI time)
	for _, tc := range []struct {
		name     string
		lose     func(t *testing.T, h *e2e.Harness, topic string)
		dataLoss bool
	}{
		{name: "records deleted past the committed offset", lose: deleteRecords, dataLoss: true},
		{name: "topic recreated", lose: recreateTopic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := e2e.New(t)
			h.Watermark = config.WatermarkArrival
			cfg := distRunConfig(t, h, completeSize, completeLateness)
			a := h.Start(cfg)
			e2e.WaitFor(t, "a first release", 30*time.Second, func() bool { return a.Stage.Stats().Releases.Load() > 0 })
			e2e.WaitFor(t, "a partials offset commit", 10*time.Second, func() bool { return a.Stage.Stats().Commits.Load() > 0 })
			a.Stop(t)

			// The bounders alone emit the window with events; then its
			// partials are lost.
			bounders := startBounder(t, cfg, h)
			w := time.Now().Truncate(completeSize).Add(completeSize)
			e2e.WaitPast(w.Add(50 * time.Millisecond))
			produceKeyed(t, h, []e2e.Event{searchView("u1", w.Add(100*time.Millisecond))})
			e2e.WaitFor(t, "every partition's partial of the window", 20*time.Second, func() bool {
				n := 0
				for _, p := range readPartials(t, h, cfg) {
					if p.WindowStart == w.UnixMilli() {
						n++
					}
				}
				return n == distParts
			})
			bounders.stop()
			tc.lose(t, h, cfg.Kafka.PartialsTopic())

			b := h.Start(cfg)
			st := b.Stage.Stats()
			e2e.WaitFor(t, "the gap reported", 30*time.Second, func() bool { return st.PartialGaps.Load() == distParts })
			rd := b.Stage.Readiness()
			if !rd.PartialsGap || rd.Ready() {
				t.Errorf("readiness %+v: want partials_gap, not ready", rd)
			}
			if n := st.PartialsDataLoss.Load(); tc.dataLoss && (n != 1 || !rd.PartialsLost) {
				t.Errorf("data losses reported: %d, readiness %+v; want 1, partials_lost", n, rd)
			}
			// The releaser has looked at the window and held it; a
			// release of it would have come in that same pass.
			time.Sleep(completeSize / 2)
			out := h.ReadOutput(1, 2*time.Second, time.Second)
			for _, r := range out.Releases {
				if ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart); !ws.Before(w) {
					t.Fatalf("window %s released after its partials were lost: %v", r.WindowStart, r.Probabilities)
				}
			}
		})
	}
}

func admin(t *testing.T, h *e2e.Harness) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Broker.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// deleteRecords deletes every record of topic's partition 0 (as
// retention does).
func deleteRecords(t *testing.T, h *e2e.Harness, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := admin(t, h)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	var o kadm.Offsets
	o.AddOffset(topic, 0, end.Offset, -1)
	rs, err := adm.DeleteRecords(ctx, o)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// recreateTopic deletes topic and creates it again (1 partition).
func recreateTopic(t *testing.T, h *e2e.Harness, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := admin(t, h)
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	e2e.WaitFor(t, "the topic deleted", 10*time.Second, func() bool {
		ts, err := adm.ListTopics(ctx, topic)
		d, ok := ts[topic]
		return err == nil && (!ok || d.Err != nil)
	})
	if _, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("delete")}, topic); err != nil {
		t.Fatal(err)
	}
}
