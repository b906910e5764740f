package mechanism

import (
	"math"
)

// Rigorous enclosures of the probabilities that make up the δ of the
// simplex Dirichlet mechanism (003 Lemma 1, eq. (7)). Every function here
// returns an interval [lo, hi] that contains the exact value; the
// truncation and discretization errors are bounded analytically, and the
// floating-point rounding is bounded as follows.
//
//   - math.Lgamma: |lgamma(x) − log Γ(x)| ≤ roundRel·(1 + |lgamma(x)|) for
//     finite x > 0 (lgammaErr). Go's Lgamma is FreeBSD's e_lgamma_r.c: for
//     8 ≤ x < 2^58 it computes (x−½)(log x − 1) + w(1/x) with |w − exact| <
//     2^-58.74, and a first-order analysis (log < 1 ulp, amplified by
//     t/(t−1) ≤ 1.93 in t − 1; one rounding each for t − 1, the product and
//     the sum) gives below 7u·|log Γ(x)|, u = 2^-53; below 8 it evaluates
//     rational approximations of accuracy < 2^-58 on [0, 2] (with special
//     care at the zeros x = 1, 2) plus at most six logarithms/products, and
//     beyond 2^58 x(log x − 1), whose omitted terms are below u·|log Γ|.
//     TestLgammaAccuracy measures the error against 320-bit references
//     (Stirling's series in math/big, itself checked against exact log
//     (n−1)!) from x = 1e-300 to 1e12: at most 2u·(1 + |lgamma|) from 8 on
//     and 16.5u·(1 + |lgamma|) below (at x ≈ 1.2, where |lgamma| ≈ 0.09),
//     and asserts it stays below roundRel/4. The bound used, roundRel =
//     1e-14 ≈ 90u per unit of (1 + |lgamma|), is thus 5 times the worst
//     measured error.
//   - log B(a, b) (lbetaErr): for shapes below 16, lgamma(a) + lgamma(b) −
//     lgamma(a+b), bounded by the three lgamma allowances, the two
//     additions (≤ 2u·Σ|lgamma|) and the rounding of s = a + b (|log
//     Γ(s(1+θ)) − log Γ(s)| ≤ 2u·(s|log s| + 1) for |θ| ≤ u, from |ψ(y)| ≤
//     |log y| + 1/y); above, lgamma(min) − [log Γ(a+b) − log Γ(max)] with the
//     bracket from Stirling's series (lgammaDiff), which avoids the
//     cancellation. Relative to |log B| alone the error can be large: the
//     direct form of lbeta(1, 999) = −log 999 subtracts lgamma values of
//     magnitude ≈ 5900 and is off by 1.4e-12, far above roundRel·(1 + |log
//     B|) ≈ 8e-14, the allowance used before. TestLbetaErr checks the bound
//     against 320-bit references for shapes from 1e-300 to 1e9.
//   - math.Log, Log1p, Exp: < 1 ulp; a logarithm L = Σ terms computed with
//     a few roundings per term is trusted to roundRel·(1 + Σ|term|), far
//     above the few u·Σ|term| the analysis gives; exp(L ± E) is widened by
//     the relative factor 1 ± (E + E²) (expWiden).
//   - Series recurrences: each ratio costs ≤ 7 roundings, so after n terms
//     the running sum is within 9(n+1)u of the exact partial sum (terms of
//     one sign; first order, 9(n+1)u ≤ 3e-10 for n ≤ maxSeriesTerms).

// roundRel is the rounding allowance per unit of magnitude: a quantity L
// computed from terms of total magnitude M (including the 1 + |lgamma|
// of every lgamma it uses) is trusted to an absolute roundRel·(1+M) ≈
// 90u·(1+M), u = 2^-53 (see above for why that covers the error).
const roundRel = 1e-14

// unitRound is u = 2^-53, the unit roundoff of float64.
const unitRound = 0x1p-53

// lgammaErr bounds |lgamma(x) − log Γ(x)| for finite x > 0, given the
// computed lg = lgamma(x) (see the comment at the top of this file).
func lgammaErr(lg float64) float64 { return roundRel * (1 + math.Abs(lg)) }

// lbetaErr returns lbeta(a, b) and a bound of its absolute error for finite
// a, b > 0 (see the comment at the top of this file). With both shapes
// below 16 it is lgamma(a) + lgamma(b) − lgamma(a+b), bounded by the three
// lgamma allowances, the two additions and the rounding of a + b. Otherwise,
// with x = max(a, b) ≥ 16 and s = min(a, b), it is lgamma(s) − L(x, s) with
// L = log Γ(x+s) − log Γ(x) from Stirling's series (lgammaDiff, exact.go),
// which subtracts no large lgamma values: its error is a few ulps of the
// magnitude of its terms (bounded by roundRel·(1 + mag)) plus the series
// truncation (< 2e-18 per evaluation at z ≥ 16, so 4e-18), where the
// direct form would be off by ulps of lgamma(x) — ≈ 1e-12 at x = 1000,
// 2e-6 at x = 1e9.
func lbetaErr(a, b float64) (v, err float64) {
	if math.Max(a, b) >= 16 {
		return lbetaStirling(a, b)
	}
	return lbetaDirect(a, b)
}

// lbetaStirling is lbetaErr's form lgamma(s) − L(x, s), x = max(a, b) ≥ 16.
func lbetaStirling(a, b float64) (v, err float64) {
	x, s := math.Max(a, b), math.Min(a, b)
	ls := lgamma(s)
	d, mag := lgammaDiff(x, s)
	v = ls - d
	err = lgammaErr(ls) + roundRel*(1+mag) + 4e-18 + unitRound*(math.Abs(ls)+math.Abs(d))
	return v, err
}

// lbetaDirect is lbetaErr's form lgamma(a) + lgamma(b) − lgamma(a+b).
func lbetaDirect(a, b float64) (v, err float64) {
	sum := a + b
	la, lb, lsum := lgamma(a), lgamma(b), lgamma(sum)
	v = la + lb - lsum
	mag := math.Abs(la) + math.Abs(lb) + math.Abs(lsum)
	err = lgammaErr(la) + lgammaErr(lb) + lgammaErr(lsum) + 2*unitRound*mag
	// Rounding of a + b: |fl(a+b) − (a+b)| ≤ u·(a+b), times max |ψ| ≤
	// |log y| + 1/y near it (doubled for the second-order terms).
	err += 2 * unitRound * (sum*math.Abs(math.Log(sum)) + 1)
	return v, err
}

// expWiden returns w with e^E ≤ 1 + w and e^−E ≥ 1 − w for 0 ≤ E ≤ 1: a
// quantity computed as exp(L) with |L − exact| ≤ E (and exp itself < 1 ulp,
// covered by the constant 1 in E's roundRel·(1 + M)) lies within a
// relative w of the exact value.
func expWiden(e float64) float64 { return e + e*e }

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
	lb, lbErr := lbetaErr(a, b)
	la := math.Log(a)
	logPre := a*lx + b*l1x - la - lb
	sum, t := 0.0, 1.0
	var n int
	tail := math.Inf(1)
	for n = 0; n < maxSeriesTerms; n++ {
		sum += t
		fn := float64(n)
		rho := (a + b + fn) / (a + 1 + fn) * x
		next := t * rho
		// Bound of the tail from term n+1 on: next/(1 − r) with r the
		// largest later ratio. The computed next and r are within
		// 7(n+2)u and 8u (relative) of the exact ones and 1 − r rounds by
		// ≤ u, so the exact 1 − r is at least d below; next is rounded up
		// accordingly, and 4u more covers the final product and quotient.
		r := x
		if b >= 1 {
			r = (a + b + fn + 1) / (a + 2 + fn) * x
		}
		if d := (1-r)*(1-2*unitRound) - 9*unitRound; d > 0 {
			tail = next * (1 + 8*float64(n+2)*unitRound) * (1 + 4*unitRound) / d
			if tail <= 1e-17*sum {
				break
			}
		}
		t = next
	}
	if math.IsInf(tail, 1) || n == maxSeriesTerms && tail > 1e-10*sum {
		return 0, 1, false
	}
	// The result is exp(logPre + log Σ): logPre within lbeta's own bound
	// plus roundRel·(1 + M) for the rest (M also counting the logarithms of
	// the sums); the summed recurrence is within 9(n+1)u relative (see the
	// comment at the top of this file), doubled as a bound of its log.
	ls, lt := math.Log(sum), math.Log(sum+tail)
	mag := math.Abs(a*lx) + math.Abs(b*l1x) + math.Abs(la) + math.Abs(lb) + math.Abs(ls) + math.Abs(lt)
	w := expWiden(lbErr + roundRel*(1+mag) + 18*float64(n+1)*unitRound)
	lo = math.Exp(logPre+ls) * (1 - w)
	hi = math.Exp(logPre+lt) * (1 + w)
	// Below 2^-1022, exp and the product lose relative precision: their
	// absolute error is at most 2·2^-1075, i.e. one denormal step (adding
	// or subtracting it leaves a normal number unchanged).
	lo -= math.SmallestNonzeroFloat64
	hi += math.SmallestNonzeroFloat64
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
		// I_x(a, b) = 1 − I_{1−x}(b, a). 1 − x is exact for x ≥ 1/2
		// (Sterbenz) or if 1 − y == x; otherwise the exact 1 − x lies
		// between the neighbours of y = fl(1 − x), and I_y(b, a) is
		// increasing in y, so it is enclosed from both sides (the error of
		// I_y at the rounded point is up to b·u relative, which the series'
		// allowance does not cover for large b).
		y := 1 - x
		yLo, yHi := y, y
		if x < 0.5 && 1-y != x {
			yLo, yHi = math.Nextafter(y, 0), math.Nextafter(y, 1)
		}
		l, h, ok := incBetaSeries(yLo, b, a)
		switch {
		case yHi == yLo:
		case yHi >= 1:
			h = 1
		default:
			var ok2 bool
			_, h, ok2 = incBetaSeries(yHi, b, a)
			ok = ok && ok2
		}
		// 1 − h and 1 − l rounded outwards.
		lo, hi := 1-h, 1-l
		if h > 0 {
			lo = math.Nextafter(lo, 0)
		}
		if l > 0 {
			hi = math.Nextafter(hi, 2)
		}
		return math.Max(0, lo), math.Min(1, hi), ok
	}
}

// lbeta is log B(a, b) = log Γ(a) + log Γ(b) − log Γ(a+b), without its
// error bound (see lbetaErr).
func lbeta(a, b float64) float64 { v, _ := lbetaErr(a, b); return v }

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
	lbA, lbAErr := lbetaErr(a, k-a)
	la := math.Log(a)
	lpre := -la - lbA
	preRel := expWiden(lbAErr + roundRel*(1+math.Abs(la)+math.Abs(lbA)))
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
