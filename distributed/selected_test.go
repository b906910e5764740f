package distributed_test

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/release"
)

// TestFeatureSelectedGroups (issue 30): the pages histogram grouped by
// country with no listed groups selects its groups privately. One window's
// stream has countries of 30, 20 and 10 users and two of one user each,
// the users spread over the 4 input partitions (so in the distributed mode
// every country's users are counted by several bounders and summed by the
// releaser). Near-noiseless (ε = 10⁷: the selection's σ below 0.2, so a
// key at or above the threshold T fails, or one below it passes, with
// probability under 10⁻⁵ each), both modes release exactly the countries
// whose distinct users reach the published threshold, each with its
// exact bounded counts, and the same groups_selected status; the two
// modes' releases are the same.
func TestFeatureSelectedGroups(t *testing.T) {
	// KR has one user in each input partition: selected only on the
	// distinct users summed over the bounders.
	sizes := map[string]int{"SE": 30, "JP": 20, "BR": 10, "KR": distParts, "XX": 1, "YY": 1}
	type result struct {
		groups []string
		probs  map[string][]float64
	}
	var mu sync.Mutex // guards results
	results := map[string]result{}
	t.Run("modes", func(t *testing.T) {
		for _, mode := range featureModes {
			t.Run(mode.name, func(t *testing.T) {
				t.Parallel()
				h := e2e.New(t)
				h.Watermark = config.WatermarkArrival
				cfg := featureConfig(t, h, mode.distributed, func(c *config.Config) { c.Histograms[0].Groups = nil })
				startFeature(t, h, cfg)
				w := nextWindow(featSize)
				var evs []e2e.Event
				for _, c := range []string{"SE", "JP", "BR", "KR", "XX", "YY"} {
					for i, u := range selUsers(c, sizes[c]) {
						evs = append(evs, e2e.Event{User: u, At: w.Add(50*time.Millisecond + time.Duration(len(evs))*time.Millisecond),
							Page: e2e.Pages[(i*7+len(c))%len(e2e.Pages)], Country: c, Device: e2e.Devices[i%2]})
					}
				}
				spread := 0
				for _, pe := range byPartition(evs) {
					if len(pe) > 0 {
						spread++
					}
				}
				if spread < 3 {
					t.Fatalf("the users are in %d input partitions: the test would not merge keys across bounders", spread)
				}
				produceKeyed(t, h, evs)
				e2e.WaitPast(w.Add(featSize + featLateness + 500*time.Millisecond))
				var st *release.Status
				e2e.WaitFor(t, "the window's groups_selected status", 60*time.Second, func() bool {
					for _, s := range h.ReadOutput(1, 2*time.Second, 500*time.Millisecond).Statuses {
						if s.Status == release.StatusGroupsSelected && s.Histogram == "pages" && s.WindowStart == release.RFC3339(w.UnixMilli()) {
							st = &s
							return true
						}
					}
					return false
				})
				sel := st.Selection
				if sel == nil || sel.Sigma >= 0.2 {
					t.Fatalf("selection %+v: not near-noiseless", sel)
				}
				var want []string
				for c, n := range sizes {
					if int64(n) >= sel.Threshold {
						want = append(want, c)
					}
				}
				slices.Sort(want)
				if sel.Threshold < 2 || sel.Threshold > distParts {
					t.Fatalf("threshold %d: the stream does not tell one user from KR's %d users over %d partitions", sel.Threshold, distParts, distParts)
				}
				t.Logf("threshold %d (σ %.3g): %v selected", sel.Threshold, sel.Sigma, want)
				got := slices.Sorted(slices.Values(st.Groups))
				if !slices.Equal(got, want) {
					t.Fatalf("groups selected %v, want %v (threshold %d)", got, want, sel.Threshold)
				}
				keys := []string{e2e.Key("devices", "*", w)}
				for _, g := range want {
					keys = append(keys, e2e.Key("pages", g, w))
				}
				rel := releasesOf(t, h, keys)
				tr := e2e.ComputeTruthIn(evs, featSize, 1, 1, 0) // devices; its pages are the listed groups': counted here
				for _, e := range evs {                          // one event a user: every event counts
					k := e2e.Key("pages", e.Country, w)
					if tr[k] == nil {
						tr[k] = make([]float64, len(e2e.Pages))
					}
					tr[k][slices.Index(e2e.Pages, e.Page)]++
				}
				probs := map[string][]float64{}
				for _, k := range keys {
					e2e.CheckExact(t, k, rel[k], tr[k])
					probs[k[:len(k)-len(fmt.Sprint(w.UnixMilli()))]] = rel[k].Probabilities
				}
				for k, r := range rel {
					if r.Histogram == "pages" && !slices.Contains(want, r.Group) {
						t.Errorf("released %s: a group not selected", k)
					}
				}
				mu.Lock()
				results[mode.name] = result{groups: got, probs: probs}
				mu.Unlock()
			})
		}
	})
	s, d := results["single"], results["distributed"]
	if s.probs == nil || d.probs == nil {
		t.Fatal("a mode gave no result")
	}
	if !slices.Equal(s.groups, d.groups) || len(s.probs) != len(d.probs) {
		t.Fatalf("single-process mode selected %v, distributed %v", s.groups, d.groups)
	}
	for k, p := range s.probs {
		q := d.probs[k]
		for i := range p {
			if len(q) != len(p) || math.Abs(p[i]-q[i]) > 1e-12 {
				t.Errorf("%s: single-process mode released %v, distributed %v", k, p, q)
				break
			}
		}
	}
}

// selUsers are n users of country c; KR's (n = distParts) are one in each
// input partition.
func selUsers(c string, n int) []string {
	var out []string
	seen := map[int]bool{}
	for i := 0; len(out) < n; i++ {
		u := fmt.Sprintf("sel-%s-%d", c, i)
		if c == "KR" {
			p := e2e.Murmur2Partition(u, distParts)
			if seen[p] {
				continue
			}
			seen[p] = true
		}
		out = append(out, u)
	}
	return out
}
