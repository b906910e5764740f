package budget

import (
	"fmt"
	"math"
	"slices"

	"github.com/dpstage/stage/mechanism"
)

// Curve is an RDP curve sampled on a grid of orders: ε̂(λ) for every λ of the
// grid, each ≥ 0 or +Inf ("no bound at this order"). It is an immutable value
// type: copying a Curve is cheap, and no method modifies one (they share the
// underlying arrays, which nothing ever writes after construction).
//
// The zero Curve is empty; operations on it return [ErrEmptyCurve]. A Curve
// built by [CurveOf] from an invalid grid carries the grid's error, which
// every operation on it returns (see [Curve.Err]).
type Curve struct {
	orders []float64 // strictly increasing, finite, > 1; never written after construction
	eps    []float64 // len(orders) values, each ≥ 0 or +Inf; never written after construction
	err    error     // non-nil if built by CurveOf from an invalid grid
}

// Point is one point of a curve.
type Point struct {
	Order   float64 // λ
	Epsilon float64 // ε̂(λ), ≥ 0 or +Inf
}

// NewCurve returns the curve with eps[i] at orders[i]. orders must be a valid
// grid (non-empty, strictly increasing, finite, > 1) and every eps[i] ≥ 0 or
// +Inf (NaN and negative values are errors). The slices are copied.
func NewCurve(orders, eps []float64) (Curve, error) {
	if err := validateOrders(orders); err != nil {
		return Curve{}, err
	}
	if len(eps) != len(orders) {
		return Curve{}, fmt.Errorf("%w: %d orders but %d rdp values", ErrGridMismatch, len(orders), len(eps))
	}
	for i, e := range eps {
		if !(e >= 0) {
			return Curve{}, &ArgumentError{Name: fmt.Sprintf("rdp epsilon at order %s", fmtFloat(orders[i])), Value: e, Want: "≥ 0 or +Inf"}
		}
	}
	return Curve{orders: slices.Clone(orders), eps: slices.Clone(eps)}, nil
}

// ZeroCurve returns the all-zero curve (nothing spent) on orders.
func ZeroCurve(orders []float64) (Curve, error) {
	if err := validateOrders(orders); err != nil {
		return Curve{}, err
	}
	return Curve{orders: slices.Clone(orders), eps: make([]float64, len(orders))}, nil
}

// CurveOf samples m's RDP curve on orders: ε̂(λ) = m.RDP(λ) for each λ.
//
// Conservative by construction: a NaN or negative value from m.RDP (a
// Rényi divergence is ≥ 0, so it can only be a bug) is recorded as +Inf, and
// if m also has a MaxOrder() float64 method (every mechanism.Mechanism does),
// every order ≥ MaxOrder is +Inf whatever m.RDP says, since RDP bounds such
// as 000 Corollary 3 only hold on the open interval below it.
//
// If orders is not a valid grid the returned Curve carries that error
// ([Curve.Err]) and every operation on it fails with it.
func CurveOf(m interface{ RDP(float64) float64 }, orders []float64) Curve {
	if m == nil {
		return Curve{err: &ArgumentError{Name: "mechanism", Value: math.NaN(), Want: "non-nil"}}
	}
	return curveWith(m, m.RDP, orders)
}

// curveWith samples rdp on orders with CurveOf's conservative rules (NaN
// and negative values → +Inf; +Inf at orders ≥ m's MaxOrder).
func curveWith(m any, rdp func(float64) float64, orders []float64) Curve {
	if err := validateOrders(orders); err != nil {
		return Curve{err: err}
	}
	maxOrder := math.Inf(1)
	if mo, ok := m.(interface{ MaxOrder() float64 }); ok {
		if v := mo.MaxOrder(); !math.IsNaN(v) {
			maxOrder = v
		} else {
			maxOrder = 1 // NaN: trust no order
		}
	}
	eps := make([]float64, len(orders))
	for i, o := range orders {
		e := math.Inf(1)
		if o < maxOrder {
			if v := rdp(o); v >= 0 { // false for NaN and negative values
				e = v
			}
		}
		eps[i] = e
	}
	return Curve{orders: slices.Clone(orders), eps: eps}
}

// Err returns the error a Curve carries: its grid's error if it was built by
// [CurveOf] from an invalid grid, [ErrEmptyCurve] for an empty curve, nil
// otherwise.
func (c Curve) Err() error {
	if c.err != nil {
		return c.err
	}
	if len(c.orders) == 0 {
		return ErrEmptyCurve
	}
	return nil
}

// Len returns the number of orders of the grid.
func (c Curve) Len() int { return len(c.orders) }

// Orders returns a copy of the grid.
func (c Curve) Orders() []float64 { return slices.Clone(c.orders) }

// Epsilons returns a copy of the values, in the order of [Curve.Orders].
func (c Curve) Epsilons() []float64 { return slices.Clone(c.eps) }

// Points returns the curve as (order, ε̂) points, +Inf points included.
func (c Curve) Points() []Point {
	out := make([]Point, len(c.orders))
	for i := range c.orders {
		out[i] = Point{Order: c.orders[i], Epsilon: c.eps[i]}
	}
	return out
}

// At returns ε̂ at order λ and whether λ is on the grid.
func (c Curve) At(order float64) (float64, bool) {
	i, found := slices.BinarySearch(c.orders, order)
	if !found {
		return math.Inf(1), false
	}
	return c.eps[i], true
}

// SameGrid reports whether c and d are on the same grid of orders.
func (c Curve) SameGrid(d Curve) bool { return sameGrid(c.orders, d.orders) }

// Scale returns the curve of k-fold composition of c: k·ε̂(λ) at each order
// (000 Lemma 2 applied k times at the same order), rounded toward +∞. k must be finite and ≥ 0;
// k = 0 gives the zero curve (nothing composed), even where c is +Inf.
//
// Like every operation that returns a Curve, Scale does not return an
// error: if c carries one, or k is invalid ([ErrInvalidArgument]), the
// result carries it ([Curve.Err]), and every later operation on the result
// fails with it or, for [ToEpsilon] and [ToDelta], reports no guarantee.
func (c Curve) Scale(k float64) Curve {
	if err := c.Err(); err != nil {
		return Curve{err: err}
	}
	if !(k >= 0) || math.IsInf(k, 0) {
		return Curve{err: &ArgumentError{Name: "composition count k", Value: k, Want: "finite and ≥ 0"}}
	}
	eps := make([]float64, len(c.eps))
	if k != 0 {
		for i, e := range c.eps {
			eps[i] = MulUp(k, e) // +Inf stays +Inf; overflow rounds up to +Inf
		}
	}
	return Curve{orders: c.orders, eps: eps}
}

// Add returns the curve of the composition of the mechanisms behind c and d:
// ε̂_c(λ) + ε̂_d(λ) at each order λ (000 Lemma 2 with λ1 = λ2 = λ; 001
// Lemma 1), rounded toward +∞ so that a composed spend is never below the
// exact sum of its charges. Both must be on the same grid; otherwise (or if either carries
// an error) the result carries [ErrGridMismatch] (or that error), see
// [Curve.Scale].
func (c Curve) Add(d Curve) Curve {
	if err := c.Err(); err != nil {
		return Curve{err: err}
	}
	if err := d.Err(); err != nil {
		return Curve{err: err}
	}
	if !c.SameGrid(d) {
		return Curve{err: gridMismatch(c.orders, d.orders)}
	}
	eps := make([]float64, len(c.eps))
	for i := range eps {
		eps[i] = AddUp(c.eps[i], d.eps[i]) // no -Inf or NaN can occur: both ≥ 0 or +Inf
	}
	return Curve{orders: c.orders, eps: eps}
}

// Regrid returns c moved onto another grid, conservatively: at each new
// order λ′ the value is min{ε̂(λ) : λ on c's grid, λ ≥ λ′}, and +Inf above
// c's largest order. This is valid because the Rényi divergence is
// nondecreasing in its order (van Erven & Harremoës 2014, Theorem 3), so
// D_λ′ ≤ D_λ ≤ ε̂(λ) for every λ ≥ λ′ (dp_accounting uses the same argument
// for orders below its grid). Use it to restore a ledger after the grid
// changed (e.g. a new calibration order). An invalid grid or curve: the
// result carries the error ([Curve.Err]).
func (c Curve) Regrid(orders []float64) Curve {
	if err := c.Err(); err != nil {
		return Curve{err: err}
	}
	if err := validateOrders(orders); err != nil {
		return Curve{err: err}
	}
	// suffix minima of c.eps
	suf := make([]float64, len(c.eps)+1)
	suf[len(c.eps)] = math.Inf(1)
	for i := len(c.eps) - 1; i >= 0; i-- {
		suf[i] = math.Min(c.eps[i], suf[i+1])
	}
	eps := make([]float64, len(orders))
	for j, o := range orders {
		i, _ := slices.BinarySearch(c.orders, o) // first old order ≥ o
		eps[j] = suf[i]
	}
	return Curve{orders: slices.Clone(orders), eps: eps}
}

func gridMismatch(a, b []float64) error {
	if len(a) != len(b) {
		return fmt.Errorf("%w: %d orders vs %d", ErrGridMismatch, len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return fmt.Errorf("%w: order #%d is %s vs %s", ErrGridMismatch, i, fmtFloat(a[i]), fmtFloat(b[i]))
		}
	}
	return ErrGridMismatch
}

// GridResidual returns the curve the release grid adds to one rounded
// release whose neighbours change k Gamma coordinates:
// mechanism.GridResidualRDP(λ, k) at every order λ of the grid (its doc
// has the derivation). It does not shrink with the calibration: it is the
// sampler's, not the mechanism's. k must be finite and > 0
// ([ErrInvalidArgument]); an invalid grid: the result carries the error.
func GridResidual(orders []float64, k float64) Curve {
	if err := validateOrders(orders); err != nil {
		return Curve{err: err}
	}
	if !(k > 0) || math.IsInf(k, 1) {
		return Curve{err: &ArgumentError{Name: "grid residual coordinates k", Value: k, Want: "finite and > 0"}}
	}
	eps := make([]float64, len(orders))
	for i, o := range orders {
		eps[i] = mechanism.GridResidualRDP(o, k)
	}
	return Curve{orders: slices.Clone(orders), eps: eps}
}

// ChargeOf is the curve one release of m is charged on orders: m's RDP
// curve rounded up — mechanism.UpperRDPOf, the formula [CurveOf] samples
// raised by a bound on its floating-point evaluation error, so that the
// charge is never below the mechanism's exact curve at any order (issue 28
// item 5: λΔ2²/(2σ²) evaluated to nearest fell an ulp short at about half
// the orders) — plus, when m's releases are floating-point draws
// rounded to the release grid (mechanism.Rounded: Dirichlet, every
// calibration), the grid residual of its neighbours' changed coordinates
// ([GridResidual], k = mechanism.GridCoordinates of m's sensitivity). The
// exact integer samplers (gaussian, laplace, laplace-posterior) are charged
// their curve alone. A rounded mechanism whose spec bounds no coordinates
// (neither Δ1 nor Δ2² set) is charged +Inf at every order. Every planner and every charge of the stage uses it,
// so what is planned is what is charged.
func ChargeOf(m mechanism.Mechanism, orders []float64) Curve {
	if m == nil {
		return CurveOf(nil, orders)
	}
	c := curveWith(m, func(o float64) float64 { return mechanism.UpperRDPOf(m, o) }, orders)
	if c.Err() != nil {
		return c
	}
	spec := m.Spec()
	if !mechanism.Rounded(spec.Kind) {
		return c
	}
	k := mechanism.GridCoordinates(spec.Sensitivity)
	if k <= 0 {
		// No count sensitivity to bound the changed coordinates by (the
		// simplex-dirichlet spec): no bound, conservatively.
		return c.Add(Curve{orders: c.orders, eps: infs(len(c.orders))})
	}
	return c.Add(GridResidual(orders, k))
}

// infs returns n copies of +Inf.
func infs(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Inf(1)
	}
	return out
}
