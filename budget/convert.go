package budget

import "math"

// Conversion RDP → (ε, δ)-DP, 000 Lemma 1 eq. (2) (Canonne–Kamath–Steinke
// 2020; identical to 000 eq. (11) and, solved for ε, to 001 eq. (14)): a
// (λ, ε̂)-RDP mechanism is (ε, δ)-DP with
//
//	δ = exp((λ−1)(ε̂−ε)) / (λ−1) · (1 − 1/λ)^λ.                          (2)
//
// In logarithms:
//
//	log δ = (λ−1)(ε̂−ε) − log(λ−1) + λ·log(1 − 1/λ).                     (a)
//
// Solved for ε, using λ·log(1−1/λ) − log(λ−1) = (λ−1)·log(1−1/λ) − log λ
// (expand log(1−1/λ) = log(λ−1) − log λ):
//
//	ε = ε̂ + log(1 − 1/λ) − (log δ + log λ)/(λ−1)                        (b)
//	  = ε̂ + log(λ−1) − (log δ + λ·log λ)/(λ−1)                           (001 eq. (14)).
//
// (b) is also dp_accounting's compute_epsilon. A curve on a grid is (ε, δ)-DP
// for the ε (resp. δ) of every order of the grid, so [Curve.Epsilon] and
// [Curve.Delta] ([ToEpsilon], [ToDelta]) take the minimum over the grid. log(1 − 1/λ) is evaluated as
// log1p(−1/λ), accurate for every λ > 1.
//
// A curve that is 0 at every order of its grid (nothing composed) is
// (0, 0)-DP, and both conversions return that exactly (it matters for an
// accountant that has spent nothing). A 0 at some orders only is converted
// like any other value: a true bound D_λ ≤ 0 would mean identical
// distributions (van Erven & Harremoës 2014, Theorem 8), but a computed 0
// may be a positive value rounded down, and reading it as (0, 0)-DP would
// discard every other order's evidence.

// logDeltaAt is (a): log δ of eq. (2) at order λ for RDP ε̂ and target ε.
func logDeltaAt(order, rdp, eps float64) float64 {
	return (order-1)*(rdp-eps) - math.Log(order-1) + order*math.Log1p(-1/order)
}

// epsilonAt is (b): the ε of eq. (2) at order λ for RDP ε̂ and log δ.
func epsilonAt(order, rdp, logDelta float64) float64 {
	return rdp + math.Log1p(-1/order) - (logDelta+math.Log(order))/(order-1)
}

func checkDelta(delta float64) error {
	if !(delta > 0 && delta < 1) {
		return &ArgumentError{Name: "delta", Value: delta, Want: "in (0, 1)"}
	}
	return nil
}

func checkEpsilon(name string, eps float64) error {
	if !(eps > 0) || math.IsInf(eps, 0) {
		return &ArgumentError{Name: name, Value: eps, Want: "finite and > 0"}
	}
	return nil
}

// Epsilon converts the curve to (ε, δ)-DP at the given δ ∈ (0, 1): it
// returns the smallest ε over the orders of the grid of (b) above (000
// Lemma 1 eq. (2) solved for ε; 001 eq. (14)), and the order attaining it.
//
// Orders where the curve is +Inf are skipped; if the curve is +Inf at every
// order the result is ε = +Inf (order 0, no error). The result is clamped at
// ≥ 0: a negative value of (b) means (ε′, δ)-DP for every ε′ > 0 (δ of eq.
// (2) decreases in ε), reported as 0. Errors: [ErrInvalidArgument] for δ ∉
// (0, 1) or NaN, [ErrEmptyCurve], or the error the curve carries.
func (c Curve) Epsilon(delta float64) (eps float64, order float64, err error) {
	if err := c.Err(); err != nil {
		return math.Inf(1), 0, err
	}
	if err := checkDelta(delta); err != nil {
		return math.Inf(1), 0, err
	}
	if c.isZero() { // nothing composed: identical distributions, (0, 0)-DP
		return 0, c.orders[0], nil
	}
	logDelta := math.Log(delta)
	best, bestOrder := math.Inf(1), 0.0
	for i, o := range c.orders {
		r := c.eps[i]
		if math.IsInf(r, 1) {
			continue
		}
		// A 0 at one order alone is not taken as (0, 0)-DP: it may be a
		// value rounded to 0 (it gets the conversion like any other).
		if e := epsilonAt(o, r, logDelta); e < best {
			best, bestOrder = e, o
		}
	}
	if math.IsInf(best, 1) {
		return best, 0, nil
	}
	return math.Max(best, 0), bestOrder, nil
}

// ToEpsilon is [Curve.Epsilon] without the error: on an invalid input (δ ∉
// (0, 1), NaN, an empty curve or one carrying an error) it reports no
// guarantee, ε = +Inf (order 0), so that a caller that skips the check can
// never under-report privacy loss.
func ToEpsilon(c Curve, delta float64) (eps float64, order float64) {
	eps, order, _ = c.Epsilon(delta)
	return eps, order
}

// Delta converts the curve to (ε, δ)-DP at the given ε > 0: it returns the
// smallest δ over the orders of the grid of 000 Lemma 1 eq. (2) (computed in
// log space, (a) above, so that no intermediate overflows), capped at 1, and
// the order attaining it (a δ below the float64 range is returned as the
// smallest positive float64, not 0). Orders where the curve is +Inf are
// skipped; if it is +Inf everywhere the result is δ = 1 (order 0, no error).
// Errors: [ErrInvalidArgument] for ε ≤ 0, NaN or +Inf, [ErrEmptyCurve], or
// the error the curve carries.
func (c Curve) Delta(eps float64) (delta float64, order float64, err error) {
	if err := c.Err(); err != nil {
		return 1, 0, err
	}
	if err := checkEpsilon("epsilon", eps); err != nil {
		return 1, 0, err
	}
	if c.isZero() { // nothing composed: (0, 0)-DP
		return 0, c.orders[0], nil
	}
	best, bestOrder := math.Inf(1), 0.0
	for i, o := range c.orders {
		r := c.eps[i]
		if math.IsInf(r, 1) {
			continue
		}
		if ld := logDeltaAt(o, r, eps); ld < best {
			best, bestOrder = ld, o
		}
	}
	if best >= 0 { // includes +Inf: no finite order
		return 1, bestOrder, nil
	}
	return expDelta(best), bestOrder, nil
}

// ToDelta is [Curve.Delta] without the error: on an invalid input (ε ≤ 0,
// NaN, +Inf, an empty curve or one carrying an error) it reports no
// guarantee, δ = 1 (order 0).
func ToDelta(c Curve, eps float64) (delta float64, order float64) {
	delta, order, _ = c.Delta(eps)
	return delta, order
}

// expDelta is exp(logDelta) for logDelta < 0, never rounded down to 0: eq.
// (2) is positive, so an underflow returns the smallest positive float64
// instead (never under-report).
func expDelta(logDelta float64) float64 {
	return math.Max(math.Exp(logDelta), math.SmallestNonzeroFloat64)
}

// minReachableEpsilon is the infimum over positive curves of ToEpsilon at
// delta on orders: min over λ of (b) with ε̂ → 0⁺, i.e. the ε that no
// calibration can beat on this grid (used by the planner to explain
// infeasible targets).
func minReachableEpsilon(orders []float64, delta float64) (eps, order float64) {
	logDelta := math.Log(delta)
	eps = math.Inf(1)
	for _, o := range orders {
		if e := epsilonAt(o, 0, logDelta); e < eps {
			eps, order = e, o
		}
	}
	return eps, order
}
