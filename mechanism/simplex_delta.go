package mechanism

import (
	"math"

	"github.com/dpstage/stage/internal/lib/special"
)

// Rigorous enclosures of the probabilities that make up the δ of the
// simplex Dirichlet mechanism (003 Lemma 1, eq. (7)). Every function here
// returns an interval [lo, hi] that contains the exact value; the
// truncation and discretization errors are bounded analytically, and the
// floating-point rounding is bounded as follows.
//
//   - math.Lgamma: |special.Lgamma(x) − log Γ(x)| ≤ special.RoundRel·(1 + |special.Lgamma(x)|) for
//     finite x > 0 (special.LgammaErr). Go's Lgamma is FreeBSD's e_lgamma_r.c: for
//     8 ≤ x < 2^58 it computes (x−½)(log x − 1) + w(1/x) with |w − exact| <
//     2^-58.74, and a first-order analysis (log < 1 ulp, amplified by
//     t/(t−1) ≤ 1.93 in t − 1; one rounding each for t − 1, the product and
//     the sum) gives below 7u·|log Γ(x)|, u = 2^-53; below 8 it evaluates
//     rational approximations of accuracy < 2^-58 on [0, 2] (with special
//     care at the zeros x = 1, 2) plus at most six logarithms/products, and
//     beyond 2^58 x(log x − 1), whose omitted terms are below u·|log Γ|.
//     TestLgammaAccuracy measures the error against 320-bit references
//     (Stirling's series in math/big, itself checked against exact log
//     (n−1)!) from x = 1e-300 to 1e12: at most 2u·(1 + |special.Lgamma|) from 8 on
//     and 16.5u·(1 + |special.Lgamma|) below (at x ≈ 1.2, where |special.Lgamma| ≈ 0.09),
//     and asserts it stays below special.RoundRel/4. The bound used, special.RoundRel =
//     1e-14 ≈ 90u per unit of (1 + |special.Lgamma|), is thus 5 times the worst
//     measured error.
//   - log B(a, b) (special.LbetaErr): for shapes below 16, special.Lgamma(a) + special.Lgamma(b) −
//     special.Lgamma(a+b), bounded by the three special.Lgamma allowances, the two
//     additions (≤ 2u·Σ|special.Lgamma|) and the rounding of s = a + b (|log
//     Γ(s(1+θ)) − log Γ(s)| ≤ 2u·(s|log s| + 1) for |θ| ≤ u, from |ψ(y)| ≤
//     |log y| + 1/y); above, special.Lgamma(min) − [log Γ(a+b) − log Γ(max)] with the
//     bracket from Stirling's series (special.LgammaDiff), which avoids the
//     cancellation. Relative to |log B| alone the error can be large: the
//     direct form of special.Lbeta(1, 999) = −log 999 subtracts special.Lgamma values of
//     magnitude ≈ 5900 and is off by 1.4e-12, far above special.RoundRel·(1 + |log
//     B|) ≈ 8e-14, the allowance used before. TestLbetaErr checks the bound
//     against 320-bit references for shapes from 1e-300 to 1e9.
//   - math.Log, Log1p, Exp: < 1 ulp; a logarithm L = Σ terms computed with
//     a few roundings per term is trusted to special.RoundRel·(1 + Σ|term|), far
//     above the few u·Σ|term| the analysis gives; exp(L ± E) is widened by
//     the relative factor 1 ± (E + E²) (special.ExpWiden).
//   - Series recurrences: each ratio costs ≤ 7 roundings, so after n terms
//     the running sum is within 9(n+1)u of the exact partial sum (terms of
//     one sign; first order, 9(n+1)u ≤ 3e-10 for n ≤ special.MaxSeriesTerms).

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
	lbA, lbAErr := special.LbetaErr(a, k-a)
	la := math.Log(a)
	lpre := -la - lbA
	preRel := special.ExpWiden(lbAErr + special.RoundRel*(1+math.Abs(la)+math.Abs(lbA)))
	pre := math.Exp(lpre)
	U := math.Pow(gamma, a)
	for n := 64; n <= 1<<19; n *= 2 {
		du := U / float64(n)
		var sLo, sHi float64
		// At u = 0: x = 0, A = 1, C = I_γ(a, b2).
		prevA := 1.0
		prevCLo, _, okC := special.IncBeta(gamma, a, b2)
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
			cLo, cHi, okC := special.IncBeta(gamma/(1-x), a, b2)
			if !okC {
				return 0, 1, false
			}
			aMin, aMax := math.Min(prevA, curA), math.Max(prevA, curA)
			// Rounding of A (one log1p, one exp): relative 1e-14·(1+|e·log1p(−x)|).
			aRel := special.RoundRel * (1 + math.Abs(e*math.Log1p(-x)))
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
	p1Lo, p1Hi, ok1 := special.IncBeta(gamma, a, k-a)
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
