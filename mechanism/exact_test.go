package mechanism

import (
	"errors"
	"math"
	"testing"

	"github.com/dpstage/stage/internal/lib/special"
)

// exactCase is a covered configuration of the exact calibration.
type exactCase struct {
	name string
	sens Sensitivity
	nb   Neighbour
	// p, q: admissible numbers of bins losing / gaining one event (every
	// pair with p ≤ pCap, q ≤ qCap, p + q ≤ k is enumerated by the tests).
	k, pCap, qCap int
}

var exactCases = []exactCase{
	{"unit replace", Sensitivity{L1: 2, L2Sq: 2, LInf: 1}, Replace, 2, 1, 1},
	{"unit add_remove", Sensitivity{L1: 1, L2Sq: 1, LInf: 1}, AddRemove, 1, 1, 1},
	{"any, 2 bins", Sensitivity{L2Sq: 2, LInf: 1}, AnyNeighbour, 2, 2, 2},
	{"replace, 2 events in distinct bins", Sensitivity{L1: 4, L2Sq: 4, LInf: 1}, Replace, 4, 2, 2},
}

var exactTargets = []struct{ order, eps float64 }{
	{2, 1}, {2, 0.1}, {1.5, 3}, {5, 1}, {20, 0.5},
}

func exactSpec(c exactCase, order, eps float64) Spec {
	return Spec{Kind: Dirichlet, Calibration: Exact, Order: order, RDPEpsilon: eps, Sensitivity: c.sens, Neighbour: c.nb}
}

// TestExactClosedForms: at λ = 2, h₊ = log((α+1)/α) and h₋ = log(α/(α−1))
// (the file comment of exact.go), so the calibration has closed forms:
// replace h₊ + h₋ = log((α+1)/(α−1)) = ε gives α = (e^ε+1)/(e^ε−1); one add
// or remove h₋ = ε gives α = e^ε/(e^ε−1); two bins with any sign
// 2h₋ = ε gives α = e^{ε/2}/(e^{ε/2}−1).
func TestExactClosedForms(t *testing.T) {
	for _, eps := range []float64{0.01, 0.1, 1, 3} {
		e, e2 := math.Exp(eps), math.Exp(eps/2)
		for _, c := range []struct {
			name string
			ec   exactCase
			want float64
		}{
			{"replace", exactCases[0], (e + 1) / (e - 1)},
			{"add_remove", exactCases[1], e / (e - 1)},
			{"any", exactCases[2], e2 / (e2 - 1)},
		} {
			m := mustNew(t, exactSpec(c.ec, 2, eps))
			if got := m.Params().Alpha; math.Abs(got-c.want) > 1e-9*c.want {
				t.Errorf("%s ε=%g: α = %.15g, want %.15g", c.name, eps, got, c.want)
			}
			if m.Spec().Calibration != Exact || m.Params().R != 1 {
				t.Errorf("%s: spec %+v params %+v", c.name, m.Spec(), m.Params())
			}
		}
	}
	// The example: unit contributions, replace, λ = 2, ε = 1.
	m := mustNew(t, exactSpec(exactCases[0], 2, 1))
	c := mustNew(t, Spec{Kind: Dirichlet, Order: 2, RDPEpsilon: 1, Sensitivity: exactCases[0].sens})
	t.Logf("λ=2 ε=1 unit replace: exact α = %.6f, concentrated α = %.6f", m.Params().Alpha, c.Params().Alpha)
}

// TestLgammaDiff checks L(x, s) = log Γ(x+s) − log Γ(x) against math.Lgamma
// where the difference does not cancel (moderate x) and against the exact
// sum Σ_{j<s} log(x+j) for integer s up to x = 1e9, to a few ulps of the
// magnitude special.LgammaDiff reports (the basis of the rounding margin).
func TestLgammaDiff(t *testing.T) {
	for _, x := range []float64{1e-9, 1e-3, 0.1, 0.5, 1, 2.5, 7, 15.9, 16, 30, 123.4} {
		for _, s := range []float64{1e-6, 0.1, 0.5, 1, 1.7, 9, 19, 50, 199} {
			got, mag := special.LgammaDiff(x, s)
			want := special.Lgamma(x+s) - special.Lgamma(x)
			tol := 1e-14 * (1 + math.Abs(special.Lgamma(x+s)) + math.Abs(special.Lgamma(x)) + mag)
			if math.Abs(got-want) > tol {
				t.Errorf("L(%g, %g) = %.17g, want %.17g (tol %.3g)", x, s, got, want, tol)
			}
		}
	}
	for _, x := range []float64{0.3, 1, 17, 1e3, 1e6, 1e9} {
		for _, n := range []int{1, 2, 3, 10, 199} {
			var want kahan
			for j := 0; j < n; j++ {
				want.add(math.Log(x + float64(j)))
			}
			got, mag := special.LgammaDiff(x, float64(n))
			if math.Abs(got-want.value()) > 4*0x1p-52*(mag+math.Abs(want.value())) {
				t.Errorf("L(%g, %d) = %.17g, want %.17g", x, n, got, want.value())
			}
		}
	}
}

// TestExactGammaTerms: at integer orders λ = s + 1 the per-bin worst cases
// have cancellation-free closed forms (L is a sum of logs):
//
//	h₊ = (1/s)·Σ_{j=1}^{s} log1p(j/α),   h₋ = −(1/s)·Σ_{j=1}^{s} log1p(−j/α).
//
// The reported values (rounding margin included) must never be below them,
// and may exceed them only by the margin (relative 1e-6 at α = 1e6, where
// the terms are ~1e-6).
func TestExactGammaTerms(t *testing.T) {
	for _, s := range []int{1, 2, 4, 10, 100} {
		order := float64(s + 1)
		for _, alpha := range []float64{float64(s) + 1e-9, float64(s) + 0.01, float64(s) + 1, 2 * float64(s), 3.7 * float64(s), 1e3, 1e6} {
			var plus, minus kahan
			for j := 1; j <= s; j++ {
				fj := float64(j)
				plus.add(math.Log1p(fj / alpha))
				if fj < alpha/2 {
					minus.add(-math.Log1p(-fj / alpha))
				} else { // α − j is exact here (Sterbenz), and the logs differ by ≥ log 2
					minus.add(math.Log(alpha) - math.Log(alpha-fj))
				}
			}
			wantP, wantM := plus.value()/float64(s), minus.value()/float64(s)
			gotP, gotM := gammaRenyiPlus(order, alpha), gammaRenyiMinus(order, alpha)
			for _, c := range []struct {
				name      string
				got, want float64
			}{{"h+", gotP, wantP}, {"h-", gotM, wantM}} {
				if !(c.got >= c.want) || c.got-c.want > 1e-6*c.want {
					t.Errorf("λ=%g α=%.17g: %s = %.17g, closed form %.17g", order, alpha, c.name, c.got, c.want)
				}
			}
		}
	}
	if v := gammaRenyiMinus(3, 2); !math.IsInf(v, 1) {
		t.Errorf("h- at α = λ−1 must be +Inf, got %g", v)
	}
}

// enumerate calls f for every count vector x with entries in counts (d
// bins) and every admissible unit change δ of c (x′ = x − δ ≥ 0).
func enumerate(c exactCase, d int, counts []float64, f func(x, xp []float64)) {
	x := make([]float64, d)
	xp := make([]float64, d)
	delta := make([]int, d)
	var overX func(i int)
	var overD func(i, p, q int)
	overD = func(i, p, q int) {
		if i == d {
			if p+q == 0 {
				return
			}
			for j := range x {
				xp[j] = x[j] - float64(delta[j])
				if xp[j] < 0 {
					return
				}
			}
			f(x, xp)
			return
		}
		for _, v := range []int{0, 1, -1} {
			np, nq := p, q
			if v == 1 {
				np++
			} else if v == -1 {
				nq++
			}
			if np > c.pCap || nq > c.qCap || np+nq > c.k {
				continue
			}
			delta[i] = v
			overD(i+1, np, nq)
		}
	}
	overX = func(i int) {
		if i == d {
			overD(0, 0, 0)
			return
		}
		for _, v := range counts {
			x[i] = v
			overX(i + 1)
		}
	}
	overX(0)
}

// TestExactDenseGrid is the exact calibration's privacy test: on a dense
// grid of count vectors (d = 2…4 bins, counts 0, 1, 2, 3, 7, 40, 10⁴) and
// every admissible neighbour, the exact divergence of 000 eq. (19) never
// exceeds the target ε at the calibration order, nor RDP(λ′) at other
// orders up to near MaxOrder. It also checks that the worst case is
// reached, i.e. that RDP is the supremum, not just a bound: up to the
// total term of eq. (20), which is what keeps add/remove-type changes
// (δ_0 ≠ 0) below the supremum at finite counts. By 000 Appendix A's Taylor
// form that term, divided by λ′ − 1, is at most ½λ′·δ_0²·ψ′(u_0 − |δ_0|(λ′−1))
// with u_0 ≥ 10⁴ (the grid's largest count) and |δ_0| ≤ k.
func TestExactDenseGrid(t *testing.T) {
	counts := []float64{0, 1, 2, 3, 7, 40, 1e4}
	for _, c := range exactCases {
		for _, tg := range exactTargets {
			m := mustNew(t, exactSpec(c, tg.order, tg.eps))
			alpha := m.Params().Alpha
			orders := []float64{tg.order}
			for _, f := range []float64{0.02, 0.3, 0.7, 0.97} {
				orders = append(orders, 1+(m.MaxOrder()-1)*f)
			}
			for _, o := range orders {
				bound := m.RDP(o)
				if !(bound < math.Inf(1)) {
					t.Fatalf("%s: RDP(%g) = %g below MaxOrder %g", c.name, o, bound, m.MaxOrder())
				}
				worst := 0.0
				for d := 2; d <= 4; d++ {
					if d == 4 && c.k < 4 {
						continue // nothing new: at most 3 bins matter (2 changed + 1 unchanged)
					}
					enumerate(c, d, counts, func(x, xp []float64) {
						got, err := DirichletRenyi(o, shapes(x, 1, alpha), shapes(xp, 1, alpha))
						if err != nil {
							t.Fatal(err)
						}
						if !(got <= bound) {
							t.Fatalf("%s λ=%g ε=%g: D_%g(x=%v ‖ x′=%v) = %.17g > RDP %.17g", c.name, tg.order, tg.eps, o, x, xp, got, bound)
						}
						worst = math.Max(worst, got)
					})
				}
				if o == tg.order && !(bound <= tg.eps) {
					t.Fatalf("%s: RDP(λ) = %.17g > ε = %g", c.name, bound, tg.eps)
				}
				k := float64(c.k)
				gap := 0.5 * o * k * k * special.Trigamma(1e4-k*(o-1))
				if worst < bound-gap-1e-12 {
					t.Errorf("%s λ=%g ε=%g: grid maximum %.10g at order %g is below the reported worst case %.10g by more than %.3g", c.name, tg.order, tg.eps, worst, o, bound, gap)
				}
			}
		}
	}
}

// TestExactWorstCaseLocation shows the two monotonicities of the proof on
// eq. (19) directly: the divergence of one event added to a bin falls as
// that bin's count grows, and RISES (towards h₋) as an unchanged bin's count
// grows; a replace between two bins does not depend on the other bins.
func TestExactWorstCaseLocation(t *testing.T) {
	const alpha, order = 2.5, 3.0
	div := func(x, xp []float64) float64 {
		v, err := DirichletRenyi(order, shapes(x, 1, alpha), shapes(xp, 1, alpha))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	prev := math.Inf(1)
	for _, c := range []float64{0, 1, 2, 5, 20, 100} { // the changed bin's count
		v := div([]float64{c, 10}, []float64{c + 1, 10})
		if !(v < prev) {
			t.Errorf("add at count %g: D = %g, not below %g", c, v, prev)
		}
		prev = v
	}
	prev = 0
	hm := gammaRenyiMinus(order, alpha)
	for _, n := range []float64{0, 1, 10, 100, 1e4, 1e6} { // the other bin's count
		v := div([]float64{0, n}, []float64{1, n})
		if !(v > prev) || !(v < hm) {
			t.Errorf("add at 0 with other bin %g: D = %g, want in (%g, h- = %g)", n, v, prev, hm)
		}
		prev = v
	}
	if hm-prev > 1e-5*hm {
		t.Errorf("D with other bin 1e6 = %g does not approach h- = %g", prev, hm)
	}
	hp := gammaRenyiPlus(order, alpha)
	for _, n := range []float64{0, 3, 1e5} {
		v := div([]float64{1, 0, n}, []float64{0, 1, n})
		if math.Abs(v-(hp+hm)) > 1e-12 {
			t.Errorf("replace with other bin %g: D = %.17g, want h+ + h- = %.17g", n, v, hp+hm)
		}
	}
}

// TestExactGroupSplit: a replaced user whose old event is in group a and new
// event in group b: the two groups' releases are independent, so the joint
// divergence is D_a + D_b, each a one-sided (add/remove-like) change. It is
// below the per-release RDP of the concatenation (h₊ + h₋), and approaches
// it as the groups' other counts grow (within the total terms of eq. (20),
// ≤ ½λ′·ψ′(10⁴ − (λ′−1)) per group, see TestExactDenseGrid) — one
// per-release curve per (histogram, window) is exactly the right charge.
func TestExactGroupSplit(t *testing.T) {
	for _, tg := range exactTargets {
		m := mustNew(t, exactSpec(exactCases[0], tg.order, tg.eps))
		alpha := m.Params().Alpha
		for _, o := range []float64{tg.order, 1 + (m.MaxOrder()-1)*0.5, 1 + (m.MaxOrder()-1)*0.95} {
			bound := m.RDP(o)
			worst := 0.0
			for _, n := range []float64{0, 1, 5, 100, 1e4} {
				da, err := DirichletRenyi(o, shapes([]float64{1, 0, n}, 1, alpha), shapes([]float64{0, 0, n}, 1, alpha))
				if err != nil {
					t.Fatal(err)
				}
				db, err := DirichletRenyi(o, shapes([]float64{0, n}, 1, alpha), shapes([]float64{1, n}, 1, alpha))
				if err != nil {
					t.Fatal(err)
				}
				if !(da+db <= bound) {
					t.Fatalf("λ=%g: D_a + D_b = %.17g > RDP(%g) = %.17g", tg.order, da+db, o, bound)
				}
				worst = math.Max(worst, da+db)
			}
			if gap := 2 * 0.5 * o * special.Trigamma(1e4-(o-1)); worst < bound-gap-1e-12 {
				t.Errorf("λ=%g order %g: split maximum %g below RDP %g by more than %.3g", tg.order, o, worst, bound, gap)
			}
		}
	}
}

// TestExactBelowConcentrated: wherever the exact argument applies its α is
// strictly below concentrated's (000 eq. (8)), across orders and targets;
// the curve is nondecreasing in the order (as every Rényi divergence is) and
// never above Corollary 3's at the same α.
func TestExactBelowConcentrated(t *testing.T) {
	for _, c := range exactCases {
		for _, order := range []float64{1.1, 1.5, 2, 3, 5, 10, 20, 64, 200} {
			for _, eps := range []float64{0.001, 0.01, 0.1, 1, 5} {
				m := mustNew(t, exactSpec(c, order, eps))
				conc := mustNew(t, Spec{Kind: Dirichlet, Order: order, RDPEpsilon: eps, Sensitivity: c.sens})
				a, ac := m.Params().Alpha, conc.Params().Alpha
				if !(a < ac) {
					t.Errorf("%s λ=%g ε=%g: exact α = %g not below concentrated α = %g", c.name, order, eps, a, ac)
				}
				prev := 0.0
				for f := 0.001; f < 1; f += 0.01 {
					o := 1 + (m.MaxOrder()-1)*f
					v := m.RDP(o)
					if !(v >= prev) || !(v <= dirichletRDP(o, a, 1, c.sens.L2Sq, c.sens.LInf)) {
						t.Fatalf("%s λ=%g ε=%g: RDP(%g) = %g (previous %g, Corollary 3 %g)", c.name, order, eps, o, v, prev, dirichletRDP(o, a, 1, c.sens.L2Sq, c.sens.LInf))
					}
					prev = v
				}
				if v := m.RDP(m.MaxOrder()); !math.IsInf(v, 1) {
					t.Errorf("RDP(MaxOrder) = %g", v)
				}
			}
		}
	}
}

// TestExactFallback: outside the covered cases the exact calibration is
// concentrated (same α and curve), and says so.
func TestExactFallback(t *testing.T) {
	for _, s := range []Sensitivity{
		{L1: 4, L2Sq: 8, LInf: 2},   // replace with 2 events per user
		{L2Sq: 0.5, LInf: 1},        // no integer change fits Δ2²
		{L1: 0.5, L2Sq: 2, LInf: 1}, // nor Δ1
		{L2Sq: 2, LInf: 0.5},        // nor Δ∞
	} {
		spec := Spec{Kind: Dirichlet, Calibration: Exact, Order: 3, RDPEpsilon: 0.7, Sensitivity: s, Neighbour: Replace}
		if ok, why := ExactCovers(spec); ok || why == "" {
			t.Errorf("%+v: covered = %v (%q)", s, ok, why)
		}
		m := mustNew(t, spec)
		spec.Calibration = Concentrated
		c := mustNew(t, spec)
		if m.Params() != c.Params() || m.MaxOrder() != c.MaxOrder() || m.Spec().Calibration != Exact {
			t.Errorf("%+v: exact %+v / %g, concentrated %+v / %g", s, m.Params(), m.MaxOrder(), c.Params(), c.MaxOrder())
		}
		for _, o := range []float64{1.5, 3, 0.9 * c.MaxOrder()} {
			if m.RDP(o) != c.RDP(o) {
				t.Errorf("%+v: RDP(%g) = %g, concentrated %g", s, o, m.RDP(o), c.RDP(o))
			}
		}
		// The fallback releases real-valued counts, as concentrated does.
		out := make([]float64, 3)
		if err := m.Release(NewSeededRand(seed(3)), []float64{0.5, 2, 1}, out); err != nil {
			t.Error(err)
		}
	}
	if ok, why := ExactCovers(exactSpec(exactCases[0], 2, 1)); !ok {
		t.Errorf("unit replace not covered: %s", why)
	}
}

// TestExactRelease: a covered exact mechanism releases whole-number counts
// only (its guarantee is over ℕ^d), onto the simplex; bad neighbours and
// calibrations are typed errors.
func TestExactRelease(t *testing.T) {
	m := mustNew(t, exactSpec(exactCases[0], 2, 1))
	rng := NewSeededRand(seed(4))
	out := make([]float64, 4)
	if err := m.(Unrounded).ReleaseUnrounded(rng, []float64{0, 3, 1e6, 7}, out); err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, v := range out {
		if !(v > 0) {
			t.Fatalf("entry %g", v)
		}
		sum += v
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Errorf("sum %g", sum)
	}
	if err := m.Release(rng, []float64{0, 3, 1e6, 7}, out); err != nil {
		t.Fatal(err)
	}
	checkGrid(t, "exact", out)
	if err := m.Release(rng, []float64{0, 1.5}, out[:2]); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("fractional count: %v", err)
	}
	tiny := mustNew(t, exactSpec(exactCases[0], 1.5, 5)) // α < 1: log-space sampler
	if err := tiny.(Unrounded).ReleaseUnrounded(rng, []float64{0, 0, 2}, out[:3]); err != nil || !(out[0] > 0) {
		t.Errorf("α = %g: %v %v", tiny.Params().Alpha, err, out[:3])
	}
	spec := exactSpec(exactCases[0], 2, 1)
	spec.Neighbour = "swap"
	if _, err := New(spec); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("neighbour swap: %v", err)
	}
}

// BenchmarkNewExact: one exact calibration (the stage's unit replace case).
func BenchmarkNewExact(b *testing.B) {
	for _, tg := range []struct{ order, eps float64 }{{2, 1}, {2, 0.01}, {20, 0.5}} {
		spec := exactSpec(exactCases[0], tg.order, tg.eps)
		b.Run("", func(b *testing.B) {
			for b.Loop() {
				if _, err := New(spec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
