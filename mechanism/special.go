package mechanism

// bisect narrows a bracket [good, bad] (in either order) of a predicate that
// holds at good and fails at bad, halving until the two ends are adjacent
// float64s, and returns the end where ok holds. The calibrations use it with
// ok(x) = "the RDP bound at x is ≤ the target ε", so the calibrated parameter
// never overshoots the privacy target, whatever the rounding.
//
// Bisection rather than Newton or Brent: it needs no derivative, cannot leave
// the bracket, and the ~60 evaluations of special.Trigamma it takes for a bracket of
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
