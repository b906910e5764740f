package budget

import (
	"errors"
	"math"
	"testing"

	"gonum.org/v1/gonum/mathext"
)

// bruteH evaluates h(λ) of 000 eq. (13) as written (no logs), with
// ψ′ = ζ(2, ·).
func bruteH(lam, alphaMin, l2sq, linf, eps float64) float64 {
	x := alphaMin - (lam-1)*linf
	if x <= 0 {
		return math.Inf(1)
	}
	epsHat := 0.5 * lam * l2sq * mathext.Zeta(2, x)
	return math.Exp((lam-1)*(epsHat-eps)) / (lam - 1) * math.Pow(1-1/lam, lam)
}

// Theorem 4 against a brute-force scan of h(λ) over (1, α_m/Δ∞ + 1).
func TestDirichletDeltaBruteForce(t *testing.T) {
	cases := []struct{ alpha, l2sq, linf, eps float64 }{
		{3.46, 2, 1, 1},   // 000's worked example prior
		{4, 2, 1, 1},      // closed form of the same example
		{10, 2, 1, 0.5},   // 000 §5 prior
		{100, 2, 1, 1},    // large prior
		{1000, 2, 1, 0.1}, // very large prior, small ε
		{50, 2 * 0.09, 0.3, 2},
		{2.5, 8, 2, 3}, // contributions of 2 events
	}
	for _, tc := range cases {
		delta, order, err := DirichletDelta(tc.alpha, tc.l2sq, tc.linf, tc.eps)
		if err != nil {
			t.Fatal(err)
		}
		upper := tc.alpha/tc.linf + 1
		if !(order > 1 && order < upper) {
			t.Errorf("%+v: order %v outside (1, %v)", tc, order, upper)
		}
		// The returned δ is h at the returned order.
		if h := bruteH(order, tc.alpha, tc.l2sq, tc.linf, tc.eps); math.Abs(h-delta) > 1e-9*h {
			t.Errorf("%+v: δ = %v but h(%v) = %v", tc, delta, order, h)
		}
		// Scan: 100k points, uniform in λ and log-uniform in λ−1.
		scan, scanAt := math.Inf(1), 0.0
		const n = 50000
		for i := 1; i < n; i++ {
			for _, lam := range []float64{
				1 + (upper-1)*float64(i)/n,
				1 + (upper-1)*math.Exp(-30*float64(i)/n),
			} {
				if h := bruteH(lam, tc.alpha, tc.l2sq, tc.linf, tc.eps); h < scan {
					scan, scanAt = h, lam
				}
			}
		}
		if delta > scan*(1+1e-12) {
			t.Errorf("%+v: δ = %.15g (λ=%v) above the scan minimum %.15g (λ=%v)", tc, delta, order, scan, scanAt)
		}
		if delta < scan*(1-1e-6) {
			t.Errorf("%+v: δ = %.15g (λ=%v) far below the scan minimum %.15g (λ=%v)", tc, delta, order, scan, scanAt)
		}
		t.Logf("α_m=%v Δ2²=%v Δ∞=%v ε=%v: δ = %.6g at λ = %.6g (scan %.6g at %.6g)", tc.alpha, tc.l2sq, tc.linf, tc.eps, delta, order, scan, scanAt)
	}
}

// Theorem 4 agrees with the grid conversion of the Dirichlet curve: the
// continuous minimum is at most the grid minimum.
func TestDirichletDeltaVersusGrid(t *testing.T) {
	alpha, l2sq, linf, eps := 10.0, 2.0, 1.0, 1.0
	c := CurveOf(funcCurve(func(o float64) float64 { return dirichletRDP(o, alpha, l2sq, linf) }), DefaultOrders())
	grid, _, err := c.Delta(eps)
	if err != nil {
		t.Fatal(err)
	}
	thm4, _, err := DirichletDelta(alpha, l2sq, linf, eps)
	if err != nil {
		t.Fatal(err)
	}
	if thm4 > grid || thm4 < 0.9*grid {
		t.Errorf("Theorem 4 δ = %v, grid δ = %v", thm4, grid)
	}
}

func TestDirichletDeltaBadInputs(t *testing.T) {
	good := []float64{3.46, 2, 1, 1}
	for i := range good {
		for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
			a := append([]float64(nil), good...)
			a[i] = bad
			d, o, err := DirichletDelta(a[0], a[1], a[2], a[3])
			if !errors.Is(err, ErrInvalidArgument) || d != 0 || o != 0 {
				t.Errorf("DirichletDelta(%v) = %v, %v, %v", a, d, o, err)
			}
		}
	}
	// Extreme but valid: no NaN, δ in (0, 1].
	for _, a := range [][]float64{{1e-9, 2, 1, 1}, {1e9, 2, 1, 1e-9}, {3, 2, 1, 700}, {3, 1e9, 1, 1e-3}} {
		d, o, err := DirichletDelta(a[0], a[1], a[2], a[3])
		if err != nil || !(d > 0 && d <= 1) || math.IsNaN(o) {
			t.Errorf("DirichletDelta(%v) = %v, %v, %v", a, d, o, err)
		}
	}
}
