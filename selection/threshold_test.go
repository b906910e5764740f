package selection

import (
	"math"
	"testing"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/mechanism"
)

// TestBatchOptimumFigures: the recursion of Desfontaines et al. gives the
// figures the DP library documents for ε = 1, δ = 10⁻⁵, l0 = 1 (a
// partition kept with probability ½ at about 12 users, always at about
// 23), and more users are needed with l0 = 2 at the same (ε, δ).
func TestBatchOptimumFigures(t *testing.T) {
	b := Batch{Epsilon: 1, Delta: 1e-5, L0: 1}
	half, always := b.UsersAt(0.5), b.UsersAt(1)
	t.Logf("batch optimum ε=1 δ=1e-5 l0=1: ½ at %d users, 0.95 at %d, always at %d", half, b.UsersAt(0.95), always)
	if half < 11 || half > 13 || always < 21 || always > 25 {
		t.Errorf("batch optimum: ½ at %d users (want about 12), always at %d (want about 23)", half, always)
	}
	if b.Keep(0) != 0 || b.Keep(always) != 1 {
		t.Errorf("π_0 = %g, π_always = %g", b.Keep(0), b.Keep(always))
	}
	// π_n is the largest keep probability the (ε, δ) constraints allow: it
	// satisfies both with equality or one of them tightly, never exceeds.
	for n := 1; n <= always; n++ {
		p0, p1 := b.Keep(n-1), b.Keep(n)
		if p1 > math.E*p0+1e-5+1e-15 || 1-p0 > math.E*(1-p1)+1e-5+1e-15 {
			t.Errorf("π_%d = %g breaks (1, 1e-5)-DP against π_%d = %g", n, p1, n-1, p0)
		}
	}
	if b2 := (Batch{Epsilon: 1, Delta: 1e-5, L0: 2}); b2.UsersAt(0.5) <= half {
		t.Errorf("l0 = 2: ½ at %d users, not above l0 = 1's %d", b2.UsersAt(0.5), half)
	}
}

// TestWithinThreeOfBatch: one window's Gaussian thresholding calibrated to
// (ε, δ) keeps a group with probability ½ and 0.95 at no more than 3× the
// batch optimum's users at the same (ε, δ, l0) (issue 30's aim).
func TestWithinThreeOfBatch(t *testing.T) {
	for _, tc := range []struct {
		eps, delta float64
		l0         int
	}{{1, 1e-5, 1}, {1, 1e-5, 2}, {1, 1e-5, 5}, {0.5, 1e-6, 1}, {2, 1e-8, 3}} {
		pl, err := Calibrate(tc.eps, tc.delta, tc.l0, Period{Units: 1, DeltaUnits: 1}, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		th, b := pl.Threshold, Batch{Epsilon: tc.eps, Delta: tc.delta, L0: tc.l0}
		h, h95 := th.UsersAt(0.5), th.UsersAt(0.95)
		bh, b95 := b.UsersAt(0.5), b.UsersAt(0.95)
		t.Logf("ε=%g δ=%g l0=%d: σ=%.3f T=%d; ½ at %d users (batch %d, ×%.2f), 0.95 at %d (batch %d, ×%.2f); (ε, δ) = (%.4f, %.3g)",
			tc.eps, tc.delta, tc.l0, th.Sigma, th.T, h, bh, float64(h)/float64(bh), h95, b95, float64(h95)/float64(b95), pl.Guarantee.Epsilon, pl.Guarantee.Delta())
		if float64(h) > 3*float64(bh) || float64(h95) > 3*float64(b95) {
			t.Errorf("ε=%g δ=%g l0=%d: ½ at %d, 0.95 at %d users; batch %d, %d: more than 3×", tc.eps, tc.delta, tc.l0, h, h95, bh, b95)
		}
		if pl.Guarantee.Epsilon > tc.eps || pl.Guarantee.Delta() > tc.delta {
			t.Errorf("guarantee %+v exceeds (%g, %g)", pl.Guarantee, tc.eps, tc.delta)
		}
	}
}

// TestTailBounds checks the discrete Gaussian's tail, summed term by term,
// against the continuous Gaussian's integrals that bound it (an independent
// computation: Σ_{z≥m} f(z) lies between ∫_m^∞ f and ∫_{m−1}^∞ f for the
// decreasing f, and the normalising sum is √(2π)σ·(1 + 2Σ_k e^{−2π²σ²k²})
// by Poisson summation, within 10⁻⁸ of √(2π)σ for σ ≥ 1).
func TestTailBounds(t *testing.T) {
	for _, sigma := range []float64{1, 2.5, 13.7, 180, 3000} {
		for _, z := range []float64{0.5, 1, 2, 4, 6, 9} {
			m := int64(math.Ceil(z * sigma))
			got := tail(sigma, m)
			lo := normalTail(float64(m)/sigma) / (1 + 1e-8)
			hi := normalTail(float64(m-1)/sigma) * (1 + 1e-8)
			if !(got >= lo && got <= hi) {
				t.Errorf("σ=%g m=%d: P[Z ≥ m] = %g, outside [%g, %g]", sigma, m, got, lo, hi)
			}
			if s := tail(sigma, -m+1) + got; math.Abs(s-1) > 1e-12 {
				t.Errorf("σ=%g m=%d: P[Z ≥ m] + P[Z ≥ 1−m] = %g, not 1", sigma, m, s)
			}
		}
	}
}

// TestPassProbabilityMatchesSampler draws the selection's noise from the
// sampler the stage uses and compares the frequency of c + Z ≥ T with
// PassProbability(c). Each comparison fails wrongly with probability
// below 6·10⁻⁷ (a 5-standard-error band); 12 comparisons: < 10⁻⁵.
func TestPassProbabilityMatchesSampler(t *testing.T) {
	rng := mechanism.NewSeededRand([32]byte{30})
	const draws = 40_000
	for _, sigma := range []float64{2.2, 9.5, 61} {
		n, err := Noiser(sigma)
		if err != nil {
			t.Fatal(err)
		}
		th := Threshold{Sigma: n.Params().Sigma, T: int64(3 * sigma), L0: 1}
		for _, c := range []int64{1, th.T - int64(sigma), th.T, th.T + int64(sigma)} {
			pass := 0
			for i := 0; i < draws; i++ {
				v, err := n.NoisyCount(rng, float64(c))
				if err != nil {
					t.Fatal(err)
				}
				if v >= float64(th.T) {
					pass++
				}
			}
			p := th.PassProbability(c)
			se := math.Sqrt(p*(1-p)/draws) + 1/float64(draws)
			if got := float64(pass) / draws; math.Abs(got-p) > 5*se {
				t.Errorf("σ=%.3g T=%d c=%d: passed %.5f of draws, derived %.5f (±%.5f)", th.Sigma, th.T, c, got, p, 5*se)
			}
		}
	}
}

// TestPeriodCounts: the windows a period composes under both relations,
// with and without the cross-window bound (package doc, "A period").
func TestPeriodCounts(t *testing.T) {
	for _, tc := range []struct {
		windows, k int
		replace    bool
		want       Period
	}{
		{24, 0, false, Period{24, 24, false}},
		{24, 0, true, Period{24, 24, true}},
		{24, 3, false, Period{3, 3, false}},
		{24, 3, true, Period{3, 6, true}},
		{24, 20, true, Period{20, 24, true}},
		{4, 9, false, Period{4, 4, false}},
	} {
		if got := NewPeriod(tc.windows, tc.k, tc.replace); got != tc.want {
			t.Errorf("NewPeriod(%d, %d, %v) = %+v, want %+v", tc.windows, tc.k, tc.replace, got, tc.want)
		}
	}
}

// TestReplaceDoublesTheCurve: under replace the per-window curve is the
// add_remove one with Δ2² doubled, and the δ term per window is the same.
func TestReplaceDoublesTheCurve(t *testing.T) {
	th := Threshold{Sigma: 7, T: 40, L0: 3}
	for _, o := range []float64{1.5, 2, 8, 64} {
		a, r := th.UnitRDP(o, false), th.UnitRDP(o, true)
		if want := o * 3 / (2 * 49); math.Abs(a-want) > 1e-15*want || math.Abs(r-2*want) > 2e-15*want {
			t.Errorf("λ=%g: add_remove %g, replace %g; want %g and twice it", o, a, r, want)
		}
	}
	orders := budget.DefaultOrders()
	_, da, _ := th.Charge(NewPeriod(24, 3, false), orders)
	_, dr, _ := th.Charge(NewPeriod(24, 3, true), orders)
	if math.Abs(dr-2*da) > 1e-15*da {
		t.Errorf("K=3 of 24: replace δ %g, add_remove %g: want twice (min(2K, W) windows)", dr, da)
	}
	for _, bad := range []Threshold{{Sigma: math.NaN(), T: 1, L0: 1}, {Sigma: math.Inf(1), T: 1, L0: 1}, {Sigma: 1, T: 0, L0: 1}, {Sigma: 1, T: 1, L0: 0}} {
		if bad.Check() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	for _, args := range [][2]float64{{math.NaN(), 1e-5}, {math.Inf(1), 1e-5}, {-1, 1e-5}, {1, 0}, {1, 1}, {1, math.NaN()}} {
		if _, err := Calibrate(args[0], args[1], 1, Period{1, 1, false}, 2, 0); err == nil {
			t.Errorf("Calibrate(%v, %v) accepted", args[0], args[1])
		}
	}
}
