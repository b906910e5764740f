package budget

import (
	"math"

	"github.com/dpstage/stage/internal/lib/special"
)

// dirichletRDP is ε̂(λ) of 000 Theorem 2 eq. (8) (= Theorem 4's ε̂):
// ½·λ·Δ2²·ψ′(α_m − (λ−1)Δ∞), +Inf outside (1, α_m/Δ∞ + 1).
func dirichletRDP(order, alphaMin, l2sq, linf float64) float64 {
	return 0.5 * order * l2sq * special.Trigamma(alphaMin-(order-1)*linf)
}

// DirichletDelta is 000 Theorem 4: a single draw from Dir(x + α) with
// α_m = min_i α_i = alphaMin, for statistics with ℓ2- and ℓ∞-sensitivity
// Δ2² = l2sq and Δ∞ = linf, is (ε, δ)-DP with δ the minimum over
// λ ∈ (1, α_m/Δ∞ + 1) of
//
//	h(λ) = exp((λ−1)(ε̂(λ) − ε)) / (λ−1) · (1 − 1/λ)^λ,                  (13)
//	ε̂(λ) = ½·λ·Δ2²·ψ′(α_m − (λ−1)Δ∞).
//
// It returns that δ (capped at 1; never rounded down to 0) and the
// minimizing order. f = log h
// (eq. (12)) is strictly convex on the interval (000 §3.4), hence unimodal,
// and so is f as a function of t = log(λ−1); the minimum is found by golden
// section search on f(t) over t ∈ [log(α_m/Δ∞) − 80, log(α_m/Δ∞)], in log
// space throughout so that nothing overflows (h spans hundreds of orders of
// magnitude across the interval). f(1⁺) = 0 and f′(1⁺) = −∞ (000 §3.4), so
// the minimizer is interior and the lower limit only matters when the
// minimum is within e⁻⁸⁰·α_m/Δ∞ of 1, where δ rounds to 1 anyway.
//
// The returned δ is h at the returned order (evaluated with eq. (12) in the
// numerically stable form (a) of the conversion, see convert.go), so it is
// a valid δ by 000 Lemma 1 even where the search is not exact.
//
// For Dir(r·x + α) (000 Corollary 3) pass r²·Δ2² and r·Δ∞.
//
// This is the ideal mechanism's δ: a release rounded to the grid adds the
// residual (mechanism.GridResidualRDP), which the stage's charges include
// ([ChargeOf]) and this function does not; the stage does not use it to
// charge.
//
// Errors ([ErrInvalidArgument]): any argument ≤ 0, NaN or +Inf.
func DirichletDelta(alphaMin, l2sq, linf, eps float64) (delta, order float64, err error) {
	for _, a := range []struct {
		name string
		v    float64
	}{{"alpha_min", alphaMin}, {"l2 sensitivity squared", l2sq}, {"linf sensitivity", linf}, {"epsilon", eps}} {
		if err := checkEpsilon(a.name, a.v); err != nil {
			return 0, 0, err
		}
	}
	f := func(t float64) float64 {
		lam := 1 + math.Exp(t)
		r := dirichletRDP(lam, alphaMin, l2sq, linf)
		if math.IsInf(r, 1) || math.IsNaN(r) {
			return math.Inf(1)
		}
		v := logDeltaAt(lam, r, eps) // log h(λ), eq. (12)
		if math.IsNaN(v) {
			return math.Inf(1)
		}
		return v
	}
	hi := math.Log(alphaMin / linf) // t at the open right end λ = α_m/Δ∞ + 1
	lo := hi - 80
	t, ft := goldenMin(f, lo, hi)
	if math.IsInf(ft, 1) || ft >= 0 {
		// No interior point below 1 (only if every probe rounded to the
		// ends); δ = 1 is always valid.
		return 1, 1 + math.Exp(t), nil
	}
	return expDelta(ft), 1 + math.Exp(t), nil
}

// goldenMin minimizes a unimodal f on [a, b] by golden section search and
// returns the best point evaluated and its value. +Inf (and ties) move the
// bracket left, which is where a strictly convex f that blows up at the right
// end of its domain has its minimum.
func goldenMin(f func(float64) float64, a, b float64) (x, fx float64) {
	const invPhi = 0.6180339887498949 // (√5 − 1)/2
	c := b - invPhi*(b-a)
	d := a + invPhi*(b-a)
	fc, fd := f(c), f(d)
	for i := 0; i < 200 && b-a > 1e-13*math.Max(1, math.Abs(a)+math.Abs(b)); i++ {
		if fc <= fd {
			b, d, fd = d, c, fc
			c = b - invPhi*(b-a)
			fc = f(c)
		} else {
			a, c, fc = c, d, fd
			d = a + invPhi*(b-a)
			fd = f(d)
		}
	}
	if fc <= fd {
		return c, fc
	}
	return d, fd
}
