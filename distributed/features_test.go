package distributed_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/release"
)

// Issue 22 item 3: every feature on N replicas. Each test runs the same
// stream and assertions in the single-process and the distributed mode
// (two stages sharing the input's partitions), over a Kafka release log,
// the two modes in parallel (each on its own broker: the tests wait on
// the wall clock, not the CPU),
// with 1 s windows on the wall clock (watermark arrival) and the
// near-noiseless Gaussian (exact counts).

const featSize, featLateness = time.Second, 300 * time.Millisecond

// featureModes are the modes a feature test runs in.
var featureModes = []struct {
	name        string
	distributed bool
}{{"single", false}, {"distributed", true}}

// featureConfig is distRunConfig in the given mode, mutated by f, and
// validated.
func featureConfig(t *testing.T, h *e2e.Harness, distributed bool, f func(*config.Config)) *config.Config {
	t.Helper()
	cfg := distRunConfig(t, h, featSize, featLateness)
	if !distributed {
		single(cfg)
	}
	if f != nil {
		f(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if !distributed {
		ensureLedgerTopic(t, h, cfg)
	}
	return cfg
}

// startFeature starts the mode's stages (two in the distributed mode) and
// waits for their groups to settle.
func startFeature(t *testing.T, h *e2e.Harness, cfg *config.Config) []*e2e.Running {
	t.Helper()
	rs := []*e2e.Running{h.Start(cfg)}
	if cfg.Kafka.Distributed.Enabled {
		rs = append(rs, h.Start(cfg))
	}
	time.Sleep(2 * time.Second) // the groups settle
	return rs
}

// nextWindow waits until the next window (of size) starts and returns its
// start.
func nextWindow(size time.Duration) time.Time {
	at := time.Now().Truncate(size).Add(size)
	e2e.WaitPast(at.Add(50 * time.Millisecond))
	return at
}

// releasesOf reads the output until every release of keys came (60 s at
// most) and indexes the releases by e2e.ReleaseKey; a release published
// twice with other values fails.
func releasesOf(t *testing.T, h *e2e.Harness, keys []string) map[string]release.Release {
	t.Helper()
	got := map[string]release.Release{}
	e2e.WaitFor(t, "the window's releases", 60*time.Second, func() bool {
		out := h.ReadOutput(1, 2*time.Second, 500*time.Millisecond)
		for _, r := range out.Releases {
			got[e2e.ReleaseKey(r)] = r
		}
		for id, copies := range out.Raw {
			for _, c := range copies[1:] {
				if c != copies[0] {
					t.Errorf("release %s republished with different values", id)
				}
			}
		}
		for _, k := range keys {
			if _, ok := got[k]; !ok {
				return false
			}
		}
		return true
	})
	return got
}

// windowKeys are the release keys of the harness's pages and devices
// histograms in window w.
func windowKeys(w time.Time) []string {
	ks := []string{e2e.Key("devices", "*", w)}
	for _, g := range e2e.Groups {
		ks = append(ks, e2e.Key("pages", g, w))
	}
	return ks
}

// byPartition splits evs by their user's input partition (murmur2 over
// distParts, as produceKeyed writes them).
func byPartition(evs []e2e.Event) [][]e2e.Event {
	out := make([][]e2e.Event, distParts)
	for _, e := range evs {
		p := e2e.Murmur2Partition(e.User, distParts)
		out[p] = append(out[p], e)
	}
	return out
}

// addTruth adds b's counts into a.
func addTruth(a, b e2e.Truth) {
	for k, v := range b {
		if a[k] == nil {
			a[k] = make([]float64, len(v))
		}
		for i, x := range v {
			a[k][i] += x
		}
	}
}

// TestFeatureTrackedUsersCap: contribution.max_tracked_users = 4 over a
// window of 60 users. The single-process mode tracks the window's 4
// smallest keyed user hashes; the distributed mode caps each input
// partition's bounder (plan/distcap.go): the 4 smallest of each
// partition's users. Every release of the window is exactly that bounded
// count, and the cap binds (the uncapped counts differ).
func TestFeatureTrackedUsersCap(t *testing.T) {
	const capUsers = 4
	for _, mode := range featureModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			h := e2e.New(t)
			h.Watermark = config.WatermarkArrival
			cfg := featureConfig(t, h, mode.distributed, func(c *config.Config) { c.Contribution.MaxTrackedUsers = capUsers })
			startFeature(t, h, cfg)
			w := nextWindow(featSize)
			evs := e2e.StreamFrom(w.Add(50*time.Millisecond), featSize/2, 1, 60)
			produceKeyed(t, h, evs)
			tr := e2e.Truth{}
			if mode.distributed {
				for _, pe := range byPartition(evs) {
					addTruth(tr, e2e.ComputeTruthIn(pe, featSize, 1, 1, capUsers))
				}
			} else {
				tr = e2e.ComputeTruthIn(evs, featSize, 1, 1, capUsers)
			}
			free := e2e.ComputeTruthIn(evs, featSize, 1, 1, 0)
			e2e.WaitPast(w.Add(featSize + featLateness + 500*time.Millisecond))
			got := releasesOf(t, h, windowKeys(w))
			binds := false
			for _, k := range windowKeys(w) {
				e2e.CheckExact(t, k, got[k], tr[k])
				if sum(tr[k]) != sum(free[k]) {
					binds = true
				}
			}
			if !binds {
				t.Fatal("the cap does not bind on this stream: the test could not tell")
			}
		})
	}
}

func sum(v []float64) (n float64) {
	for _, x := range v {
		n += x
	}
	return n
}

// TestFeatureHistogramWindow: a 4-second histogram of its own
// (histograms[].window) beside the 1-second base windows, counted with
// max_events_per_user 1 per its own window (the stream's users come back
// in several base windows of one long window, so the long bound binds).
// Events come in four base windows from a long window's start; in the
// third, after the second was emitted and released, one stage stops (single: a new one starts; distributed: the
// other stage takes its partitions over, and perhaps the release log),
// while the long window is open. Every base and long window is released
// once, exactly its bounded counts: the new owners re-read the open long
// window's earlier events and count them into it only.
func TestFeatureHistogramWindow(t *testing.T) {
	const base, long = time.Second, 4 * time.Second
	for _, mode := range featureModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			h := e2e.New(t)
			h.Watermark = config.WatermarkArrival
			cfg := featureConfig(t, h, mode.distributed, func(c *config.Config) {
				c.Window.Size = config.Duration(base)
				c.Window.AllowedLateness = config.Duration(completeLateness)
				for _, hc := range c.Histograms {
					if hc.Name == "devices" {
						hc.Name, hc.Window = "devices4", config.Duration(long)
						c.Histograms = append(c.Histograms, hc)
						break
					}
				}
			})
			stages := startFeature(t, h, cfg)
			var evs []e2e.Event
			w0 := nextWindow(long)
			var last time.Time
			for i := range 4 {
				b := w0
				if i > 0 {
					b = nextWindow(base)
				}
				batch := e2e.StreamFrom(b.Add(50*time.Millisecond), base/2, 1, 24)
				for j := range batch {
					// Every batch's users come back in every later batch
					// (from the third on, on the other device); a quarter
					// come only once. So any two batches in one long
					// window make its bound bind, wherever a loaded
					// machine's delays put them (a batch produced late
					// lands in a later base window, perhaps the next
					// long one).
					if j%4 == 0 {
						batch[j].User = fmt.Sprintf("once-%d-%d", i, j)
					}
					if i >= 2 {
						batch[j].Device = e2e.Devices[1-slices.Index(e2e.Devices[:2], batch[j].Device)]
					}
				}
				produceKeyed(t, h, batch)
				evs, last = append(evs, batch...), b
				if i == 2 {
					// Base window 1 emitted (released), the long window
					// open: the stage stops.
					e2e.WaitPast(b.Add(completeLateness + 400*time.Millisecond))
					stages[0].Cancel()
					if !mode.distributed {
						stages = append(stages, h.Start(cfg))
					}
				}
			}
			e2e.WaitPast(last.Add(base + completeLateness + 200*time.Millisecond))
			tr := e2e.ComputeTruthIn(evs, base, 1, 1, 0)
			trLong := e2e.ComputeTruthIn(evs, long, 1, 1, 0)
			var keys []string
			binds := false
			for b := w0; !b.After(last); b = b.Add(base) {
				keys = append(keys, windowKeys(b)...)
			}
			for lw := w0; !lw.After(last); lw = lw.Add(long) {
				k := e2e.Key("devices", "*", lw)
				tr[e2e.Key("devices4", "*", lw)] = trLong[k]
				keys = append(keys, e2e.Key("devices4", "*", lw))
				var perBase float64
				for b := lw; b.Before(lw.Add(long)); b = b.Add(base) {
					perBase += sum(tr[e2e.Key("devices", "*", b)])
				}
				if sum(trLong[k]) < perBase {
					binds = true
				}
			}
			if !binds {
				t.Fatalf("the long bound binds in no long window from %s to %s: the test could not tell", w0, last)
			}
			got := releasesOf(t, h, keys)
			for _, k := range keys {
				e2e.CheckExact(t, k, got[k], tr[k])
			}
			for lw := w0; !lw.After(last); lw = lw.Add(long) {
				r := got[e2e.Key("devices4", "*", lw)]
				if we, err := time.Parse(time.RFC3339Nano, r.WindowEnd); err != nil || !we.Equal(lw.Add(long)) {
					t.Errorf("devices4 release [%s, %s), want [%s, %s)", r.WindowStart, r.WindowEnd, lw.UTC().Format(time.RFC3339), lw.Add(long).UTC().Format(time.RFC3339))
				}
			}
		})
	}
}

// averageFeatureConfig is featureConfig with the average histogram
// "interests" (users 10, k 10⁶, η 0.001) next to the harness's, and ε
// 10¹² (near-noiseless counts and averages; 1 s windows).
func averageFeatureConfig(t *testing.T, h *e2e.Harness, distributed bool) *config.Config {
	t.Helper()
	withAvg := h.ConfigExtra("mechanism: gaussian", 1e12, strings.Replace(e2e.AverageHist, "users: 50", "users: 10", 1))
	return featureConfig(t, h, distributed, func(c *config.Config) {
		c.Histograms = withAvg.Histograms
		c.Privacy = withAvg.Privacy
	})
}

// produceMessagesKeyed writes msgs keyed by user with Kafka's default
// partitioner (murmur2), as produceKeyed does.
func produceMessagesKeyed(t *testing.T, h *e2e.Harness, msgs []kafka.Message) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(h.Broker.Addr()), Topic: h.Input(), Balancer: kafka.Murmur2Balancer{Consistent: true},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 10000}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// TestFeatureAverage: an average histogram (users 10) over a window of 40
// users spread over the 4 input partitions, user i sending the vertex
// e_{i mod 3} (user 0 twice, e₀ then e₁: averaged into one vector). The
// release is the padded average of the 10 smallest keyed user hashes of
// the whole window — in the distributed mode too, where each partition
// keeps its own 10 and the releaser the 10 smallest of their union — within
// the simplex mechanism's 6σ + 1/Q per coordinate (as
// TestEndToEndAverage). A second window with 4 users (6 padding copies)
// is released too. A per-partition
// selection, or a mean that ignored some partition, is off by ≥ 0.1.
func TestFeatureAverage(t *testing.T) {
	const nPub, eta, k = 10, 0.001, 1e6
	for _, mode := range featureModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			h := e2e.New(t)
			h.Watermark = config.WatermarkArrival
			cfg := averageFeatureConfig(t, h, mode.distributed)
			startFeature(t, h, cfg)
			vertex := func(i int) []float64 {
				v := make([]float64, 3)
				v[i%3] = 1
				return v
			}
			type uv struct {
				hash uint64
				vec  []float64
			}
			want := map[time.Time][]float64{}
			var windows []time.Time
			for wi, n := range []int{40, 4} {
				w := nextWindow(featSize)
				windows = append(windows, w)
				var msgs []kafka.Message
				var us []uv
				for i := range n {
					user := fmt.Sprintf("avg-%d-%d", wi, i)
					at := w.Add(50*time.Millisecond + time.Duration(i)*5*time.Millisecond)
					msgs = append(msgs, e2e.VectorEvent(user, at, vertex(i)))
					vec := vertex(i)
					if i == 0 {
						msgs = append(msgs, e2e.VectorEvent(user, at.Add(time.Millisecond), vertex(1)))
						vec = []float64{0.5, 0.5, 0}
					}
					us = append(us, uv{e2e.TestKey.String(user), vec})
				}
				if len(msgs) > 0 {
					produceMessagesKeyed(t, h, msgs)
				}
				slices.SortFunc(us, func(a, b uv) int { return cmp.Compare(a.hash, b.hash) })
				us = us[:min(len(us), nPub)]
				pbar := make([]float64, 3)
				for _, u := range us {
					for j, x := range u.vec {
						pbar[j] += x / nPub
					}
				}
				for j := range pbar {
					pbar[j] += float64(nPub-len(us)) / 3 / nPub
				}
				want[w] = pbar
			}
			e2e.WaitPast(windows[len(windows)-1].Add(featSize + featLateness + 200*time.Millisecond))
			var keys []string
			for _, w := range windows {
				keys = append(keys, e2e.Key("interests", config.ImplicitGroup, w))
			}
			got := releasesOf(t, h, keys)
			for _, w := range windows {
				r := got[e2e.Key("interests", config.ImplicitGroup, w)]
				// An average release carries its window's coverage in the
				// distributed mode, as the count releases do, and none in
				// the single-process mode.
				if mode.distributed && (r.Coverage == nil || r.Coverage.Included != r.Coverage.Partitions || r.Coverage.Partitions < 2) {
					t.Errorf("window %s: average release coverage %+v, want every partition", w.Format(time.RFC3339), r.Coverage)
				} else if !mode.distributed && r.Coverage != nil {
					t.Errorf("window %s: single-process average release with coverage %+v", w.Format(time.RFC3339), r.Coverage)
				}
				for i, x := range r.Probabilities {
					p := (1-3*eta)*want[w][i] + eta
					sd := math.Sqrt(p * (1 - p) / (k + 1))
					if tol := 6*sd + 1/float64(r.Params.Grid); math.Abs(x-p) > tol {
						t.Errorf("window %s %s: released %.6f, mean %.6f (p̄ %.6f), more than 6σ + 1/Q = %.2g away",
							w.Format(time.RFC3339), e2e.Interests[i], x, p, want[w][i], tol)
					}
				}
			}
		})
	}
}
