package plan_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
)

// binomialBelow is P(Binomial(t, p) < k) by the exact sum of the
// probability mass function (in logs, so t in the thousands is fine).
func binomialBelow(t int, p float64, k int) float64 {
	s := 0.0
	lt, _ := math.Lgamma(float64(t) + 1)
	for j := 0; j < k && j <= t; j++ {
		lj, _ := math.Lgamma(float64(j) + 1)
		lr, _ := math.Lgamma(float64(t-j) + 1)
		s += math.Exp(lt - lj - lr + float64(j)*math.Log(p) + float64(t-j)*math.Log1p(-p))
	}
	return min(s, 1)
}

// TestCountedShareExactSum checks the incomplete-beta form of
// P(Binomial(t, p) < k) against the exact sum, and its edge cases.
func TestCountedShareExactSum(t *testing.T) {
	t.Parallel()
	for _, k := range []int{1, 2, 5, 20, 300, 720} {
		for _, p := range []float64{0.001, 0.05, 0.3, 0.5, 0.9} {
			for _, tt := range []int{0, 1, k - 1, k, k + 1, 2 * k, 10, 100, 1439} {
				if tt < 0 {
					continue
				}
				got, want := plan.CountedShare(tt, p, k), binomialBelow(tt, p, k)
				if math.Abs(got-want) > 1e-9 {
					t.Errorf("CountedShare(t=%d, p=%g, k=%d) = %.12g, exact sum %.12g", tt, p, k, got, want)
				}
			}
		}
	}
	for _, tc := range []struct {
		name string
		t, k int
		p    float64
		want float64
	}{
		{"no bound", 1000, 0, 0.5, 1},
		{"fewer earlier windows than K", 4, 5, 0.99, 1},
		{"never active", 1000, 1, 0, 1},
		{"active in every window: used up after K", 5, 5, 1, 0},
	} {
		if got := plan.CountedShare(tc.t, tc.p, tc.k); got != tc.want {
			t.Errorf("%s: CountedShare(%d, %g, %d) = %g, want %g", tc.name, tc.t, tc.p, tc.k, got, tc.want)
		}
	}
}

// TestCountedShareSimulation runs the bound's admission rule itself — a
// user counts in a window iff it was active in fewer than K earlier
// windows of the period — on 20,000 simulated users active in each window
// with probability p, and compares the counted share of each window's
// active users with CountedShare(t, p, K). The tolerance is 5 binomial
// standard errors of the simulated share (plus 0.005); an index off by one
// window (P(Binomial(t+1, p) < K)) is outside it where the share falls.
func TestCountedShareSimulation(t *testing.T) {
	t.Parallel()
	const users, windows = 20000, 120
	offByOne := 0.0 // the largest gap between windows t and t+1's shares, in tolerances
	for _, tc := range []struct {
		p float64
		k int
	}{{0.5, 5}, {0.3, 10}, {0.1, 3}} {
		rng := rand.New(rand.NewPCG(uint64(tc.k), 42))
		used := make([]int, users)
		for w := 0; w < windows; w++ {
			active, counted := 0, 0
			for u := range used {
				if rng.Float64() >= tc.p {
					continue
				}
				active++
				if used[u] < tc.k {
					counted++
					used[u]++
				}
			}
			sim := float64(counted) / float64(active)
			want := plan.CountedShare(w, tc.p, tc.k)
			se := math.Sqrt(want*(1-want)/float64(active)) + 0.005/5
			if math.Abs(sim-want) > 5*se {
				t.Errorf("p=%g K=%d window %d: simulated share %.4f, CountedShare %.4f (±%.4f)", tc.p, tc.k, w, sim, want, 5*se)
			}
			offByOne = max(offByOne, math.Abs(plan.CountedShare(w+1, tc.p, tc.k)-want)/(5*se))
		}
	}
	if offByOne <= 2 {
		t.Errorf("the test cannot tell window t from t+1 (gap %.2g tolerances)", offByOne)
	}
}

// TestActivityPredictionMonotone: through the period the counted share
// never rises and the predicted error never falls; a larger K keeps every
// window's share at least as high and goes blind no earlier, but charges
// more per release, so the first window (everyone counted) is noisier;
// users less active than the percentile keep a higher share.
func TestActivityPredictionMonotone(t *testing.T) {
	t.Parallel()
	var prev *plan.Activity
	for _, k := range []int{2, 5, 20, 100} {
		cfg := utilityConfig(t, 5, "mechanism: gaussian", 1, "1m", 5000)
		cfg.Contribution.MaxWindowsPerUser, cfg.Contribution.MaxTrackedUsers = k, 0
		cfg.Privacy.ExpectedWindowsPerUser = 300
		p, err := plan.DerivePlan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		a, ok := plan.PredictActivity(cfg, p)
		if !ok {
			t.Fatal("no prediction")
		}
		if a.Windows != 1440 || len(a.T) != 1440 || a.P != 300.0/1440 {
			t.Fatalf("K=%d: %d windows, %d evaluated, p = %g", k, a.Windows, len(a.T), a.P)
		}
		for i := 1; i < len(a.T); i++ {
			if a.Share[i] > a.Share[i-1] || a.L2[i] < a.L2[i-1] {
				t.Fatalf("K=%d window %d: share %g after %g, ℓ2 %g after %g", k, a.T[i], a.Share[i], a.Share[i-1], a.L2[i], a.L2[i-1])
			}
		}
		if !(a.HalfFrom <= a.BlindFrom) || a.Share[0] != 1 {
			t.Errorf("K=%d: half from %d, blind from %d, first share %g", k, a.HalfFrom, a.BlindFrom, a.Share[0])
		}
		if prev != nil {
			for i := range a.T {
				if a.Share[i] < prev.Share[i] {
					t.Fatalf("window %d: share %g at K=%d below %g at K=%d", a.T[i], a.Share[i], k, prev.Share[i], prev.K)
				}
			}
			if a.BlindFrom < prev.BlindFrom || !(a.L2[0] > prev.L2[0]) || !(a.PerReleaseEpsilon < prev.PerReleaseEpsilon) {
				t.Errorf("K=%d after K=%d: blind from %d after %d, first window ℓ2 %g after %g, per-release ε %g after %g",
					k, prev.K, a.BlindFrom, prev.BlindFrom, a.L2[0], prev.L2[0], a.PerReleaseEpsilon, prev.PerReleaseEpsilon)
			}
		}
		for _, tt := range []int{10, 30, 100} {
			if below, at := plan.CountedShare(tt, a.P/2, k), plan.CountedShare(tt, a.P, k); below < at {
				t.Errorf("K=%d window %d: a user half as active keeps %g < %g", k, tt, below, at)
			}
		}
		prev = &a
	}
	// K = 5 at a user active in 300 of 1,440 minutes (p ≈ 0.21): half the
	// users are out after about 5/p ≈ 24 windows, and essentially every
	// one a little later; the period's last window counts nobody and
	// scores the noise-only error.
	cfg := utilityConfig(t, 5, "mechanism: gaussian", 1, "1m", 5000)
	cfg.Contribution.MaxWindowsPerUser, cfg.Contribution.MaxTrackedUsers = 5, 0
	cfg.Privacy.ExpectedWindowsPerUser = 300
	p, _ := plan.DerivePlan(cfg)
	a, _ := plan.PredictActivity(cfg, p)
	if a.HalfFrom < 15 || a.HalfFrom > 30 || a.BlindFrom < a.HalfFrom || a.BlindFrom > 60 {
		t.Errorf("half from window %d, blind from %d", a.HalfFrom, a.BlindFrom)
	}
	if last := a.L2[len(a.L2)-1]; math.Abs(last-plan.NoiseOnlyL2(5, true)) > 1e-9 {
		t.Errorf("last window ℓ2 %g, want the noise-only %g", last, plan.NoiseOnlyL2(5, true))
	}
}

// TestNoiseOnlyL2 checks the ceiling of the additive mechanisms' error
// model against their own releases from empty counts, with p drawn from
// the flat prior: Laplace exactly (20000 draws; 3% tolerance is over 5
// standard errors), Gaussian within the moment-matching approximation
// (8%).
func TestNoiseOnlyL2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, privacy string
		gaussian      bool
		tol           float64
	}{
		{"laplace", "mechanism: laplace", false, 0.03},
		{"gaussian", "mechanism: gaussian", true, 0.08},
	} {
		for _, d := range []int{2, 5, 20} {
			cfg := utilityConfig(t, d, tc.privacy, 1, "1h", 0)
			p, err := plan.DerivePlan(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rng := mechanism.NewSeededRand([32]byte{9})
			pr := rand.New(rand.NewPCG(5, uint64(d)))
			counts, out, prob := make([]float64, d), make([]float64, d), make([]float64, d)
			const draws = 20000
			sum := 0.0
			for k := 0; k < draws; k++ {
				s := 0.0
				for i := range prob {
					prob[i] = pr.ExpFloat64()
					s += prob[i]
				}
				if err := p.Count.Mechanism.Release(rng, counts, out); err != nil {
					t.Fatal(err)
				}
				for i := range out {
					e := out[i] - prob[i]/s
					sum += e * e
				}
			}
			mc, model := math.Sqrt(sum/draws), plan.NoiseOnlyL2(d, tc.gaussian)
			if r := model / mc; !(r > 1-tc.tol && r < 1+tc.tol) {
				t.Errorf("%s d=%d: NoiseOnlyL2 %.4g, releases from empty counts %.4g", tc.name, d, model, mc)
			}
			if got := plan.ExpectedL2(p.Count.Mechanism, d, 0); got != model {
				t.Errorf("%s d=%d: ExpectedL2 at n = 0 is %g, want the ceiling %g", tc.name, d, got, model)
			}
		}
	}
}

// TestRecommend: for users active in half of a day's minutes, the shipped
// 1-minute K = 5 goes blind within the first half hour; the recommendation
// has one best configuration per candidate window size, finest first,
// each no worse than the config as it is, and names a useful one.
func TestRecommend(t *testing.T) {
	t.Parallel()
	cfg := utilityConfig(t, 5, "mechanism: gaussian", 1, "1m", 5000)
	cfg.Contribution.MaxWindowsPerUser, cfg.Contribution.MaxTrackedUsers = 5, 0
	cfg.Privacy.ExpectedWindowsPerUser = 720
	p, err := plan.DerivePlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := plan.Recommend(cfg, p, false)
	if !ok {
		t.Fatal("no recommendation")
	}
	cur := rec.Current
	if !cur.Blind() || cur.BlindAfter().Minutes() > 30 {
		t.Errorf("K=5 at p=0.5: blind after %v", cur.BlindAfter())
	}
	if rec.Own != 0 || len(rec.Best) < 5 || rec.Best[0].Window != cfg.Window.Size.D() {
		t.Fatalf("best %d configurations, own at %d", len(rec.Best), rec.Own)
	}
	for i, b := range rec.Best {
		if i > 0 && b.Window <= rec.Best[i-1].Window {
			t.Errorf("window sizes not finest first: %v after %v", b.Window, rec.Best[i-1].Window)
		}
		if b.MeanL2 > cur.MeanL2 && b.Window == cur.Window {
			t.Errorf("the best at %v (%s, %.3g) is worse than the config (%.3g)", b.Window, b.Describe(), b.MeanL2, cur.MeanL2)
		}
		if b.K < 1 || b.K > b.Windows {
			t.Errorf("%s: K outside 1..%d", b.Describe(), b.Windows)
		}
	}
	if rec.Finest < 0 || rec.Best[rec.Finest].MeanRatio() > plan.UsefulRatio {
		t.Fatalf("no useful configuration found: %s", rec.Advice())
	}
	if own := rec.Best[rec.Own]; own.K <= 5 {
		t.Errorf("at 1m the best K is %d: not above the config's 5", own.K)
	}
	if adv := rec.Advice(); !strings.Contains(adv, "window.size: ") || !strings.Contains(adv, "contribution.max_windows_per_user: ") {
		t.Errorf("advice without the settings: %s", adv)
	}
}

// TestVerdictAndEventsForRatio: the verdict's thresholds, and the events
// per release EventsForRatio names reach the ratio while 10% fewer do not.
func TestVerdictAndEventsForRatio(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ratio float64
		want  string
	}{{0.05, "useful"}, {plan.UsefulRatio, "useful"}, {0.3, "rough"}, {plan.NearUniformRatio, "rough"}, {0.8, "near-uniform"}, {math.NaN(), "near-uniform"}} {
		if got := plan.Verdict(tc.ratio); got != tc.want {
			t.Errorf("Verdict(%g) = %s, want %s", tc.ratio, got, tc.want)
		}
	}
	for _, privacy := range []string{"mechanism: gaussian", "mechanism: dirichlet\n  calibration: optimal", "mechanism: laplace"} {
		cfg := utilityConfig(t, 5, privacy, 1, "1m", 3000)
		p, err := plan.DerivePlan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		n := plan.EventsForRatio(p.Count.Mechanism, 5, plan.UsefulRatio)
		target := plan.UsefulRatio * plan.UniformL2(5)
		if math.IsInf(n, 1) || plan.ExpectedL2(p.Count.Mechanism, 5, n) > target || plan.ExpectedL2(p.Count.Mechanism, 5, 0.9*n) <= target {
			t.Errorf("%s: EventsForRatio %g: ℓ2 %g there, %g at 0.9×, target %g", privacy, n,
				plan.ExpectedL2(p.Count.Mechanism, 5, n), plan.ExpectedL2(p.Count.Mechanism, 5, 0.9*n), target)
		}
	}
}
