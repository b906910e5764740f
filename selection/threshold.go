package selection

import (
	"errors"
	"fmt"
	"math"

	"github.com/dpstage/stage/budget"
)

// exactSigma is the largest σ for which the discrete Gaussian's tails are
// summed term by term; above it they are bounded by the continuous
// Gaussian's (tail).
const exactSigma = 4096

// Threshold is one window's Gaussian thresholding of a histogram's group
// keys: a key with c distinct users is selected iff c + Z ≥ T, Z ~
// N_Z(0, σ²) the exact discrete Gaussian (see the package doc).
type Threshold struct {
	// Sigma is σ of the discrete Gaussian (mechanism.Params.Sigma of the
	// sampler that draws it).
	Sigma float64
	// T is the whole number a key's noisy count must reach.
	T int64
	// L0 is max_groups_per_user: the keys one user counts in per window.
	L0 int
	// KeyLimit and KeySigma are the window's key-count test (Keys):
	// the window's selection is withheld iff F + Z_k ≥ KeyLimit, F its
	// distinct keys, Z_k ~ N_Z(0, KeySigma²). KeyLimit 0: no test.
	KeyLimit int64
	KeySigma float64
}

// KeySigmaFor is the key-count test's σ_k for a limit of keys per window,
// beside a selection of noise σ and l0 keys per user: max(limit/100,
// 3·√l0·σ). limit/100 makes a window with F keys withheld with
// probability Φ̄((limit − F)/σ_k): ½ at the limit, 2.3% at 2% below it,
// < 10⁻²³ at 10% below. The floor 3·√l0·σ caps the test's cost at 1/9 of
// the selection's own curve (λ·l0²/(2σ_k²) ≤ λ·l0/(18σ²)) when many
// windows spread the budget thin: then σ_k, and the test's imprecision,
// grow with σ.
func KeySigmaFor(limit int, sigma float64, l0 int) float64 {
	return math.Max(float64(limit)/100, 3*math.Sqrt(float64(l0))*sigma)
}

// Check reports a threshold that cannot be used: σ not finite and > 0 (NaN
// and Inf included), T < 1, or L0 < 1.
func (t Threshold) Check() error {
	switch {
	case !(t.Sigma > 0) || math.IsInf(t.Sigma, 0):
		return fmt.Errorf("selection: σ must be finite and > 0, got %v", t.Sigma)
	case t.T < 1:
		return fmt.Errorf("selection: the threshold must be ≥ 1 user, got %d", t.T)
	case t.L0 < 1:
		return fmt.Errorf("selection: max_groups_per_user must be ≥ 1, got %d", t.L0)
	case t.KeyLimit < 0 || (t.KeyLimit > 0 && (!(t.KeySigma > 0) || math.IsInf(t.KeySigma, 0))):
		return fmt.Errorf("selection: the key-count test needs a limit ≥ 0 and, with a limit, a finite σ_k > 0; got %d and %v", t.KeyLimit, t.KeySigma)
	}
	return nil
}

// PassProbability is P[n + Z ≥ T]: the probability that a key with n
// distinct users in a window is selected.
func (t Threshold) PassProbability(n int64) float64 {
	return tail(t.Sigma, t.T-n)
}

// WindowDelta is δ_w = 1 − (1 − q)^{L0}, q = PassProbability(1): the
// probability that one of the at most L0 keys a single user creates in a
// window is selected (the package doc's mixture weight).
//
// A threshold of one user (T ≤ 1) protects nothing: δ_w = 1 (tail bounds
// a tail from above only for m ≥ 1, so the conservative answer is taken).
func (t Threshold) WindowDelta() float64 {
	if t.T <= 1 {
		return 1
	}
	q := t.PassProbability(1)
	if q >= 1 {
		return 1
	}
	// Rounded up: q and the expression are each within a few ulps (tail
	// is checked against a 200-bit reference to 3·10⁻¹⁴ relative), so a
	// relative 10⁻¹² keeps δ_w above its exact value.
	return math.Min(1, math.Nextafter(-math.Expm1(float64(t.L0)*math.Log1p(-q))*(1+1e-12), 2))
}

// UsersAt is the smallest number of distinct users n ≥ 1 at which a key is
// selected in a window with probability at least p ∈ (0, 1).
func (t Threshold) UsersAt(p float64) int64 {
	// PassProbability increases with n: bisect on [lo, hi], where hi
	// passes (T + 40σ: a miss below e^-800) and lo−1 does not.
	lo, hi := int64(1), t.T+int64(math.Ceil(40*t.Sigma))+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if t.PassProbability(mid) >= p {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// UnitRDP is the curve of one window's selection at order λ under the
// neighbour relation: the count noise's part [Threshold.countRDP] plus the
// key-count test's [Threshold.keyRDP]. +Inf for an order that is not
// finite and > 1. A period does not compose it as a whole: the two parts
// change in different numbers of windows ([Threshold.Charge]).
func (t Threshold) UnitRDP(order float64, replace bool) float64 {
	return t.countRDP(order, replace) + t.keyRDP(order)
}

// countRDP is the count noise's part of one window's curve, rounded up:
// λ·Δ2²/(2σ²), Δ2² = L0 (add_remove) or 2·L0 (replace). +Inf for an order
// that is not finite and > 1.
func (t Threshold) countRDP(order float64, replace bool) float64 {
	if !(order > 1) || math.IsInf(order, 1) {
		return math.Inf(1)
	}
	l2sq := float64(t.L0)
	if replace {
		l2sq *= 2
	}
	return divUp(budget.MulUp(order, l2sq), 2*t.Sigma*t.Sigma)
}

// keyRDP is the key-count test's part of one window's curve, rounded up:
// λ·L0²/(2σ_k²) — one user changes a window's distinct keys F by at most
// L0 under either relation (under replace u's exclusive keys go, u′'s
// come, F moves by their difference); 0 without a key limit.
func (t Threshold) keyRDP(order float64) float64 {
	if t.KeyLimit <= 0 {
		return 0
	}
	if !(order > 1) || math.IsInf(order, 1) {
		return math.Inf(1)
	}
	l := float64(t.L0)
	return divUp(budget.MulUp(order, budget.MulUp(l, l)), 2*t.KeySigma*t.KeySigma)
}

// divUp is a/b rounded toward +∞ (a ≥ 0, b > 0; 2σ² is exact).
func divUp(a, b float64) float64 {
	q := a / b
	if math.IsInf(q, 0) || math.IsNaN(q) || q == 0 {
		return q
	}
	if math.FMA(q, b, -a) < 0 { // q·b below a: the exact quotient is above q
		return math.Nextafter(q, math.Inf(1))
	}
	return q
}

// Period is what one budget period composes of a histogram's (or all
// selecting histograms') per-window selections (see the package doc, "A
// period").
type Period struct {
	// Units is the windows whose curves compose: Σ over the selecting
	// histograms of K′ = min(K, W) with the cross-window bound, W without.
	Units int
	// DeltaUnits is the windows whose δ_w add up: K′ (add_remove) or
	// min(2K, W) (replace) with the bound, W without.
	DeltaUnits int
	// Replace is the neighbour relation (false: add_remove).
	Replace bool
}

// NewPeriod is the Period of one histogram with windows windows per
// period and cross-window bound k (0: off) under the neighbour relation.
func NewPeriod(windows, k int, replace bool) Period {
	if k <= 0 {
		return Period{Units: windows, DeltaUnits: windows, Replace: replace}
	}
	d := min(k, windows)
	if replace {
		d = min(2*k, windows)
	}
	return Period{Units: min(k, windows), DeltaUnits: d, Replace: replace}
}

// Add is the Period of p's and q's selections together (same relation).
func (p Period) Add(q Period) Period {
	return Period{Units: p.Units + q.Units, DeltaUnits: p.DeltaUnits + q.DeltaUnits, Replace: p.Replace || q.Replace}
}

// Charge is what a period of selections costs: the composed curve and the
// δ term DeltaUnits·δ_w, both rounded up. The count noise's part composes
// over Units windows (under replace with the bound, Units·2l0 covers
// a·2l0 + (2K′ − 2a)·l0: package doc), the key-count test's over
// DeltaUnits: its sensitivity is L0 under either relation, so under
// replace it changes in every window of S ∪ S′, up to min(2K, W) of them
// (a review found it composed over K′: 5.3% under at every order for
// σ_k = 3√l0·σ, ε 1.028 against 1.000 claimed).
func (t Threshold) Charge(p Period, orders []float64) (budget.Curve, float64, error) {
	if err := t.Check(); err != nil {
		return budget.Curve{}, 0, err
	}
	if p.Units < 1 || p.DeltaUnits < 1 {
		return budget.Curve{}, 0, errors.New("selection: a period composes at least one window")
	}
	eps := make([]float64, len(orders))
	for i, o := range orders {
		eps[i] = budget.AddUp(budget.MulUp(float64(p.Units), t.countRDP(o, p.Replace)),
			budget.MulUp(float64(p.DeltaUnits), t.keyRDP(o)))
	}
	c, err := budget.NewCurve(orders, eps)
	if err != nil {
		return budget.Curve{}, 0, err
	}
	return c, math.Min(1, budget.MulUp(float64(p.DeltaUnits), t.WindowDelta())), nil
}

// Guarantee is the (ε, δ) of a period's selections: the composed curve
// converted at ConversionDelta, plus ThresholdDelta.
type Guarantee struct {
	Epsilon                         float64
	ConversionDelta, ThresholdDelta float64
}

// Delta is the guarantee's whole δ.
func (g Guarantee) Delta() float64 { return g.ConversionDelta + g.ThresholdDelta }

// GuaranteeOf is the period's guarantee at conversion δ convDelta.
func (t Threshold) GuaranteeOf(p Period, orders []float64, convDelta float64) (Guarantee, error) {
	c, d, err := t.Charge(p, orders)
	if err != nil {
		return Guarantee{}, err
	}
	eps, _, err := c.Epsilon(convDelta)
	if err != nil {
		return Guarantee{}, err
	}
	return Guarantee{Epsilon: eps, ConversionDelta: convDelta, ThresholdDelta: d}, nil
}

// WindowGuarantee is the (ε, δ) of one window's selection alone, with its
// δ split evenly between the threshold (δ_w) and the conversion: the
// per-selection budget at which [Batch] is compared.
func (t Threshold) WindowGuarantee(replace bool, orders []float64) (Guarantee, error) {
	dw := t.WindowDelta()
	return t.GuaranteeOf(Period{Units: 1, DeltaUnits: 1, Replace: replace}, orders, dw)
}

// tail is P[Z ≥ m] for Z ~ N_Z(0, σ²) (P[Z = z] ∝ exp(−z²/(2σ²)), CKS20
// Definition 1). For σ ≤ exactSigma it sums the mass function; above, it
// is the continuous bound P[Z ≥ m] ≤ Φ̄((m−1)/σ) for m ≥ 1 (Σ_{z≥m} f(z)
// ≤ ∫_{m−1}^∞ f for the decreasing f = exp(−z²/(2σ²)), and the
// normalising sum is ≥ √(2π)·σ by Poisson summation), and by symmetry
// 1 − that bound at 1 − m for m ≤ 0 (there a lower bound, used only for
// keep probabilities shown to operators; WindowDelta never reads it).
func tail(sigma float64, m int64) float64 {
	if m <= 0 {
		return 1 - tail(sigma, 1-m) // symmetry: P[Z ≥ m] = 1 − P[Z ≤ m−1] = 1 − P[Z ≥ 1−m]
	}
	if sigma > exactSigma {
		return normalTail(float64(m-1) / sigma)
	}
	s2 := 2 * sigma * sigma
	f := func(z int64) float64 { x := float64(z); return math.Exp(-x * x / s2) }
	norm := 1.0
	for z := int64(1); ; z++ {
		v := f(z)
		norm += 2 * v
		if v < norm*1e-18 {
			break
		}
	}
	sum := 0.0
	for z := m; ; z++ {
		v := f(z)
		sum += v
		if v == 0 || v < sum*1e-18 {
			break
		}
	}
	return math.Min(1, sum/norm)
}

// normalTail is Φ̄(x) = P[N(0, 1) > x].
func normalTail(x float64) float64 { return 0.5 * math.Erfc(x/math.Sqrt2) }

// normalTailInv is Φ̄⁻¹(q) for q ∈ (0, 1).
func normalTailInv(q float64) float64 { return math.Sqrt2 * math.Erfcinv(2*q) }
