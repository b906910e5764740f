package budget

import (
	"math"
	"sync"
)

// PlanMargin is the relative share of a budget that planners leave
// unplanned: a plan that composes its releases to "exactly" ε targets
// ε·(1 − PlanMargin) instead. The limit checks themselves are exact (a
// total converting to ε above the limit is refused, however little above),
// so without a margin a plan composed with [Curve.Scale] could be refused at
// its last release by the rounding of the one-at-a-time sum. Summing n equal
// values by repeated addition (each rounded up, [Curve.Add]) is off from
// n·x by at most about n·2⁻⁵² relative, < 1e-9 for n up to 10⁶ releases per
// period; the conversion (000 Lemma 1 eq. (2)) passes a relative error of
// the RDP value on to ε at most in the same proportion. Before issue #15
// the accountant instead accepted totals up to ε·(1 + 1e-9), which the
// README's "at most ε" did not allow.
const PlanMargin = 1e-9

// Planned returns eps·(1 − PlanMargin): the ε a planner composes to when it
// means to use a budget of eps exactly.
func Planned(eps float64) float64 { return eps * (1 - PlanMargin) }

// Accountant tracks the RDP spent by one budget scope (one user's
// contributions to a histogram, say) over one period, on a fixed grid of
// orders, against a total (ε, δ)-DP limit. Spends compose by adding curves
// (000 Lemma 2) and the total is converted with [ToEpsilon] (000 Lemma 1 eq.
// (2), [Curve.Epsilon]). It is safe for concurrent use.
type Accountant struct {
	orders []float64 // the grid; immutable after NewAccountant
	limit  float64   // ε limit; immutable
	delta  float64   // δ of the limit; immutable

	// mu guards spent: every read of spent and every check-then-update
	// (Spend, Restore) holds it, so that concurrent spends are serialized
	// and two spends that each fit can never together exceed the limit.
	mu    sync.Mutex
	spent Curve // on orders; starts at zero
}

// NewAccountant returns an accountant with nothing spent, on the grid orders
// (see [DefaultOrders], [WithOrder]), with a total limit of (epsilon,
// delta)-DP. Errors ([ErrInvalidArgument], [ErrEmptyCurve]): an invalid grid,
// epsilon ≤ 0 or not finite, delta ∉ (0, 1).
func NewAccountant(orders []float64, epsilon, delta float64) (*Accountant, error) {
	zero, err := newLimit(orders, epsilon, delta)
	if err != nil {
		return nil, err
	}
	return &Accountant{orders: zero.orders, limit: epsilon, delta: delta, spent: zero}, nil
}

// newLimit checks an accountant's grid and (epsilon, delta) limit and
// returns the zero curve on the grid: what every accountant starts from.
func newLimit(orders []float64, epsilon, delta float64) (Curve, error) {
	zero, err := ZeroCurve(orders)
	if err != nil {
		return Curve{}, err
	}
	if err := checkEpsilon("epsilon", epsilon); err != nil {
		return Curve{}, err
	}
	if err := checkDelta(delta); err != nil {
		return Curve{}, err
	}
	return zero, nil
}

// Limit returns the accountant's (ε, δ) budget.
func (a *Accountant) Limit() (epsilon, delta float64) { return a.limit, a.delta }

// Orders returns a copy of the accountant's grid.
func (a *Accountant) Orders() []float64 { return append([]float64(nil), a.orders...) }

// check returns the total after adding c to spent and nil, or an error (grid
// mismatch, invalid curve, *ExceededError). a.mu must be held.
func (a *Accountant) check(c Curve) (Curve, error) {
	if err := c.Err(); err != nil {
		return Curve{}, err
	}
	if !sameGrid(c.orders, a.orders) {
		return Curve{}, gridMismatch(a.orders, c.orders)
	}
	total := a.spent.Add(c)
	eps, order, err := total.Epsilon(a.delta)
	if err != nil {
		return Curve{}, err
	}
	if !a.within(eps) {
		before, _ := ToEpsilon(a.spent, a.delta)
		return Curve{}, &ExceededError{Epsilon: eps, Order: order, Spent: before, Limit: a.limit, Delta: a.delta}
	}
	return total, nil
}

// within reports whether ε is within the limit (exactly; see PlanMargin).
func (a *Accountant) within(eps float64) bool {
	return eps <= a.limit // false for NaN and +Inf
}

// Spend composes c (the curve of one release, or of several composed) into
// the total if the new total still converts to ε ≤ the limit at δ. Otherwise it returns an [*ExceededError] and changes
// nothing. c must be on the accountant's grid ([ErrGridMismatch]).
func (a *Accountant) Spend(c Curve) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	total, err := a.check(c)
	if err != nil {
		return err
	}
	a.spent = total
	return nil
}

// CanSpend reports (nil) whether [Accountant.Spend] of c would succeed now,
// without spending. With concurrent spenders the answer may be stale by the
// time Spend is called; Spend checks again.
func (a *Accountant) CanSpend(c Curve) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, err := a.check(c)
	return err
}

// Spent returns the total RDP curve spent so far (for the durable ledger).
func (a *Accountant) Spent() Curve {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.spent
}

// SpentEpsilon returns the ε (at the accountant's δ) of the total spent so
// far: 0 when nothing has been spent.
func (a *Accountant) SpentEpsilon() float64 {
	a.mu.Lock()
	s := a.spent
	a.mu.Unlock()
	eps, _ := ToEpsilon(s, a.delta) // cannot fail: valid curve and δ
	return eps
}

// Remaining returns limit − SpentEpsilon, clamped at 0. It is informational:
// ε does not compose additively under the RDP conversion, so a release with
// a stand-alone ε below Remaining may still be refused (and vice versa); use
// [Accountant.CanSpend] to ask about a specific release.
func (a *Accountant) Remaining() float64 {
	return math.Max(0, a.limit-a.SpentEpsilon())
}

// Restore replaces the total spent with spent, e.g. from the durable ledger
// after a restart. spent must be on the accountant's grid ([ErrGridMismatch];
// see [Curve.Regrid] if the grid changed). The restored total is installed
// even if it already exceeds the limit (what was released cannot be taken
// back, and forgetting it would under-report), in which case Restore returns
// an [*ExceededError] with Restored set and every later Spend is refused.
func (a *Accountant) Restore(spent Curve) error {
	if err := spent.Err(); err != nil {
		return err
	}
	if !sameGrid(spent.orders, a.orders) {
		return gridMismatch(a.orders, spent.orders)
	}
	s := Curve{orders: a.orders, eps: spent.eps}
	eps, order, err := s.Epsilon(a.delta)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.spent = s
	a.mu.Unlock()
	if !a.within(eps) {
		return &ExceededError{Epsilon: eps, Order: order, Spent: eps, Limit: a.limit, Delta: a.delta, Restored: true}
	}
	return nil
}
