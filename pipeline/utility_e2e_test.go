package pipeline_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/plan"
)

// The utility scenario of issue #13: 10,000 users per group per window,
// 3 groups, 5 bins, every user active in 4 consecutive windows, ε = 1 per
// user per day, δ = 10⁻⁶, replace, 1-minute windows, at most 5 windows
// per user per day. The accounting is the day's (period 24h: 1,440
// windows); the test runs the first utilityWindows of them.
const (
	utilityUsersPerGroup = 10_000
	utilityWindows       = 16
	utilityShift         = utilityUsersPerGroup / 4 // a user is in 4 consecutive windows
)

// utilityShares are the groups' true bin distributions (skewed, different
// per group).
var utilityShares = [][]float64{
	{0.40, 0.25, 0.15, 0.12, 0.08},
	{0.10, 0.30, 0.30, 0.20, 0.10},
	{0.05, 0.05, 0.10, 0.30, 0.50},
}

// utilityEvents is the scenario's stream: in window w, group g's users are
// g-u for u in [w·shift, w·shift + usersPerGroup), one event each, its bin
// drawn from the group's shares (seeded).
func utilityEvents() []e2e.Event {
	r := rand.New(rand.NewPCG(13, 13))
	var evs []e2e.Event
	for w := 0; w < utilityWindows; w++ {
		start := e2e.Base.Add(time.Duration(w) * time.Minute)
		for g, group := range e2e.Groups {
			for u := w * utilityShift; u < w*utilityShift+utilityUsersPerGroup; u++ {
				x, b := r.Float64(), 0
				for b < len(e2e.Pages)-1 && x >= utilityShares[g][b] {
					x -= utilityShares[g][b]
					b++
				}
				evs = append(evs, e2e.Event{User: fmt.Sprintf("%s-%d", group, u), At: start.Add(time.Duration(r.IntN(60_000)) * time.Millisecond),
					Page: e2e.Pages[b], Country: group, Device: "mobile"})
			}
		}
	}
	return evs
}

func utilityConfig(t *testing.T, h *e2e.Harness, privacy string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
kafka:
  brokers: [%q]
  group_id: g-%s
  input_topic: %s
  output_topic: %s
events:
  time_field: ts
  user_field: user_id
window:
  size: 1m
  watermark: event
  allowed_lateness: 0s
  idle_partition_timeout: 500ms
  start: 2026-01-01T00:00:00Z
histograms:
  - name: pages
    field: page
    bins: [%s]
    group_by: country
    groups: [US, DE, FR]
contribution:
  max_events_per_user: 1
  max_groups_per_user: 1
  max_windows_per_user: 5
privacy:
  %s
  expected_events_per_release: 10000
  neighbour: replace
  budget:
    epsilon: 1
    delta: 1.0e-6
    period: 24h
state:
  dir: %q
log:
  level: warn
`, h.Broker.Addr(), h.Name, h.Input(), h.Output(), e2e.PagesBins, privacy, h.Dir)
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// TestUsefulReleasesAtOnePerDay is issue #13's acceptance test, end to end
// through the embedded broker: the planned ℓ2 error of a release is at most
// 0.02 with the optimal Dirichlet calibration and at most 0.01 with the
// Gaussian mechanism, and the releases' measured mean ℓ2 error against the
// true bounded histograms agrees with the plan.
//
// The plan's figure (plan.ExpectedL2, checked against the mechanism in
// plan's tests) is the root-mean-square ℓ2 error of one release over a flat
// prior: for these skewed shares the expected ℓ2 is below it (Jensen, and
// the bias α(1 − d·pᵢ)/(rN + dα) is smaller). Since the private totals took
// privacy.total_share (0.1) of the budget the optimal calibration plans
// 0.0198, and the measured mean (0.0166–0.0188 over six runs, one CI run
// 0.0205) has a standard error of 0.001–0.0012 (the earlier comment's
// 0.0006 was wrong): measured against 0.02 the test failed a CI run. The
// bound on the measured mean is the plan's figure plus 4
// standard errors of the mean, estimated from the releases' own ℓ2 values
// (one-sided false-failure rate about 3·10⁻⁵ per subtest for independent
// releases), and 0.02 is required of the plan, which is deterministic.
func TestUsefulReleasesAtOnePerDay(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("240,000 events per mechanism")
	}
	evs := utilityEvents()
	truth := e2e.ComputeTruth(evs) // one event per user and window, one group per user: nothing is bounded away
	for _, tc := range []struct {
		name, privacy string
		bound         float64
	}{
		{"optimal", "mechanism: dirichlet\n  calibration: optimal", 0.02},
		{"gaussian", "mechanism: gaussian", 0.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := e2e.New(t)
			cfg := utilityConfig(t, h, tc.privacy)
			p, err := plan.DerivePlan(cfg)
			if err != nil {
				if strings.Contains(err.Error(), "not accounted by this build yet") {
					t.Skipf("the cross-window bound is not accounted yet: %v", err)
				}
				t.Fatal(err)
			}
			u := plan.Utilities(cfg, p)[0]
			t.Logf("plan: %d units per period, expected ℓ2 %.4g (uniform %.3g)", p.Count.Units, u.L2, u.UniformL2)
			h.ProduceEvents(evs)
			run := h.Start(cfg)
			h.Produce(e2e.Flush(e2e.Base.Add(utilityWindows*time.Minute + time.Second)))
			want := utilityWindows * len(e2e.Groups)
			out := h.ReadOutput(want, 120*time.Second, 0)
			run.Stop(t)
			if len(out.Releases) != want {
				t.Fatalf("got %d releases, want %d", len(out.Releases), want)
			}
			if !(u.L2 <= tc.bound) {
				t.Errorf("%s: planned ℓ2 %.4g, want ≤ %g", tc.name, u.L2, tc.bound)
			}
			var sum, sumSq float64
			for _, r := range out.Releases {
				counts := truth[e2e.ReleaseKey(r)]
				var n float64
				for _, c := range counts {
					n += c
				}
				if n < 0.99*utilityUsersPerGroup {
					t.Fatalf("%s: truth has %v events, want %d", e2e.ReleaseKey(r), n, utilityUsersPerGroup)
				}
				var l2 float64
				for i, c := range counts {
					d := r.Probabilities[i] - c/n
					l2 += d * d
				}
				sum += math.Sqrt(l2)
				sumSq += l2
			}
			n := float64(len(out.Releases))
			mean := sum / n
			se := math.Sqrt(math.Max(0, sumSq/n-mean*mean) / (n - 1))
			limit := u.L2 + 4*se
			t.Logf("%s: mean ℓ2 error %.4g ± %.2g (s.e.) over %d releases; planned %.4g, limit %.4g (acceptance %g)", tc.name, mean, se, len(out.Releases), u.L2, limit, tc.bound)
			if !(mean <= limit) {
				t.Errorf("%s: mean ℓ2 error %.4g, above the planned %.4g + 4 s.e. = %.4g", tc.name, mean, u.L2, limit)
			}
		})
	}
}
