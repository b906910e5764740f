package plan_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
)

// utilityConfig is a one-histogram config over d bins.
func utilityConfig(t *testing.T, d int, privacy string, epsilon float64, size string, n float64) *config.Config {
	t.Helper()
	bins := make([]string, d)
	for i := range bins {
		bins[i] = fmt.Sprintf("b%d", i)
	}
	planning := ""
	if n > 0 {
		planning = fmt.Sprintf("\n  expected_events_per_release: %g", n)
	}
	y := fmt.Sprintf(`
kafka: {brokers: ["localhost:9092"]}
window: {size: %s}
histograms:
  - {name: pages, field: page, bins: [%s]}
privacy:
  %s%s
  neighbour: replace
  budget: {epsilon: %g, delta: 1.0e-6, period: 24h}
`, size, strings.Join(bins, ", "), privacy, planning, epsilon)
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// TestExpectedL2MatchesTheMechanism checks the error model against the
// stage's own releases: histograms p drawn from the flat prior, counts
// x = round(N·p), one release each, the mean squared ℓ2 error against x/Σx.
// With 3000 draws the Monte Carlo mean has a relative standard error of
// about 3% here (squared errors are roughly χ²-shaped with ≥ 4 degrees of
// freedom: sd/mean ≤ 0.71/√4 per draw, /√3000); the 15% tolerance is more
// than 5 standard errors, a false failure rate below 10⁻⁶. A model off by
// a factor √2 in ℓ2 (2 in the squared error) fails every case.
func TestExpectedL2MatchesTheMechanism(t *testing.T) {
	cases := []struct {
		name    string
		privacy string
		epsilon float64
		size    string
		d       int
		n       float64
	}{
		{"dirichlet concentrated 1h", "mechanism: dirichlet\n  calibration: concentrated", 1, "1h", 5, 10000},
		{"dirichlet diffuse 1h", "mechanism: dirichlet\n  calibration: diffuse", 1, "1h", 5, 10000},
		{"dirichlet optimal 1h", "mechanism: dirichlet\n  calibration: optimal", 1, "1h", 5, 10000},
		{"dirichlet concentrated 1m", "mechanism: dirichlet\n  calibration: concentrated", 1, "1m", 5, 10000},
		{"dirichlet optimal 8 bins", "mechanism: dirichlet\n  calibration: optimal", 10, "1h", 8, 2000},
		{"gaussian", "mechanism: gaussian", 1, "1h", 5, 10000},
		{"gaussian 8 bins", "mechanism: gaussian", 10, "1h", 8, 2000},
		{"laplace", "mechanism: laplace", 1, "1h", 5, 10000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.n
			if !strings.Contains(tc.privacy, "optimal") {
				n = 0 // the planning figure would switch the default calibration; the model is evaluated at tc.n below
			}
			cfg := utilityConfig(t, tc.d, tc.privacy, tc.epsilon, tc.size, n)
			p, err := plan.DerivePlan(cfg)
			if err != nil {
				t.Fatal(err)
			}
			m := p.Count.Mechanism
			model := plan.ExpectedL2(m, tc.d, tc.n)
			rng := mechanism.NewSeededRand([32]byte{7})
			pr := rand.New(rand.NewPCG(3, 4))
			const draws = 3000
			var sum float64
			counts, out, prob := make([]float64, tc.d), make([]float64, tc.d), make([]float64, tc.d)
			for k := 0; k < draws; k++ {
				// Flat prior on the simplex: normalized exponentials.
				var s float64
				for i := range prob {
					prob[i] = pr.ExpFloat64()
					s += prob[i]
				}
				var total float64
				for i := range counts {
					counts[i] = math.Round(tc.n * prob[i] / s)
					total += counts[i]
				}
				if err := m.Release(rng, counts, out); err != nil {
					t.Fatal(err)
				}
				for i := range out {
					e := out[i] - counts[i]/total
					sum += e * e
				}
			}
			mc := math.Sqrt(sum / draws)
			t.Logf("model ℓ2 %.5g, measured %.5g (uniform %.4g)", model, mc, plan.UniformL2(tc.d))
			if r := model / mc; !(r > 1/1.15 && r < 1.15) {
				t.Errorf("model ℓ2 %.5g, measured %.5g over %d releases: ratio %.3f outside [0.87, 1.15]", model, mc, draws, r)
			}
		})
	}
}

// TestUniformL2 checks √((d−1)/(d(d+1))) against a Monte Carlo estimate of
// E‖p − u‖² under the flat prior (20000 draws: relative standard error
// about 1%, tolerance 5%).
func TestUniformL2(t *testing.T) {
	pr := rand.New(rand.NewPCG(5, 6))
	for _, d := range []int{2, 5, 20} {
		var sum float64
		const draws = 20000
		p := make([]float64, d)
		for k := 0; k < draws; k++ {
			var s float64
			for i := range p {
				p[i] = pr.ExpFloat64()
				s += p[i]
			}
			for i := range p {
				e := p[i]/s - 1/float64(d)
				sum += e * e
			}
		}
		mc := math.Sqrt(sum / draws)
		if r := plan.UniformL2(d) / mc; !(r > 0.95 && r < 1.05) {
			t.Errorf("d=%d: UniformL2 %.5g, measured %.5g", d, plan.UniformL2(d), mc)
		}
	}
}

// TestNearUniformWarning: the shipped budget of the issue (ε = 1 per day,
// 1-minute windows, every window composed) warns, in words that say what
// to change; an hourly window at ε = 10 does not.
func TestNearUniformWarning(t *testing.T) {
	for _, tc := range []struct {
		name    string
		privacy string
		epsilon float64
		size    string
		n       float64
		want    []string // substrings of the one warning; nil: no warning
	}{
		{"issue's deploy example", "mechanism: dirichlet\n  calibration: concentrated", 1, "1m", 10000,
			[]string{"histograms[0]", "near-uniform", "10000 events per release", "max_windows_per_user", "calibration: optimal"}},
		{"no planning figure", "mechanism: dirichlet", 1, "1m", 0,
			[]string{"near-uniform", "assumed: set privacy.expected_events_per_release"}},
		{"gaussian at 1/day per minute", "mechanism: gaussian", 1, "1m", 1000, []string{"near-uniform", "max_windows_per_user"}},
		{"informative", "mechanism: dirichlet", 10, "1h", 10000, nil},
		{"gaussian informative", "mechanism: gaussian", 10, "1h", 10000, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := utilityConfig(t, 5, tc.privacy, tc.epsilon, tc.size, tc.n)
			p, err := plan.DerivePlan(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ws := plan.Warnings(cfg, p)
			u := plan.Utilities(cfg, p)[0]
			t.Logf("ℓ2 %.4g, uniform %.4g, warnings %v", u.L2, u.UniformL2, ws)
			if tc.want == nil {
				if len(ws) != 0 {
					t.Fatalf("want no warning, got %v", ws)
				}
				return
			}
			if len(ws) != 1 {
				t.Fatalf("want one warning, got %v", ws)
			}
			for _, s := range tc.want {
				if !strings.Contains(ws[0].String(), s) {
					t.Errorf("warning %q lacks %q", ws[0], s)
				}
			}
		})
	}
}
