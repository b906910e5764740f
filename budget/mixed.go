package budget

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/dpstage/stage/mechanism"
)

// Mixed guarantees. Some mechanisms have an RDP curve (Dirichlet, Gaussian,
// Laplace), some are pure ε-DP (laplace-posterior, ehd), and some are only
// (ε, δ)-DP (simplex-dirichlet, ehds: mechanism.ApproxDP with δ > 0, RDP
// +Inf at every order). They are composed as follows:
//
//   - pure ε-DP releases enter the RDP accountant as the curve
//     mechanism.PureDPRDP(ε, λ) ≤ min(ε, λε²/2) at every order (ε-DP ⇒
//     (λ, ε)-RDP, Mironov 2017 Proposition 3; ⇒ ½ε²-zCDP, Bun & Steinke
//     2016 Proposition 3.3; the tight randomized-response curve, Steinke
//     2024) — or as the mechanism's own, tighter, curve when it reports one
//     ([PureCurve], [MixedAccountant.SpendPure], [MixedAccountant.SpendMechanism]);
//   - (ε, δ)-DP releases are composed separately by basic composition: the
//     ε's add and the δ's add (Dwork & Roth 2014, Theorem 3.16, which holds
//     for adaptive composition);
//   - the total is (ε_rdp + Σε_i, δ_rdp + Σδ_i), where (ε_rdp, δ_rdp) is the
//     conversion of the composed RDP curve (000 Lemma 1 eq. (2), minimized
//     over the grid) at δ_rdp = δ − Σδ_i: the accountant gives the RDP part
//     all of the δ the (ε, δ)-DP part leaves.
//
// Why the two parts may be added even when the releases are interleaved and
// chosen adaptively: fix a pair of neighbouring inputs. Each (ε_i, δ_i)-DP
// mechanism is, for that pair, a randomized post-processing T_i of the
// (ε_i, δ_i) randomized response RR_i run on the bit "which of the two
// inputs" (Kairouz, Oh & Viswanath 2015, "The Composition Theorem for
// Differential Privacy", ICML — the dominance result in the proof of their
// Theorem 3.3). The RR_i do not depend on the history, so they can all be
// drawn first; the interleaved run is then a post-processing of (RR_1, …,
// RR_m) followed by the RDP mechanisms run adaptively with the RR outputs
// (and the data-independent T_i) as auxiliary input. The first block is
// (Σε_i, Σδ_i)-DP, the second is (ε_rdp, δ_rdp)-DP for every value of the
// first (adaptive RDP composition, 000 Lemma 2, then eq. (2)), and the
// sequential basic composition of the two blocks gives the total. The
// (ε_i, δ_i) and the RDP curves must be fixed in advance, as they are for a
// calibrated stage (the same condition as the RDP accountant's).

// PureCurve returns the RDP curve implied by ε-DP alone on the grid orders:
// mechanism.PureDPRDP(eps, λ) at each order. eps must be finite and ≥ 0
// ([ErrInvalidArgument]).
func PureCurve(eps float64, orders []float64) (Curve, error) {
	if err := validateOrders(orders); err != nil {
		return Curve{}, err
	}
	if !(eps >= 0) || math.IsInf(eps, 0) {
		return Curve{}, &ArgumentError{Name: "epsilon", Value: eps, Want: "finite and ≥ 0"}
	}
	v := make([]float64, len(orders))
	for i, o := range orders {
		v[i] = mechanism.PureDPRDP(eps, o)
	}
	return NewCurve(orders, v)
}

// Composition is a total (ε, δ)-DP guarantee of mixed releases and how it
// was composed.
type Composition struct {
	// Epsilon and Delta are the total: RDPEpsilon + ApproxEpsilon and
	// RDPDelta + ApproxDelta.
	Epsilon, Delta float64
	// RDPEpsilon is the composed RDP curve converted at RDPDelta (000
	// Lemma 1 eq. (2)), attained at RDPOrder; 0 (and RDPDelta 0) if the RDP
	// part is empty (all zero).
	RDPEpsilon, RDPDelta, RDPOrder float64
	// ApproxEpsilon and ApproxDelta are the basic composition (sums) of the
	// ApproxReleases (ε, δ)-DP releases.
	ApproxEpsilon, ApproxDelta float64
	ApproxReleases             int
	// Method says in words how the total was composed.
	Method string
}

// ComposeMixed composes an RDP curve (the RDP and pure-DP releases) with
// (ε_i, δ_i)-DP releases into a total (ε, δ)-DP guarantee with total δ =
// delta: the RDP part is converted at δ_rdp = delta − Σδ_i, which must be
// > 0 unless the RDP part is empty. approxEps and approxDelta are the
// per-release parameters (the same length; each ε_i finite ≥ 0, δ_i ∈
// [0, 1)). Errors: [ErrInvalidArgument] for invalid arguments or Σδ_i ≥
// delta with a non-empty RDP part; the curve's own error.
func ComposeMixed(rdp Curve, approxEps, approxDelta []float64, delta float64) (Composition, error) {
	if err := rdp.Err(); err != nil {
		return Composition{}, err
	}
	if err := checkDelta(delta); err != nil {
		return Composition{}, err
	}
	if len(approxEps) != len(approxDelta) {
		return Composition{}, &ArgumentError{Name: "approx releases", Value: float64(len(approxDelta)), Want: fmt.Sprintf("one δ per ε (%d)", len(approxEps))}
	}
	var c Composition
	var se, sd kahanSum
	for i := range approxEps {
		e, d := approxEps[i], approxDelta[i]
		if !(e >= 0) || math.IsInf(e, 0) {
			return Composition{}, &ArgumentError{Name: "approx epsilon", Value: e, Want: "finite and ≥ 0"}
		}
		if !(d >= 0 && d < 1) {
			return Composition{}, &ArgumentError{Name: "approx delta", Value: d, Want: "in [0, 1)"}
		}
		se.add(e)
		sd.add(d)
	}
	c.ApproxEpsilon, c.ApproxDelta, c.ApproxReleases = se.value(), sd.value(), len(approxEps)
	empty := true
	for _, e := range rdp.eps {
		if e != 0 {
			empty = false
			break
		}
	}
	if !empty {
		c.RDPDelta = delta - c.ApproxDelta
		if !(c.RDPDelta > 0) {
			return Composition{}, &ArgumentError{Name: "delta", Value: delta,
				Want: fmt.Sprintf("> the (ε, δ)-DP releases' Σδ = %s, so that some δ is left for the RDP part", fmtFloat(c.ApproxDelta))}
		}
		eps, order, err := rdp.Epsilon(c.RDPDelta)
		if err != nil {
			return Composition{}, err
		}
		c.RDPEpsilon, c.RDPOrder = eps, order
	}
	c.Epsilon = c.RDPEpsilon + c.ApproxEpsilon
	c.Delta = c.RDPDelta + c.ApproxDelta
	switch {
	case empty && c.ApproxReleases == 0:
		c.Method = "nothing composed"
	case empty:
		c.Method = fmt.Sprintf("basic composition of %d (ε, δ)-DP releases (ε and δ add)", c.ApproxReleases)
	case c.ApproxReleases == 0:
		c.Method = fmt.Sprintf("RDP composition converted at δ = %s (order %s)", fmtFloat(c.RDPDelta), fmtFloat(c.RDPOrder))
	default:
		c.Method = fmt.Sprintf("RDP composition converted at δ_rdp = %s (order %s), plus basic composition of %d (ε, δ)-DP releases (Σε = %s, Σδ = %s)",
			fmtFloat(c.RDPDelta), fmtFloat(c.RDPOrder), c.ApproxReleases, fmtFloat(c.ApproxEpsilon), fmtFloat(c.ApproxDelta))
	}
	return c, nil
}

// kahanSum is compensated summation for the basic-composition sums, rounded
// up at the end by one part in 2^50 so that the reported sums are never
// below the exact ones.
type kahanSum struct{ s, c float64 }

func (k *kahanSum) add(v float64) {
	t := k.s + v
	if math.Abs(k.s) >= math.Abs(v) {
		k.c += (k.s - t) + v
	} else {
		k.c += (v - t) + k.s
	}
	k.s = t
}

func (k *kahanSum) value() float64 {
	v := k.s + k.c
	return v + math.Abs(v)*0x1p-50
}

// MixedAccountant tracks mixed releases of one budget scope and period
// against a total (ε, δ)-DP limit (see the composition rules above). It is
// safe for concurrent use.
type MixedAccountant struct {
	orders []float64
	limit  float64
	delta  float64

	mu        sync.Mutex
	rdp       Curve
	approxEps []float64
	approxDel []float64
}

// NewMixedAccountant returns an accountant with nothing spent on the grid
// orders, with the total limit (epsilon, delta)-DP.
func NewMixedAccountant(orders []float64, epsilon, delta float64) (*MixedAccountant, error) {
	zero, err := newLimit(orders, epsilon, delta)
	if err != nil {
		return nil, err
	}
	return &MixedAccountant{orders: zero.orders, limit: epsilon, delta: delta, rdp: zero}, nil
}

// total composes the state with an extra RDP curve and extra approx
// releases. a.mu must be held.
func (a *MixedAccountant) total(c Curve, eps, del []float64) (Composition, error) {
	rdp := a.rdp
	if c.Len() > 0 {
		if !sameGrid(c.orders, a.orders) {
			return Composition{}, gridMismatch(a.orders, c.orders)
		}
		rdp = rdp.Add(c)
	}
	e := append(append([]float64(nil), a.approxEps...), eps...)
	d := append(append([]float64(nil), a.approxDel...), del...)
	return ComposeMixed(rdp, e, d, a.delta)
}

// spend checks and applies a spend. a.mu must be held.
func (a *MixedAccountant) spend(c Curve, eps, del []float64, apply bool) error {
	before, err := a.total(Curve{}, nil, nil)
	if err != nil {
		return err
	}
	after, err := a.total(c, eps, del)
	if err != nil {
		var ae *ArgumentError
		if len(del) > 0 && errors.As(err, &ae) && ae.Name == "delta" {
			return &ExceededError{Epsilon: math.Inf(1), Spent: before.Epsilon, Limit: a.limit, Delta: a.delta}
		}
		return err
	}
	if !(after.Epsilon <= a.limit) {
		return &ExceededError{Epsilon: after.Epsilon, Order: after.RDPOrder, Spent: before.Epsilon, Limit: a.limit, Delta: a.delta}
	}
	if apply {
		if c.Len() > 0 {
			a.rdp = a.rdp.Add(c)
		}
		a.approxEps = append(a.approxEps, eps...)
		a.approxDel = append(a.approxDel, del...)
	}
	return nil
}

// SpendRDP composes an RDP curve (on the accountant's grid) into the total
// if the total still meets the limit; otherwise an [*ExceededError] and
// nothing changes.
func (a *MixedAccountant) SpendRDP(c Curve) error {
	if c.Len() == 0 {
		if err := c.Err(); err != nil {
			return err
		}
		return ErrEmptyCurve
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.spend(c, nil, nil, true)
}

// SpendPure composes one ε-DP release as the curve [PureCurve](eps).
func (a *MixedAccountant) SpendPure(eps float64) error {
	c, err := PureCurve(eps, a.orders)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.spend(c, nil, nil, true)
}

// SpendApprox composes one (eps, delta)-DP release by basic composition.
// eps must be finite and ≥ 0, delta in [0, 1).
func (a *MixedAccountant) SpendApprox(eps, delta float64) error {
	if !(eps >= 0) || math.IsInf(eps, 0) {
		return &ArgumentError{Name: "epsilon", Value: eps, Want: "finite and ≥ 0"}
	}
	if !(delta >= 0 && delta < 1) {
		return &ArgumentError{Name: "delta", Value: delta, Want: "in [0, 1)"}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.spend(Curve{}, []float64{eps}, []float64{delta}, true)
}

// SpendMechanism composes one release of m: if m reports an (ε, δ)-DP
// guarantee with δ > 0 (mechanism.ApproxDP) it is composed by basic
// composition; otherwise its RDP curve on the grid ([CurveOf]) is added —
// for pure ε-DP mechanisms that curve is finite at every order. A curve that
// is +Inf everywhere (no guarantee) is refused as exceeding the budget.
func (a *MixedAccountant) SpendMechanism(m mechanism.Mechanism) error {
	if m == nil {
		return &ArgumentError{Name: "mechanism", Value: math.NaN(), Want: "non-nil"}
	}
	if ad, ok := m.(mechanism.ApproxDP); ok {
		if eps, delta := ad.DP(); delta > 0 {
			return a.SpendApprox(eps, delta)
		}
	}
	return a.SpendRDP(CurveOf(m, a.orders))
}

// Total returns the composed guarantee of everything spent.
func (a *MixedAccountant) Total() Composition {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.total(Curve{}, nil, nil)
	if err != nil { // only if the state already exceeds δ, which spend prevents
		return Composition{Epsilon: math.Inf(1), Delta: a.delta, Method: err.Error()}
	}
	return c
}

// Limit returns the accountant's (ε, δ) budget.
func (a *MixedAccountant) Limit() (epsilon, delta float64) { return a.limit, a.delta }
