package mechanism

import (
	"math"
)

// Rigorous enclosures of the probabilities that make up the δ of the
// simplex Dirichlet mechanism (003 Lemma 1, eq. (7)). Every function here
// returns an interval [lo, hi] that contains the exact value; the
// truncation and discretization errors are bounded analytically, and the
// floating-point rounding of the special functions (math.Lgamma, math.Log,
// math.Exp, ...) is absorbed by a relative widening of roundRel times the
// magnitude of the logarithms involved (TestIncBetaAgainstMpmath checks the
// enclosures against 30-digit mpmath values).

// roundRel is the relative rounding allowance per unit of |log| magnitude:
// a quantity computed as exp(L) with L a sum of terms of total magnitude M
// is trusted to a relative 1e-14·(1+M), about 50 times the ~2^-52·M that
// correctly rounded special functions would give.
const roundRel = 1e-14

// maxSeriesTerms bounds the hypergeometric series of incBetaSeries; with
// x ≤ 1/2 (the series is only used below the mean, see incBeta) the terms
// decay at least like (1/2)^n after a transient, so this is never reached
// for shapes below ~1e6; beyond it the enclosure is reported as failed.
const maxSeriesTerms = 200000

// incBetaSeries encloses the regularized incomplete beta function I_x(a, b)
// for 0 < x < 1, a, b > 0, by its hypergeometric series (DLMF 8.17.8):
//
//	I_x(a, b) = x^a (1−x)^b / (a·B(a, b)) · Σ_{n≥0} t_n,
//	t_0 = 1,  t_{n+1} = t_n · (a+b+n)/(a+1+n) · x.
//
// The ratio ρ_n = (a+b+n)/(a+1+n)·x is non-increasing in n when b ≥ 1 and
// at most x when b < 1, so after N terms the omitted tail is at most
// t_N/(1−ρ_N) (b ≥ 1, if ρ_N < 1) or t_N/(1−x) (b < 1): a rigorous bound.
// ok is false if the series did not converge within maxSeriesTerms.
func incBetaSeries(x, a, b float64) (lo, hi float64, ok bool) {
	lx, l1x := math.Log(x), math.Log1p(-x)
	lb := lbeta(a, b)
	logPre := a*lx + b*l1x - math.Log(a) - lb
	sum, t := 0.0, 1.0
	var n int
	tail := math.Inf(1)
	for n = 0; n < maxSeriesTerms; n++ {
		sum += t
		fn := float64(n)
		rho := (a + b + fn) / (a + 1 + fn) * x
		next := t * rho
		// Bound of the tail from term n+1 on.
		r := x
		if b >= 1 {
			r = (a + b + fn + 1) / (a + 2 + fn) * x
		}
		if r < 1 {
			tail = next / (1 - r)
			if tail <= 1e-17*sum {
				break
			}
		}
		t = next
	}
	if math.IsInf(tail, 1) || n == maxSeriesTerms && tail > 1e-10*sum {
		return 0, 1, false
	}
	mag := math.Abs(a*lx) + math.Abs(b*l1x) + math.Abs(lb) + math.Abs(math.Log(a))
	rel := roundRel*(1+mag) + float64(n+1)*0x1p-52
	pre := math.Exp(logPre)
	lo = pre * sum * (1 - rel)
	hi = pre * (sum + tail) * (1 + rel)
	return math.Max(lo, 0), math.Min(hi, 1), true
}

// incBeta encloses I_x(a, b) for x ∈ [0, 1], a, b > 0: the series above
// when x is below (a+1)/(a+b+2) (where it converges fast, and gives full
// relative precision in the lower tail), else 1 − I_{1−x}(b, a).
func incBeta(x, a, b float64) (lo, hi float64, ok bool) {
	switch {
	case !(x > 0):
		return 0, 0, true
	case !(x < 1):
		return 1, 1, true
	case x <= (a+1)/(a+b+2):
		return incBetaSeries(x, a, b)
	default:
		l, h, ok := incBetaSeries(1-x, b, a)
		return math.Max(0, 1-h), math.Min(1, 1-l), ok
	}
}

// lbeta is log B(a, b) = log Γ(a) + log Γ(b) − log Γ(a+b).
func lbeta(a, b float64) float64 { return lgamma(a) + lgamma(b) - lgamma(a+b) }

// pairLowerBounds encloses P12 = P[X₁ < γ, X₂ < γ] for (X₁, X₂, rest) ~
// Dir(a, a, k − 2a), k > 2a:
//
//	P12 = ∫_0^γ f(x) · P[X₂ < γ | X₁ = x] dx,
//	f = Beta(a, k−a) density,  X₂/(1−x) | X₁ = x ~ Beta(a, k−2a),
//
// (aggregation and neutrality of the Dirichlet), i.e. after the
// substitution u = x^a, which removes the x^(a−1) singularity,
//
//	P12 = 1/(a·B(a, k−a)) · ∫_0^{γ^a} A(u)·C(u) du,
//	A(u) = (1 − u^{1/a})^{k−a−1},  C(u) = I_{γ/(1−u^{1/a})}(a, k−2a).
//
// A is monotone (its exponent has a fixed sign) and C is non-decreasing, so
// on a cell [u_l, u_r] the integrand lies between min(A)·C(u_l) and
// max(A)·C(u_r): summing over a uniform grid of N cells gives a rigorous
// enclosure whose width shrinks like 1/N. N doubles from 64 until the width
// is at most absTol, up to 2^19 cells; ok is false if that is not enough.
func pairLowerBounds(gamma, a, k, absTol float64) (lo, hi float64, ok bool) {
	b2 := k - 2*a
	e := k - a - 1
	lpre := -math.Log(a) - lbeta(a, k-a)
	preRel := roundRel * (1 + math.Abs(lpre))
	pre := math.Exp(lpre)
	U := math.Pow(gamma, a)
	for n := 64; n <= 1<<19; n *= 2 {
		du := U / float64(n)
		var sLo, sHi float64
		// At u = 0: x = 0, A = 1, C = I_γ(a, b2).
		prevA := 1.0
		prevCLo, _, okC := incBeta(gamma, a, b2)
		if !okC {
			return 0, 1, false
		}
		for i := 1; i <= n; i++ {
			u := float64(i) * du
			if i == n {
				u = U
			}
			x := math.Pow(u, 1/a)
			if x > gamma { // rounding of u^(1/a) at the last point
				x = gamma
			}
			curA := math.Exp(e * math.Log1p(-x))
			cLo, cHi, okC := incBeta(gamma/(1-x), a, b2)
			if !okC {
				return 0, 1, false
			}
			aMin, aMax := math.Min(prevA, curA), math.Max(prevA, curA)
			// Rounding of A (one log1p, one exp): relative 1e-14·(1+|e·log1p(−x)|).
			aRel := roundRel * (1 + math.Abs(e*math.Log1p(-x)))
			sLo += du * aMin * (1 - aRel) * prevCLo
			sHi += du * aMax * (1 + aRel) * cHi
			prevA, prevCLo = curA, cLo
		}
		// du·n may differ from U by rounding; widen by the relative gap.
		gap := math.Abs(du*float64(n)-U) / U
		lo = pre * sLo * (1 - preRel - gap - 1e-15)
		hi = pre * sHi * (1 + preRel + gap + 1e-15)
		if hi-lo <= absTol {
			return math.Max(lo, 0), math.Min(hi, 1), true
		}
	}
	return math.Max(lo, 0), math.Min(hi, 1), false
}

// simplexDelta encloses δ(γ) = 1 − min_p P[Dir(k·p) ∈ Ω₁] of 003 Theorem 1
// for |W| = m and lower bound η, where Ω₁ = {x : x_i ≥ γ ∀ i ∈ W} (eq.
// (3)). The minimum over p ∈ Δ^{(η,η̄)}_{n,W} is at p_i = η for every i ∈ W
// (see simplexMinimizer in simplex.go for the proof), where, by aggregation,
// (x_i)_{i∈W} are the first m coordinates of Dir(kη, …, kη, k(1−mη)), so
//
//	δ(γ) = P[∃ i ∈ W : X_i < γ],   X_i ~ Beta(a, k−a),  a = kη.
//
// With P1 = P[X₁ < γ] = I_γ(a, k−a) and P12 = P[X₁ < γ, X₂ < γ]:
//
//   - m = 2: δ = 2·P1 − P12 exactly (inclusion–exclusion);
//   - m ≥ 3: Bonferroni, m·P1 − C(m,2)·P12 ≤ δ ≤ m·P1; the upper end is
//     reported (a valid, slightly conservative δ).
//
// lo and hi enclose the reported quantity's uncertainty: for m = 2 they
// enclose the exact δ; for m ≥ 3 hi is the rigorous upper bound m·P1 (with
// its rounding allowance) and lo the Bonferroni lower bound, so that hi − lo
// also shows how conservative the union bound is. ok is false if an
// enclosure could not be computed to absolute precision absTol.
func simplexDelta(gamma, eta, k float64, m int, absTol float64) (lo, hi float64, ok bool) {
	a := k * eta
	p1Lo, p1Hi, ok1 := incBeta(gamma, a, k-a)
	if !ok1 {
		return 0, 1, false
	}
	fm := float64(m)
	pairs := fm * (fm - 1) / 2
	// P12 ≤ P1; only its enclosure to absTol/pairs matters. For m ≥ 3 it
	// only feeds the (informative) lower end, so a failure is not fatal.
	p12Lo, p12Hi, ok2 := pairLowerBounds(gamma, a, k, absTol/pairs)
	if !ok2 {
		if m == 2 {
			return 0, 1, false
		}
		p12Hi = p1Hi
	}
	if m == 2 {
		lo, hi = 2*p1Lo-p12Hi, 2*p1Hi-p12Lo
	} else {
		lo, hi = fm*p1Lo-pairs*p12Hi, fm*p1Hi
	}
	lo = math.Max(lo, 0)
	hi = math.Min(hi, 1)
	if m == 2 && hi-lo > absTol {
		return lo, hi, false
	}
	return lo, hi, true
}
