package budget

import (
	"errors"
	"fmt"
	"math"

	"github.com/dpstage/stage/mechanism"
)

// Plan is a per-release calibration whose composition over a period meets
// the period's (ε, δ)-DP budget.
type Plan struct {
	// Spec is the template with RDPEpsilon set to the per-release RDP target
	// ε_r at Spec.Order.
	Spec mechanism.Spec
	// Mechanism is the mechanism calibrated from Spec.
	Mechanism mechanism.Mechanism
	// PerRelease is what one release is charged: the mechanism's full RDP
	// curve on the grid (+Inf at orders ≥ its MaxOrder) plus, for a
	// floating-point mechanism rounded to the release grid (Dirichlet), the
	// grid residual ([ChargeOf]).
	PerRelease Curve
	// Total is PerRelease composed Releases times (000 Lemma 2).
	Total Curve
	// Epsilon is what Total converts to at Delta ([ToEpsilon]); ≤ the
	// requested ε. Order is the RDP order attaining it.
	Epsilon float64
	Order   float64
	Delta   float64
	// Releases is the number of composed releases one privacy unit can
	// touch in the period (windows per period × releases per window).
	Releases int
}

// NewAccountant returns an accountant on the plan's grid with the budget
// (requestedEpsilon, the plan's δ); with the ε the plan was made for,
// spending PerRelease Releases times fits it.
func (p Plan) NewAccountant(requestedEpsilon float64) (*Accountant, error) {
	return NewAccountant(p.PerRelease.orders, requestedEpsilon, p.Delta)
}

// PlanReleases allocates RDP per release: given a mechanism spec template
// (everything but RDPEpsilon, which is ignored), the total (epsilon,
// delta)-DP budget for a period and the number of composed releases one
// privacy unit can touch in it, it returns the largest per-release RDP target
// ε_r at template.Order such that composing releases copies of the
// mechanism calibrated at ε_r — its full RDP curve on the grid
// WithOrder(DefaultOrders(), template.Order), not only its value at the
// calibration order, plus the release grid's residual for a rounded
// (Dirichlet) mechanism ([ChargeOf]) — converts to at most Planned(epsilon) = epsilon·(1 −
// PlanMargin) at delta (000 Lemma 2, then
// Lemma 1 eq. (2) minimized over the grid, [ToEpsilon]).
//
// The search is a bisection on log ε_r (calibrate with mechanism.New,
// compose, convert; a calibration that mechanism.New rejects as out of its
// range counts as not meeting the target). It only ever returns a
// calibration it has verified to meet the target, so the plan is valid even
// where the composed ε is not monotone in ε_r; it is tight to a relative
// 1e-10 in ε_r where it is monotone (as for curves that increase pointwise
// with ε_r: the Gaussian's; the concentrated and closed-form Dirichlet's,
// whose α decreases with ε_r; the tests check tightness for every kind and
// calibration). Orders
// where the per-release curve is +Inf (the Dirichlet curve only exists below
// MaxOrder = α/(rΔ∞) + 1, 000 Corollary 3, which shrinks as ε_r grows) are
// not used by the conversion.
//
// Errors: [ErrInvalidArgument] (epsilon ≤ 0, delta ∉ (0, 1), releases < 1,
// template order not > 1), the calibration error of mechanism.New for an
// invalid template, and [*InfeasibleError] when no calibration can meet the
// target on this grid (the conversion of an arbitrarily small curve is
// already above epsilon).
func PlanReleases(template mechanism.Spec, epsilon, delta float64, releases int) (Plan, error) {
	return newPlan(mechanism.New, template, epsilon, delta, releases)
}

// newMechanismFunc is mechanism.New's signature (injectable for tests).
type newMechanismFunc func(mechanism.Spec) (mechanism.Mechanism, error)

func newPlan(newMech newMechanismFunc, template mechanism.Spec, epsilon, delta float64, releases int) (Plan, error) {
	if err := checkEpsilon("epsilon", epsilon); err != nil {
		return Plan{}, err
	}
	if err := checkDelta(delta); err != nil {
		return Plan{}, err
	}
	if releases < 1 {
		return Plan{}, &ArgumentError{Name: "releases", Value: float64(releases), Want: "≥ 1"}
	}
	orders, err := WithOrder(DefaultOrders(), template.Order)
	if err != nil {
		return Plan{}, err
	}
	k := float64(releases)
	// The composition must fit the budget one release at a time too
	// (Accountant, Book: exact checks), whose rounding PlanMargin absorbs.
	target := Planned(epsilon)

	// No per-release curve ε̂ > 0 can convert below the value of (b) at
	// ε̂ = 0, minimized over the grid.
	if minEps, minOrder := minReachableEpsilon(orders, delta); !(epsilon > minEps) {
		return Plan{}, &InfeasibleError{Epsilon: epsilon, Delta: delta, Releases: releases, MinEpsilon: minEps,
			Reason: fmt.Sprintf("at this δ the RDP→(ε, δ) conversion (000 Lemma 1 eq. (2)) cannot go below ε = %s "+
				"on the grid (reached at its order %s) whatever the noise; raise ε or δ", fmtFloat(minEps), fmtFloat(minOrder))}
	}

	// The grid residual of a rounded (floating-point) mechanism does not
	// shrink with the noise: if releases copies of it alone already
	// convert above the target, no calibration fits.
	if mechanism.Rounded(template.Kind) {
		k := mechanism.GridCoordinates(template.Sensitivity)
		res := GridResidual(orders, k).Scale(float64(releases))
		if err := res.Err(); err != nil {
			return Plan{}, fmt.Errorf("budget: plan: grid residual of %s: %w", template.Kind, err)
		}
		if e, o := ToEpsilon(res, delta); !(e < target) {
			return Plan{}, &InfeasibleError{Epsilon: epsilon, Delta: delta, Releases: releases, MinEpsilon: e,
				Reason: fmt.Sprintf("the release grid's residual alone (%d releases × e(λ) at k = %s changed coordinates, ρ = %s; "+
					"mechanism package doc, \"Release grid\") composes to ε = %s (order %s) whatever the noise; "+
					"raise ε, or reduce the releases per period (contribution.max_windows_per_user, longer windows)",
					releases, fmtFloat(k), fmtFloat(mechanism.ReleaseGridRho), fmtFloat(e), fmtFloat(o))}
		}
	}

	// try calibrates at x and reports whether the composition meets the target.
	try := func(x float64) (Plan, bool, error) {
		spec := template
		spec.RDPEpsilon = x
		m, err := newMech(spec)
		if err != nil {
			return Plan{}, false, fmt.Errorf("budget: plan: calibrate %s mechanism at rdp epsilon %s (order %s): %w",
				spec.Kind, fmtFloat(x), fmtFloat(spec.Order), err)
		}
		per := ChargeOf(m, orders) // the curve plus the grid residual of a rounded mechanism
		total := per.Scale(k)
		e, o, err := total.Epsilon(delta)
		if err != nil {
			return Plan{}, false, err
		}
		p := Plan{Spec: spec, Mechanism: m, PerRelease: per, Total: total, Epsilon: e, Order: o, Delta: delta, Releases: releases}
		return p, e <= target, nil
	}

	var best Plan
	_, err = Fit(epsilon/k, func(x float64) (bool, error) {
		p, ok, err := try(x)
		if err == nil && ok {
			best = p
		}
		return ok, err
	})
	var inf *fitInfeasible
	switch {
	case errors.As(err, &inf):
		return Plan{}, &InfeasibleError{Epsilon: epsilon, Delta: delta, Releases: releases,
			Reason: fmt.Sprintf("even a per-release rdp epsilon of %s at order %s composes to more than ε; "+
				"raise ε or δ, or reduce the releases per period", fmtFloat(inf.x), fmtFloat(template.Order))}
	case errors.Is(err, errFitUnbounded):
		return Plan{}, fmt.Errorf("budget: plan: composition of %d releases stays within ε = %s at every rdp epsilon: "+
			"the mechanism's rdp curve does not grow with its target; check the mechanism", releases, fmtFloat(epsilon))
	case err != nil:
		return Plan{}, err
	}
	return best, nil
}

// Fit returns the largest x > 0 (to a relative 10⁻¹⁰) at which try(x)
// reports ok, for a try that holds below some point and fails above it,
// starting at x0: it doubles x while try holds (an error there counts as a
// failure: beyond a calibration's range is "too much"), or divides it by
// 16 until try holds (an error there is returned; none below 10⁻³⁰⁰ is
// *fitInfeasible), then bisects on log x. Its last call of try that held
// was at the returned x — callers keep what that call built. It only ever
// returns an x try accepted, so it is valid where try is not monotone,
// and tight where it is.
func Fit(x0 float64, try func(x float64) (ok bool, err error)) (float64, error) {
	ok, err := try(x0)
	if err != nil {
		return 0, err
	}
	lo, hi := x0, x0
	if ok {
		for {
			hi *= 2
			if math.IsInf(hi, 1) {
				return 0, errFitUnbounded
			}
			ok, err := try(hi)
			if err != nil || !ok {
				break
			}
			lo = hi
		}
	} else {
		for {
			lo /= 16
			if lo < 1e-300 {
				return 0, &fitInfeasible{x: lo * 16}
			}
			ok, err := try(lo)
			if err != nil {
				return 0, err
			}
			if ok {
				break
			}
			hi = lo
		}
	}
	// Invariant: the last call of try that held was at lo.
	for i := 0; i < 200 && hi/lo > 1+1e-10; i++ {
		mid := math.Sqrt(lo) * math.Sqrt(hi)
		if !(mid > lo && mid < hi) {
			break
		}
		ok, err := try(mid)
		if err == nil && ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// errFitUnbounded: Fit's try held at every x up to overflow.
var errFitUnbounded = errors.New("budget: fit: holds at every x")

// fitInfeasible: Fit's try failed at every x down to 10⁻³⁰⁰ (x the last
// tried above that).
type fitInfeasible struct{ x float64 }

func (e *fitInfeasible) Error() string {
	return fmt.Sprintf("budget: fit: fails at every x down to %s", fmtFloat(e.x))
}
