package mechanism

import (
	"math"
	"math/rand/v2"
	"testing"
)

// unitReplace is the stage's sensitivity for one event per user per window
// under replace.
var unitReplace = Sensitivity{L1: 2, L2Sq: 2, LInf: 1}

func optimalSpec(eps float64, n float64, d int, sens Sensitivity, nb Neighbour) Spec {
	return Spec{Kind: Dirichlet, Calibration: Optimal, Order: 2, RDPEpsilon: eps, Sensitivity: sens, Neighbour: nb, ExpectedEvents: n, Bins: d}
}

// The optimal calibration's curve is 000 Corollary 3's at its (r, α) where
// the exact argument does not apply, and (r, α) is on the frontier: RDP(λ)
// ≤ ε, and a slightly smaller α would exceed it.
func TestOptimalIsCorollary3(t *testing.T) {
	sens := Sensitivity{L1: 4, L2Sq: 8, LInf: 2} // m = 2: not covered by exact
	for _, eps := range []float64{1e-4, 0.01, 0.3, 2} {
		m, err := New(optimalSpec(eps, 10000, 5, sens, Replace))
		if err != nil {
			t.Fatal(err)
		}
		p := m.Params()
		for _, o := range []float64{1.5, 2, 3, 8} {
			want := dirichletRDP(o, p.Alpha, p.R, sens.L2Sq, sens.LInf)
			if o >= m.MaxOrder() {
				want = math.Inf(1)
			}
			if got := m.RDP(o); got != want {
				t.Errorf("ε=%g: RDP(%g) = %v, Corollary 3 at (r=%v, α=%v) gives %v", eps, o, got, p.R, p.Alpha, want)
			}
		}
		if got := m.RDP(2); !(got <= eps) || got < eps*(1-1e-9) {
			t.Errorf("ε=%g: RDP(2) = %v, want ≤ ε and on the frontier", eps, got)
		}
		if m.MaxOrder() != p.Alpha/(p.R*sens.LInf)+1 {
			t.Errorf("MaxOrder %v, want α/(rΔ∞)+1 = %v", m.MaxOrder(), p.Alpha/(p.R*sens.LInf)+1)
		}
	}
}

// The optimum is a minimum of the model along the frontier: no r on a
// fine independent grid (with its own frontier α from the concentrated
// calibration with scaled sensitivities) has a smaller modelled error.
func TestOptimalMinimizesTheModel(t *testing.T) {
	sens := Sensitivity{L1: 4, L2Sq: 8, LInf: 2}
	for _, tc := range []struct {
		eps float64
		n   float64
		d   int
	}{{0.01, 10000, 5}, {0.5, 1000, 10}, {1e-4, 1e6, 3}, {5, 100, 24}} {
		m, err := New(optimalSpec(tc.eps, tc.n, tc.d, sens, Replace))
		if err != nil {
			t.Fatal(err)
		}
		p := m.Params()
		got := DirichletExpectedError(tc.d, tc.n, p.R, p.Alpha)
		for lr := -6.0; lr <= 4; lr += 0.01 {
			r := math.Pow(10, lr)
			a, err := calibrateConcentrated(2, tc.eps, r*r*sens.L2Sq, r*sens.LInf)
			if err != nil || !(dirichletRDP(2, a, r, sens.L2Sq, sens.LInf) <= tc.eps*(1+1e-12)) {
				continue
			}
			if e := DirichletExpectedError(tc.d, tc.n, r, a); e < got*(1-1e-6) {
				t.Errorf("%+v: r=%.4g has model error %.6g below the optimum's %.6g (r=%.4g)", tc, r, e, got, p.R)
				break
			}
		}
		if em, ok := m.(ErrorModel); !ok || math.Abs(em.ExpectedError()-math.Sqrt(got)) > 1e-15 {
			t.Errorf("ExpectedError does not report the model at the optimum")
		}
	}
}

// Pinned (r, α) for the stage's unit contributions under replace (exact
// frontier) and for m = 2 (Corollary 3): regression values of this code.
// Each is also checked here to be a local minimum of the model along its
// frontier (r moved by ±1% with its own frontier α is no better), and
// TestOptimalMinimizesTheModel checks the global minimum on Corollary 3's
// frontier; a change that moves them must say why.
func TestOptimalPinned(t *testing.T) {
	m2 := Sensitivity{L1: 4, L2Sq: 8, LInf: 2}
	for _, tc := range []struct {
		sens     Sensitivity
		eps, n   float64
		d        int
		r, alpha float64
	}{
		// ε = 1 per day over 5 windows, δ = 1e-6 (the planner's ε_r at λ = 2).
		{unitReplace, 0.009538, 10000, 5, 0.2928394261, 18.33267708},
		// The same budget over 1,440 windows (no cross-window bound).
		{unitReplace, 3.4e-5, 10000, 5, 0.008240922285, 4.47012546},
		{m2, 0.01, 1000, 10, 0.06330984835, 3.807571553},
		{unitReplace, 1, 100, 3, 1.860119531, 6.686799432},
	} {
		m, err := New(optimalSpec(tc.eps, tc.n, tc.d, tc.sens, Replace))
		if err != nil {
			t.Fatal(err)
		}
		p := m.Params()
		if math.Abs(p.R/tc.r-1) > 1e-6 || math.Abs(p.Alpha/tc.alpha-1) > 1e-6 {
			t.Errorf("ε=%g N=%g d=%d: r=%.10g α=%.10g, pinned r=%.10g α=%.10g", tc.eps, tc.n, tc.d, p.R, p.Alpha, tc.r, tc.alpha)
		}
		om := m.(*optimalMech)
		frontier := func(r float64) float64 {
			ok := func(a float64) bool {
				if om.exact {
					return optimalExactRDP(om.shape, 2, a, r, tc.sens.L2Sq, tc.sens.LInf) <= tc.eps
				}
				return dirichletRDP(2, a, r, tc.sens.L2Sq, tc.sens.LInf) <= tc.eps
			}
			hi := 1.0
			for !ok(hi) {
				hi *= 2
			}
			return bisect(ok, hi, 1e-300)
		}
		at := DirichletExpectedError(tc.d, tc.n, p.R, p.Alpha)
		for _, f := range []float64{0.99, 1.01} {
			if e := DirichletExpectedError(tc.d, tc.n, p.R*f, frontier(p.R*f)); e < at {
				t.Errorf("ε=%g N=%g d=%d: r×%g has model error %.8g below the optimum's %.8g", tc.eps, tc.n, tc.d, f, e, at)
			}
		}
	}
}

// h₊ and h₋ with a scale r against closed forms at λ = 2, where
// D_2(Gamma(a) ‖ Gamma(b)) = log Γ(2a−b) + log Γ(b) − 2 log Γ(a):
//   - integer r (2, 3): the Gamma ratios are rational, so the closed forms
//     are cancellation-free sums of log1p, and the reported values must be
//     at or above them (they carry a rounding margin of 16 ulps of the
//     magnitudes special.LgammaDiff adds, a few 1e-13 absolute) and within 1e-12;
//   - fractional r: against math.Lgamma, never below the closed form by
//     more than its own rounding (a few ulps of the log Γ magnitudes it
//     subtracts), and above it by at most the margin.
func TestGammaRenyiR(t *testing.T) {
	for _, alpha := range []float64{3.5, 17.2, 250, 1e5} {
		for _, r := range []float64{2, 3} {
			var wp, wm float64 // log Π (1 + r/(α+j)) style products
			for j := 0.0; j < r; j++ {
				// Γ(α+2r)Γ(α)/Γ(α+r)² = Π_{j<r} (α+r+j)/(α+j)
				wp += math.Log1p(r / (alpha + j))
				// Γ(α−r)Γ(α+r)/Γ(α)² = Π_{j<r} (α+j)/(α−r+j)
				wm += math.Log1p(r / (alpha - r + j))
			}
			hp, hm := gammaRenyiPlusR(2, alpha, r), gammaRenyiMinusR(2, alpha, r)
			if !(hp >= wp) || hp > wp+1e-12 {
				t.Errorf("h₊(2, %g, %g) = %.17g, closed form %.17g", alpha, r, hp, wp)
			}
			if !(hm >= wm) || hm > wm+1e-12 {
				t.Errorf("h₋(2, %g, %g) = %.17g, closed form %.17g", alpha, r, hm, wm)
			}
		}
	}
	lg := func(x float64) float64 { v, _ := math.Lgamma(x); return v }
	for _, alpha := range []float64{1.5, 3, 17.2, 250} {
		for _, r := range []float64{0.01, 0.3, 1.4} {
			if !(alpha > r) {
				continue
			}
			terms := []float64{lg(alpha + 2*r), lg(alpha), lg(alpha + r), lg(alpha - r)}
			tol := 0.0
			for _, v := range terms {
				tol += 8 * 0x1p-52 * math.Abs(v)
			}
			wp := terms[0] + terms[1] - 2*terms[2]
			wm := terms[3] + terms[2] - 2*terms[1]
			if hp := gammaRenyiPlusR(2, alpha, r); hp < wp-tol || hp > wp+tol+1e-12 {
				t.Errorf("h₊(2, %g, %g) = %.17g, Lgamma closed form %.17g ± %.2g", alpha, r, hp, wp, tol)
			}
			if hm := gammaRenyiMinusR(2, alpha, r); hm < wm-tol || hm > wm+tol+1e-12 {
				t.Errorf("h₋(2, %g, %g) = %.17g, Lgamma closed form %.17g ± %.2g", alpha, r, hm, wm, tol)
			}
		}
	}
	if !math.IsInf(gammaRenyiMinusR(3, 1, 0.5), 1) {
		t.Errorf("h₋ must be +Inf at α ≤ (λ−1)r")
	}
}

// On the exact frontier the reported RDP is never below the exact Rényi
// divergence (000 eq. (19)) of any admissible replace neighbour pair of
// Dir(r·x + α) — brute force over small count vectors — and the worst pair
// attains it closely as the other bins grow.
func TestOptimalExactFrontierBoundsEq19(t *testing.T) {
	m, err := New(optimalSpec(0.05, 5000, 4, unitReplace, Replace))
	if err != nil {
		t.Fatal(err)
	}
	p := m.Params()
	if m.(*optimalMech).exact != true {
		t.Fatal("unit replace should be on the exact frontier")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	worst := 0.0
	for _, order := range []float64{1.5, 2, 3} {
		bound := m.RDP(order)
		for trial := 0; trial < 4000; trial++ {
			x := make([]float64, 4)
			for i := range x {
				x[i] = float64(rng.IntN(4))
			}
			if trial%5 == 0 {
				x[3] = float64(rng.IntN(1_000_000))
			}
			xp := append([]float64(nil), x...)
			from, to := rng.IntN(4), rng.IntN(4)
			if x[from] == 0 || from == to {
				continue
			}
			xp[from]--
			xp[to]++
			u, up := make([]float64, 4), make([]float64, 4)
			for i := range x {
				u[i], up[i] = p.R*x[i]+p.Alpha, p.R*xp[i]+p.Alpha
			}
			d, err := DirichletRenyi(order, u, up)
			if err != nil {
				t.Fatal(err)
			}
			if d > bound {
				t.Fatalf("λ=%g: eq. (19) gives %v > reported %v for %v → %v", order, d, bound, x, xp)
			}
			worst = math.Max(worst, d/bound)
		}
	}
	if worst < 0.9 {
		t.Errorf("the brute force never came near the bound (max ratio %.3f): the bound is loose or the search weak", worst)
	}
}

// The error model against simulation: x/N from the flat prior, one release
// each, with the real sampler. 4000 draws of ‖Y − p‖² (each in [0, 2]):
// the mean's standard error is below 2/√4000 ≈ 0.032 of its range, and the
// check allows 6 of its estimated standard errors (false-failure rate
// below 2e-9).
func TestOptimalErrorModelMatchesSimulation(t *testing.T) {
	rng := NewSeededRand([32]byte{7})
	src := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		d        int
		n        float64
		r, alpha float64
	}{{5, 10000, 0.29, 18}, {3, 200, 1, 5}, {10, 1e5, 3, 400}} {
		const trials = 4000
		var sum, sum2 float64
		x := make([]float64, tc.d)
		out := make([]float64, tc.d)
		for i := 0; i < trials; i++ {
			// p ~ Dir(1,…,1): normalized exponentials; x = N·p (real
			// counts: the model's assumption).
			s := 0.0
			for j := range x {
				x[j] = src.ExpFloat64()
				s += x[j]
			}
			for j := range x {
				x[j] *= tc.n / s
			}
			rng.dirichlet(x, tc.r, 0, tc.alpha, false, out)
			e := 0.0
			for j := range x {
				dlt := out[j] - x[j]/tc.n
				e += dlt * dlt
			}
			sum += e
			sum2 += e * e
		}
		mean := sum / trials
		se := math.Sqrt((sum2/trials - mean*mean) / trials)
		want := DirichletExpectedError(tc.d, tc.n, tc.r, tc.alpha)
		if math.Abs(mean-want) > 6*se {
			t.Errorf("%+v: simulated E‖Y−p‖² = %.6g ± %.2g, model %.6g", tc, mean, se, want)
		}
	}
}

func TestOptimalSpecErrors(t *testing.T) {
	for _, s := range []Spec{
		optimalSpec(1, 0, 5, unitReplace, Replace),
		optimalSpec(1, math.NaN(), 5, unitReplace, Replace),
		optimalSpec(1, 100, 1, unitReplace, Replace),
		{Kind: Dirichlet, Calibration: Concentrated, Order: 2, RDPEpsilon: 1, Sensitivity: unitReplace, ExpectedEvents: 10},
	} {
		if _, err := New(s); err == nil {
			t.Errorf("spec %+v accepted", s)
		}
	}
	if m, err := New(Spec{Kind: Gaussian, Calibration: Optimal, Order: 2, RDPEpsilon: 1, Sensitivity: unitReplace, ExpectedEvents: 10, Bins: 5}); err != nil || m.Spec().ExpectedEvents != 0 {
		t.Errorf("gaussian with a config-wide optimal calibration: %v", err)
	}
}

// Every optimal release is on the release grid (both frontiers), like every
// floating-point release (grid.go).
func TestOptimalReleasesOnGrid(t *testing.T) {
	rng := NewSeededRand([32]byte{9})
	for _, sens := range []Sensitivity{unitReplace, {L1: 4, L2Sq: 8, LInf: 2}} {
		m, err := New(optimalSpec(0.01, 1000, 5, sens, Replace))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.(Unrounded); !ok {
			t.Fatalf("%T does not expose its unrounded draw", m)
		}
		out := make([]float64, 5)
		q := float64(ReleaseGrid(5))
		for i := 0; i < 200; i++ {
			if err := m.Release(rng, []float64{300, 200, 100, 0, 400}, out); err != nil {
				t.Fatal(err)
			}
			for _, p := range out {
				if n := p * q; math.Abs(n-math.Round(n)) > 1e-6 {
					t.Fatalf("release %v is not on the grid 1/%v", out, q)
				}
			}
		}
	}
}
