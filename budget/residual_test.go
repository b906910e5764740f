package budget

import (
	"math"
	"testing"

	"github.com/dpstage/stage/mechanism"
)

// Issue #21 item 1: one release of every floating-point (rounded)
// mechanism is charged its RDP curve plus the grid residual e_k(λ) at every
// order of the grid; the exact integer samplers are charged their curve
// alone.
func TestChargeOfAddsGridResidual(t *testing.T) {
	orders, err := WithOrder(DefaultOrders(), 2)
	if err != nil {
		t.Fatal(err)
	}
	// Hand values: e_2(2) = 2·[2·log(1+ρ) − log(1−ρ)] = 6ρ − ρ² + O(ρ³)
	// = 5.99999·10⁻⁵ (ρ = 10⁻⁵); e_2(1.1) = 2·[1.1·log(1+ρ) − 0.1·log(1−ρ)]/0.1
	// = 2·(1.1·(ρ − ρ²/2) + 0.1·(ρ + ρ²/2))/0.1 + O(ρ³) = 24ρ − 10ρ²
	// = 2.39999·10⁻⁴.
	for _, hv := range []struct{ order, want float64 }{{2, 6e-5 - 1e-10}, {1.1, 24e-5 - 10e-10}} {
		if got := mechanism.GridResidualRDP(hv.order, 2); math.Abs(got-hv.want) > 1e-14 {
			t.Errorf("e_2(%v) = %.15g, want %.15g", hv.order, got, hv.want)
		}
	}
	sens := mechanism.Sensitivity{L1: 2, L2Sq: 2, LInf: 1} // replace, one event per user
	for _, tc := range []struct {
		spec     mechanism.Spec
		residual bool
	}{
		{mechanism.Spec{Kind: mechanism.Dirichlet, Calibration: mechanism.Concentrated, Order: 2, RDPEpsilon: 0.01, Sensitivity: sens}, true},
		{mechanism.Spec{Kind: mechanism.Dirichlet, Calibration: mechanism.Exact, Order: 2, RDPEpsilon: 0.01, Sensitivity: sens, Neighbour: mechanism.Replace}, true},
		{mechanism.Spec{Kind: mechanism.Dirichlet, Calibration: mechanism.Diffuse, Order: 2, RDPEpsilon: 0.01, Sensitivity: sens}, true},
		{mechanism.Spec{Kind: mechanism.Dirichlet, Calibration: mechanism.Concentrated, Order: 2, RDPEpsilon: 0.01,
			Sensitivity: mechanism.Sensitivity{L1: 6, L2Sq: 18, LInf: 3}}, true}, // replace, 3 events per user: k = 6
		{mechanism.Spec{Kind: mechanism.Gaussian, Order: 2, RDPEpsilon: 0.01, Sensitivity: sens}, false},
		{mechanism.Spec{Kind: mechanism.Laplace, Order: 2, RDPEpsilon: 0.01, Sensitivity: sens}, false},
	} {
		m, err := mechanism.New(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		charge, curve := ChargeOf(m, orders), CurveOf(m, orders)
		k := math.Min(tc.spec.Sensitivity.L1, tc.spec.Sensitivity.L2Sq)
		for i, pt := range charge.Points() {
			c := curve.Points()[i].Epsilon
			want := c
			if tc.residual && !math.IsInf(c, 1) {
				want = c + residualByHand(pt.Order, k)
			}
			if math.IsInf(want, 1) != math.IsInf(pt.Epsilon, 1) || pt.Epsilon < want*(1-1e-15) || pt.Epsilon > want*(1+1e-11) {
				t.Errorf("%s %s k=%v: charge at λ=%v is %.15g, want curve %.15g + residual = %.15g",
					tc.spec.Kind, tc.spec.Calibration, k, pt.Order, pt.Epsilon, c, want)
			}
			// The charged form is within issue #21's ρ′ form (an upper bound),
			// up to the curve's own rounding up (mechanism.UpperRDP: a relative
			// 1.7·10⁻¹² of the curve at most here, 2·10⁻⁸ of a curve of 1.1·10⁴
			// next to the diffuse calibration's MaxOrder).
			if tc.residual && !math.IsInf(c, 1) && pt.Epsilon-c > residualIssueForm(pt.Order, k)*(1+1e-11)+c*1e-11 {
				t.Errorf("λ=%v: residual %.15g above the issue's form %.15g", pt.Order, pt.Epsilon-c, residualIssueForm(pt.Order, k))
			}
		}
	}
}

// The average kind's (ε, δ) with the residual: ε + d·log((1+ρ)/(1−ρ)),
// δ·(1+ρ)^d (issue #21: "ε + 2dρ").
func TestGridResidualDP(t *testing.T) {
	e, d := mechanism.GridResidualDP(0.5, 1e-9, 3)
	if want := 0.5 + 6e-5; math.Abs(e-want) > 1e-13 || e < 0.5+3*(math.Log(1+1e-5)-math.Log(1-1e-5)) {
		t.Errorf("ε = %.15g, want 0.5 + 2·3·ρ = %.15g", e, want)
	}
	if want := 1e-9 * math.Pow(1+1e-5, 3); d < want || d > want*(1+1e-11) {
		t.Errorf("δ = %.15g, want %.15g", d, want)
	}
}
