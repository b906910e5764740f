package mechanism

import (
	"math"
	"math/big"
)

// # Charges rounded up (issue 28 item 5)
//
// RDP(λ) evaluates each mechanism's closed form in floating point, rounded
// to nearest at every step, so the value it returns can lie an ulp or more
// below the exact value of the same formula at the calibrated parameters
// (the Gaussian's λΔ2²/(2σ²) at σ² = 3 rounds down at about half the
// orders of the budget's grid). The calibrations target RDP and are left
// as they are; what a release is charged is UpperRDP: the same formula
// raised by a bound on its evaluation's rounding error, so that the charge
// is at least the exact value at every order (budget.ChargeOf composes it
// with the grid residual, rounded up). TestUpperRDPBoundsTheFormula checks
// it against 300-bit evaluations of the formulas for every kind and
// calibration the stage uses.

// UpperRDP is implemented by the count mechanisms the stage charges: their
// RDP(λ) raised by a bound on its floating-point evaluation error, never
// below the exact value of the formula RDP evaluates at the calibrated
// parameters; +Inf where RDP is.
type UpperRDP interface {
	UpperRDP(order float64) float64
}

// genericRDPMargin is the relative margin UpperRDPOf adds for a mechanism
// without UpperRDP (none the stage charges: the posterior, Hellinger and
// simplex mechanisms of the papers' tools): 2^-40, about 2,000 ulps.
const genericRDPMargin = 0x1p-40

// UpperRDPOf is m's UpperRDP(λ) when m implements UpperRDP, else m.RDP(λ)
// raised by a relative 2^-40 (a margin, not a proven bound).
func UpperRDPOf(m Mechanism, order float64) float64 {
	if u, ok := m.(UpperRDP); ok {
		return u.UpperRDP(order)
	}
	return raiseRel(m.RDP(order), genericRDPMargin)
}

// raiseRel is v·(1 + rel) rounded toward +∞ (v ≥ 0 or +Inf; NaN → +Inf).
func raiseRel(v, rel float64) float64 {
	if math.IsNaN(v) {
		return math.Inf(1)
	}
	if math.IsInf(v, 1) || v == 0 {
		return v
	}
	return math.Nextafter(v+v*rel, math.Inf(1))
}

// UpperRDP is λ′Δ2²/(2σ²) rounded toward +∞: σ² is a dyadic rational and
// λ′, Δ2² floats, so the exact quotient is computed in big.Float and
// rounded up once (the float expression in RDP rounds to nearest).
func (m *gaussianMech) UpperRDP(order float64) float64 {
	if math.IsNaN(order) || math.IsInf(order, 0) || !(order > 1) {
		return math.Inf(1)
	}
	num := new(big.Float).SetPrec(106).SetFloat64(order) // 53 + 53 bits: the product is exact
	num.Mul(num, new(big.Float).SetFloat64(m.l2sq))
	den := new(big.Float).SetFloat64(m.dg.sigma2())
	den.SetMantExp(den, 1) // 2σ², exact
	q := new(big.Float).SetPrec(53).SetMode(big.ToPositiveInf).Quo(num, den)
	v, acc := q.Float64()
	if acc == big.Below {
		v = math.Nextafter(v, math.Inf(1))
	}
	return v
}

// UpperRDP is laplaceVectorRDP at the calibrated scale with every term
// raised by its rounding allowance (discreteLaplaceRDPUp).
func (m *laplaceMech) UpperRDP(order float64) float64 {
	if math.IsNaN(order) || math.IsInf(order, 0) || !(order > 1) {
		return math.Inf(1)
	}
	b := m.scale()
	n := math.Floor(m.d1 / m.dinf)
	rem := m.d1 - n*m.dinf
	v := addUpF(mulUpF(n, discreteLaplaceRDPUp(order, m.dinf, b)), discreteLaplaceRDPUp(order, rem, b))
	if math.IsNaN(v) {
		return math.Inf(1)
	}
	return v
}

// discreteLaplaceRDPUp is discreteLaplaceRDP raised by a bound on its
// rounding error. The value is t₁ + t₂, t₁ = Δ/b > 0 and t₂ =
// log1p(y)/(λ−1) ≤ 0 with y = −B·(1 − E) ∈ (−½, 0] (B < q/(1+q) < ½), where
// log1p's condition number is at most 2. Every library call (Exp, Expm1,
// Log1p) is within 1 ulp, and an argument x carrying a relative error ε
// gives exp(x) a relative error |x|·ε; the exponents are at most
// a = (2λ−1)·max(Δ, 1)/b + 1/b in magnitude. So t₂ carries a relative error
// below (16 + 4a)·2⁻⁵³ and t₁ one of 2⁻⁵³, and the absolute error of the sum
// is below (17 + 4a)·2⁻⁵³·(|t₁| + |t₂|) — which the cancellation between t₁
// and t₂ (large b) can make large relative to the sum. The allowance is 16
// times that bound: (32 + 8a)·2⁻⁵⁰·(|t₁| + |t₂|).
func discreteLaplaceRDPUp(lambda, delta, b float64) float64 {
	if delta == 0 {
		return 0
	}
	q := math.Exp(-1 / b)
	den := (1 + q) * -math.Expm1(-(2*lambda-1)/b)
	bb := q * -math.Expm1(-2*(lambda-1)/b) / den
	t1 := delta / b
	t2 := math.Log1p(-bb*-math.Expm1(-(2*lambda-1)*delta/b)) / (lambda - 1)
	a := (2*lambda-1)*math.Max(delta, 1)/b + 1/b
	allow := (32 + 8*a) * 0x1p-50 * (math.Abs(t1) + math.Abs(t2))
	return addUpF(math.Max(t1+t2, 0), allow)
}

// UpperRDP is 000 Corollary 3's bound at the calibrated (r, α_eff) with its
// argument lowered and its value raised by their rounding allowances
// (dirichletRDPUp); +Inf for orders ≥ MaxOrder().
func (m *dirichletMech) UpperRDP(order float64) float64 {
	if !(order < m.maxOrder) {
		return math.Inf(1)
	}
	return dirichletRDPUp(order, m.alphaEff(), m.r, m.l2sq, m.linf)
}

// dirichletRDPUp is dirichletRDP, ½λ′r²Δ2²ψ′(α_eff − (λ′−1)rΔ∞), bounded
// above whatever the rounding. λ′ − 1 is exact (Sterbenz for λ′ ≤ 2, and
// 1 is a multiple of λ′'s ulp beyond), so the argument's two products and
// its subtraction put it within 3·2⁻⁵³·(α_eff + (λ′−1)rΔ∞) of the exact
// argument — a large error relative to an argument near 0 (an order near
// MaxOrder). ψ′ is decreasing, so evaluating it at the argument lowered by
// 2⁻⁵⁰·(α_eff + (λ′−1)rΔ∞) (8 ulps of those magnitudes) bounds ψ′ of the
// exact argument from above; special.Trigamma is within 4·10⁻¹⁵ relative
// (TestTrigammaAccuracy) and the product adds five roundings (together
// below 4.6·10⁻¹⁵), so the value raised by a relative 2⁻⁴⁴ ≈ 5.7·10⁻¹⁴,
// twelve times that, is an upper bound. +Inf where the lowered argument is
// not positive.
func dirichletRDPUp(order, alphaEff, r, l2sq, linf float64) float64 {
	return raiseRel(corollary3(order, alphaEff, r, l2sq, linf, 0x1p-50), 0x1p-44)
}

// UpperRDP is the exact worst case (its h₊, h₋ already raised by their
// rounding margins, exact.go) capped by dirichletRDPUp for covered specs,
// the concentrated mechanism's UpperRDP otherwise; +Inf for orders ≥
// MaxOrder().
func (m *exactMech) UpperRDP(order float64) float64 {
	if !m.covered {
		return m.dirichletMech.UpperRDP(order)
	}
	if !(order < m.maxOrder) {
		return math.Inf(1)
	}
	return math.Min(raiseRel(m.shape.exactWorst(order, m.alpha), 0x1p-50), dirichletRDPUp(order, m.alpha, 1, m.l2sq, m.linf))
}

// UpperRDP is RDP with each of its two bounds raised: the exact frontier's
// worst case (h₊, h₋ with their rounding margins; the few operations that
// combine them, a relative 2⁻⁵⁰) and Corollary 3's (dirichletRDPUp); +Inf
// for orders ≥ MaxOrder().
func (m *optimalMech) UpperRDP(order float64) float64 {
	if !(order < m.maxOrder) {
		return math.Inf(1)
	}
	up := dirichletRDPUp(order, m.alpha, m.r, m.l2sq, m.linf)
	if m.exact {
		w := m.shape.worst(gammaRenyiPlusR(order, m.alpha, m.r), gammaRenyiMinusR(order, m.alpha, m.r))
		if !math.IsNaN(w) {
			up = math.Min(raiseRel(w, 0x1p-50), up)
		}
	}
	return up
}

// UpperRDP is the base mechanism's (the posterior is post-processing).
func (m *CountPosterior) UpperRDP(order float64) float64 { return UpperRDPOf(m.base, order) }

// addUpF is a + b rounded toward +∞ (a, b ≥ 0 or +Inf).
func addUpF(a, b float64) float64 {
	s := a + b
	if math.IsInf(s, 0) || math.IsNaN(s) || b == 0 || a == 0 {
		return s
	}
	return math.Nextafter(s, math.Inf(1))
}

// mulUpF is k·e rounded toward +∞ (k, e ≥ 0 or +Inf; 0·+Inf = 0).
func mulUpF(k, e float64) float64 {
	if k == 0 || e == 0 {
		return 0
	}
	p := k * e
	if math.IsInf(p, 0) || math.IsNaN(p) || k == 1 || e == 1 {
		return p
	}
	return math.Nextafter(p, math.Inf(1))
}
