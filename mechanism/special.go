package mechanism

import "math"

// trigamma returns ψ′(x), the derivative of the digamma function, for x > 0,
// and +Inf for x ≤ 0 or NaN (callers only evaluate it where 000 Theorem 2 /
// Corollary 3 apply, and +Inf is the conservative "no bound" answer).
//
// Method: the recurrence ψ′(x) = ψ′(x+1) + 1/x² shifts x to ≥ 12, where the
// asymptotic series ψ′(x) ~ 1/x + 1/(2x²) + Σ_{k≥1} B_{2k}/x^{2k+1}
// (Abramowitz & Stegun 6.4.12) is summed through B₁₄. The first omitted term,
// |B₁₆|/x¹⁷ ≤ 7.1/12¹⁷, is below 4·10⁻¹⁸ relative to ψ′(12) ≈ 0.087, so the
// error is rounding only (TestTrigammaAccuracy checks ≤ 4·10⁻¹⁵ relative
// against exact values and gonum's mathext.Zeta(2, x), the Hurwitz zeta
// ζ(2, x) = ψ′(x)).
func trigamma(x float64) float64 {
	if !(x > 0) {
		return math.Inf(1)
	}
	if math.IsInf(x, 1) {
		return 0
	}
	// Shift with the recurrence; terms are added from the smallest (largest
	// x) upward below, so accumulate them first and add the tail last.
	var acc float64
	for x < 12 {
		acc += 1 / (x * x)
		x++
	}
	ix := 1 / x
	z := ix * ix
	// Bernoulli numbers B2..B14: 1/6, -1/30, 1/42, -1/30, 5/66, -691/2730, 7/6.
	tail := ix * z * (1.0/6 + z*(-1.0/30+z*(1.0/42+z*(-1.0/30+z*(5.0/66+z*(-691.0/2730+z*(7.0/6)))))))
	return acc + (ix + 0.5*z + tail)
}

// bisect narrows a bracket [good, bad] (in either order) of a predicate that
// holds at good and fails at bad, halving until the two ends are adjacent
// float64s, and returns the end where ok holds. The calibrations use it with
// ok(x) = "the RDP bound at x is ≤ the target ε", so the calibrated parameter
// never overshoots the privacy target, whatever the rounding.
//
// Bisection rather than Newton or Brent: it needs no derivative, cannot leave
// the bracket, and the ~60 evaluations of trigamma it takes for a bracket of
// ratio 2 cost a few microseconds (BenchmarkNew).
func bisect(ok func(float64) bool, good, bad float64) float64 {
	for i := 0; i < 4096; i++ {
		mid := good + (bad-good)/2
		if mid == good || mid == bad {
			break
		}
		if ok(mid) {
			good = mid
		} else {
			bad = mid
		}
	}
	return good
}
