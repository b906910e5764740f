package budget

import (
	"errors"
	"math"
	"testing"
)

// Gaussian mechanism, Δ2 = 1: k releases with noise σ compose to
// ε̂(λ) = kλ/(2σ²). The expected (ε, δ) below were computed by hand (a
// separate Python evaluation of 000 eq. (2) solved for ε, min over the same
// grid); the tests also check them against an independent bisection of the
// plain (non-log) eq. (2), a direct minimization over a fine λ grid, and the
// exact privacy profile of the Gaussian mechanism.
func TestToEpsilonGaussianHandComputed(t *testing.T) {
	cases := []struct {
		k, sigma, delta float64
		wantEps         float64
		wantOrder       float64
	}{
		{1, 1, 1e-5, 4.728507067217623, 5.4},
		{10, 1, 1e-6, 20.551991629803823, 2.6},
		{24, 5, 1e-6, 5.102428660953289, 6.0},
	}
	for _, tc := range cases {
		orders := DefaultOrders()
		c := CurveOf(gaussCurve{l2sq: 1, sigma: tc.sigma}, orders).Scale(tc.k)
		eps, order, err := c.Epsilon(tc.delta)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(eps-tc.wantEps) > 1e-12*tc.wantEps || order != tc.wantOrder {
			t.Errorf("k=%v σ=%v δ=%v: ToEpsilon = (%.17g, %v), want (%.17g, %v)", tc.k, tc.sigma, tc.delta, eps, order, tc.wantEps, tc.wantOrder)
		}
		// Independent: bisection of the plain eq. (2), order by order.
		if d := directEpsilon(orders, c.Epsilons(), tc.delta); math.Abs(d-eps) > 1e-9*eps {
			t.Errorf("k=%v σ=%v: direct eq. (2) bisection gives %.17g, ToEpsilon %.17g", tc.k, tc.sigma, d, eps)
		}
		// Plugging (ε, λ) back into eq. (2) gives δ.
		rdp, _ := c.At(order)
		back := math.Exp((order-1)*(rdp-eps)) / (order - 1) * math.Pow(1-1/order, order)
		if math.Abs(back-tc.delta) > 1e-9*tc.delta {
			t.Errorf("eq. (2) at the returned (ε, λ) gives δ = %v, want %v", back, tc.delta)
		}
		// Direct minimization of the same bound over a fine λ grid on
		// (1, 1100]: the continuous minimum is below the grid's, and the
		// default grid loses little.
		cont := math.Inf(1)
		c2 := tc.k / (2 * tc.sigma * tc.sigma)
		for lam := 1.001; lam <= 1100; lam += 0.001 {
			cont = math.Min(cont, c2*lam+math.Log1p(-1/lam)-(math.Log(tc.delta)+math.Log(lam))/(lam-1))
		}
		if cont > eps+1e-12 || eps-cont > 0.01*eps {
			t.Errorf("k=%v σ=%v: fine-grid minimum %.10g vs default grid %.10g", tc.k, tc.sigma, cont, eps)
		}
		// Never below the exact privacy profile of the Gaussian mechanism
		// (k releases of σ = one release with μ = √k/σ): δ(ε) = Φ(−ε/μ + μ/2)
		// − e^ε Φ(−ε/μ − μ/2) (Balle & Wang 2018, Theorem 8) must be ≤ δ.
		mu := math.Sqrt(tc.k) / tc.sigma
		phi := func(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
		if exact := phi(-eps/mu+mu/2) - math.Exp(eps)*phi(-eps/mu-mu/2); exact > tc.delta {
			t.Errorf("k=%v σ=%v: exact Gaussian δ at ε=%v is %v > %v: conversion under-reports", tc.k, tc.sigma, eps, exact, tc.delta)
		}
	}
}

func TestToDeltaGaussianHandComputed(t *testing.T) {
	// k = 24, σ = 5, ε = 1: δ = 0.23489414229389718 at λ = 2.2 (Python).
	c := CurveOf(gaussCurve{l2sq: 1, sigma: 5}, DefaultOrders()).Scale(24)
	d, order, err := c.Delta(1)
	if err != nil {
		t.Fatal(err)
	}
	if want := 0.23489414229389718; math.Abs(d-want) > 1e-12*want || order != 2.2 {
		t.Errorf("ToDelta = (%.17g, %v), want (%.17g, 2.2)", d, order, want)
	}
	// Round trip: ToDelta at ToEpsilon's ε gives back δ.
	for _, delta := range []float64{1e-3, 1e-6, 1e-10, 1e-30} {
		eps, _, err := c.Epsilon(delta)
		if err != nil {
			t.Fatal(err)
		}
		back, _, err := c.Delta(eps)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(back-delta) > 1e-9*delta {
			t.Errorf("round trip δ=%v → ε=%v → δ=%v", delta, eps, back)
		}
	}
}

func TestConversionEdgeCases(t *testing.T) {
	g := []float64{1.5, 2, 64}
	inf, _ := NewCurve(g, []float64{math.Inf(1), math.Inf(1), math.Inf(1)})
	if e, o, err := inf.Epsilon(1e-6); err != nil || !math.IsInf(e, 1) || o != 0 {
		t.Errorf("all +Inf: ToEpsilon = %v, %v, %v", e, o, err)
	}
	if d, _, err := inf.Delta(1); err != nil || d != 1 {
		t.Errorf("all +Inf: ToDelta = %v, %v", d, err)
	}
	zero, _ := ZeroCurve(g)
	if e, _, err := zero.Epsilon(1e-6); err != nil || e != 0 {
		t.Errorf("zero curve: ToEpsilon = %v, %v", e, err)
	}
	if d, _, err := zero.Delta(0.1); err != nil || d != 0 {
		t.Errorf("zero curve: ToDelta = %v, %v", d, err)
	}
	// A single 0 is not (0, 0)-DP: the other orders' values still count
	// (issue #15: a rounded-down 0 at one order must not erase the curve).
	part, _ := NewCurve(g, []float64{0, 5, 50})
	if e, o, err := part.Epsilon(1e-6); err != nil || !(e > 0) || o == 0 {
		t.Errorf("one zero order: ToEpsilon = %v at order %v, %v (want > 0)", e, o, err)
	}
	if d, _, err := part.Delta(0.5); err != nil || !(d > 0) {
		t.Errorf("one zero order: ToDelta = %v, %v (want > 0)", d, err)
	}
	// Huge values: no overflow to NaN.
	huge, _ := NewCurve(g, []float64{1e300, math.MaxFloat64, 1e308})
	if e, _, err := huge.Epsilon(1e-6); err != nil || math.IsNaN(e) || e < 1e300 {
		t.Errorf("huge: ToEpsilon = %v, %v", e, err)
	}
	if d, _, err := huge.Delta(1); err != nil || d != 1 {
		t.Errorf("huge: ToDelta = %v, %v", d, err)
	}
	// Tiny curve at a large order: clamped at 0, never negative.
	tiny, _ := NewCurve([]float64{1024}, []float64{1e-12})
	if e, _, err := tiny.Epsilon(0.5); err != nil || e != 0 {
		t.Errorf("tiny: ToEpsilon = %v, %v (want clamp to 0)", e, err)
	}
	c := CurveOf(gaussCurve{1, 1}, g)
	for _, bad := range []float64{0, 1, -1e-6, 1.5, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, _, err := c.Epsilon(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ToEpsilon δ=%v: %v", bad, err)
		}
	}
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, _, err := c.Delta(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ToDelta ε=%v: %v", bad, err)
		}
	}
	if _, _, err := (Curve{}).Epsilon(1e-6); !errors.Is(err, ErrEmptyCurve) {
		t.Errorf("ToEpsilon empty: %v", err)
	}
	if _, _, err := (Curve{}).Delta(1); !errors.Is(err, ErrEmptyCurve) {
		t.Errorf("ToDelta empty: %v", err)
	}
	var ae *ArgumentError
	_, _, err := c.Epsilon(2)
	if !errors.As(err, &ae) || ae.Name != "delta" || err.Error() != "budget: delta = 2: must be in (0, 1)" {
		t.Errorf("error = %q", err)
	}
}

// The error-free forms report no guarantee on bad input.
func TestToEpsilonToDeltaNoGuaranteeOnBadInput(t *testing.T) {
	c := CurveOf(gaussCurve{1, 1}, DefaultOrders())
	for _, bad := range []float64{0, 1, math.NaN()} {
		if e, o := ToEpsilon(c, bad); !math.IsInf(e, 1) || o != 0 {
			t.Errorf("ToEpsilon(δ=%v) = %v, %v", bad, e, o)
		}
	}
	for _, bad := range []float64{0, -1, math.NaN()} {
		if d, o := ToDelta(c, bad); d != 1 || o != 0 {
			t.Errorf("ToDelta(ε=%v) = %v, %v", bad, d, o)
		}
	}
	if e, _ := ToEpsilon(Curve{}, 1e-6); !math.IsInf(e, 1) {
		t.Errorf("ToEpsilon(empty) = %v", e)
	}
	e1, o1 := ToEpsilon(c, 1e-6)
	e2, o2, _ := c.Epsilon(1e-6)
	if e1 != e2 || o1 != o2 {
		t.Errorf("ToEpsilon %v,%v vs Epsilon %v,%v", e1, o1, e2, o2)
	}
}
