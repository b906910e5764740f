package budget

import (
	"errors"
	"math"
	"testing"

	"github.com/dpstage/stage/mechanism"
	"gonum.org/v1/gonum/mathext"
)

// recomposeGaussian recomputes a Gaussian plan's total ε from σ alone: k
// releases of ε̂(λ) = λΔ2²/(2σ²) on the grid, converted by the independent
// bisection of eq. (2).
func recomposeGaussian(orders []float64, l2sq, sigma float64, k int, delta float64) float64 {
	rdp := make([]float64, len(orders))
	for i, lam := range orders {
		rdp[i] = float64(k) * lam * l2sq / (2 * sigma * sigma)
	}
	return directEpsilon(orders, rdp, delta)
}

func TestPlanGaussianSynthetic(t *testing.T) {
	for _, tc := range []struct {
		eps, delta float64
		releases   int
		order      float64
	}{
		{1, 1e-6, 24, 2},
		{1, 1e-6, 1, 2},
		{0.5, 1e-9, 1440, 3.5},
		{10, 1e-5, 7, 2},
	} {
		tmpl := mechanism.Spec{Kind: mechanism.Gaussian, Order: tc.order, Sensitivity: mechanism.Sensitivity{L2Sq: 2, LInf: 1}}
		p, err := newPlan(fakeNew, tmpl, tc.eps, tc.delta, tc.releases)
		if err != nil {
			t.Fatal(err)
		}
		orders := p.PerRelease.Orders()
		sigma := p.Mechanism.Params().Sigma
		got := recomposeGaussian(orders, 2, sigma, tc.releases, tc.delta)
		if got > tc.eps*(1+1e-12) || p.Epsilon > tc.eps {
			t.Errorf("%+v: recomposed ε = %.15g (plan says %.15g) exceeds %v", tc, got, p.Epsilon, tc.eps)
		}
		// Tight: 0.1% more per-release RDP would exceed.
		sigma2 := math.Sqrt(tc.order * 2 / (2 * p.Spec.RDPEpsilon * (1 + 1e-3)))
		if over := recomposeGaussian(orders, 2, sigma2, tc.releases, tc.delta); !(over > tc.eps) {
			t.Errorf("%+v: ε_r·(1+1e-3) still fits (ε = %v): plan not tight", tc, over)
		}
		if p.Releases != tc.releases || p.Delta != tc.delta || p.Spec.Order != tc.order {
			t.Errorf("plan fields: %+v", p)
		}
		if v, ok := p.Total.At(tc.order); !ok || math.Abs(v-float64(tc.releases)*p.Spec.RDPEpsilon) > 1e-12*v {
			t.Errorf("total at the calibration order = %v, want releases·ε_r = %v", v, float64(tc.releases)*p.Spec.RDPEpsilon)
		}
		// The plan's accountant accepts exactly Releases spends.
		a, err := p.NewAccountant(tc.eps)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < tc.releases; i++ {
			if err := a.Spend(p.PerRelease); err != nil {
				t.Fatalf("%+v: planned spend %d refused: %v", tc, i, err)
			}
		}
		if err := a.Spend(p.PerRelease); !errors.Is(err, ErrBudgetExceeded) {
			t.Errorf("%+v: spend beyond the plan accepted", tc)
		}
	}
}

// The closed-form Dirichlet's curve only exists below MaxOrder = α/Δ∞ + 1,
// which shrinks as ε_r grows: the plan uses only finite orders.
func TestPlanDirichletFiniteOrders(t *testing.T) {
	tmpl := mechanism.Spec{Kind: mechanism.Dirichlet, Calibration: mechanism.ClosedForm, Order: 2,
		Sensitivity: mechanism.Sensitivity{L2Sq: 2, LInf: 1}}
	const eps, delta, k = 1.0, 1e-6, 24
	p, err := newPlan(fakeNew, tmpl, eps, delta, k)
	if err != nil {
		t.Fatal(err)
	}
	alpha := p.Mechanism.Params().Alpha
	maxOrder := alpha + 1
	for _, pt := range p.PerRelease.Points() {
		if finite := !math.IsInf(pt.Epsilon, 1); finite != (pt.Order < maxOrder) {
			t.Errorf("order %v (MaxOrder %v): ε̂ = %v", pt.Order, maxOrder, pt.Epsilon)
		}
	}
	if !(p.Order < maxOrder) {
		t.Errorf("conversion at order %v ≥ MaxOrder %v", p.Order, maxOrder)
	}
	// Recompose independently from α: 000 eq. (8) with ψ′ = ζ(2, ·).
	recompose := func(alpha float64) float64 {
		orders := p.PerRelease.Orders()
		rdp := make([]float64, len(orders))
		for i, lam := range orders {
			rdp[i] = math.Inf(1)
			if x := alpha - (lam - 1); x > 0 {
				rdp[i] = k * (0.5*lam*2*mathext.Zeta(2, x) + residualByHand(lam, 2)) // Δ2² = 2 changed unit coordinates
			}
		}
		return directEpsilon(orders, rdp, delta)
	}
	if got := recompose(alpha); got > eps*(1+1e-12) {
		t.Errorf("recomposed ε = %v > %v", got, eps)
	}
	// Tight: α of eq. (9) at ε_r·(1+1e-3) exceeds.
	alpha2 := 2*2/(2*p.Spec.RDPEpsilon*(1+1e-3)) + 1 + 1
	if over := recompose(alpha2); !(over > eps) {
		t.Errorf("ε_r·(1+1e-3) still fits (ε = %v)", over)
	}
	t.Logf("closed-form Dirichlet, 24 releases in (1, 1e-6): ε_r = %.6g at λ=2, α = %.6g, MaxOrder %.6g, converted at λ=%v", p.Spec.RDPEpsilon, alpha, maxOrder, p.Order)
}

func TestPlanErrors(t *testing.T) {
	tmpl := mechanism.Spec{Kind: mechanism.Gaussian, Order: 2, Sensitivity: mechanism.Sensitivity{L2Sq: 2, LInf: 1}}
	for _, tc := range []struct {
		eps, delta float64
		releases   int
		order      float64
		want       error
	}{
		{0, 1e-6, 1, 2, ErrInvalidArgument},
		{-1, 1e-6, 1, 2, ErrInvalidArgument},
		{math.NaN(), 1e-6, 1, 2, ErrInvalidArgument},
		{math.Inf(1), 1e-6, 1, 2, ErrInvalidArgument},
		{1, 0, 1, 2, ErrInvalidArgument},
		{1, 1, 1, 2, ErrInvalidArgument},
		{1, math.NaN(), 1, 2, ErrInvalidArgument},
		{1, 1e-6, 0, 2, ErrInvalidArgument},
		{1, 1e-6, 1, 1, ErrInvalidArgument},
		{1, 1e-6, 1, math.NaN(), ErrInvalidArgument},
		// Below what the conversion can reach on the grid at any noise.
		{0.001, 1e-6, 1, 2, ErrInfeasible},
	} {
		tm := tmpl
		tm.Order = tc.order
		if _, err := newPlan(fakeNew, tm, tc.eps, tc.delta, tc.releases); !errors.Is(err, tc.want) {
			t.Errorf("%+v: err = %v, want %v", tc, err, tc.want)
		}
	}
	var inf *InfeasibleError
	_, err := newPlan(fakeNew, tmpl, 0.001, 1e-6, 1)
	if !errors.As(err, &inf) || !(inf.MinEpsilon > 0.001) {
		t.Errorf("infeasible: %v", err)
	} else {
		t.Log(err)
	}
	// A template the mechanism rejects: its error, wrapped.
	bad := tmpl
	bad.Kind = "nope"
	if _, err := newPlan(fakeNew, bad, 1, 1e-6, 1); err == nil || errors.Is(err, ErrInfeasible) {
		t.Errorf("bad template: %v", err)
	}
}
