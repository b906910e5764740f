// Package special holds the special functions the mechanisms and the budget
// need — trigamma and digamma, log Γ differences, log B with a rigorous
// error bound, the regularized incomplete beta function enclosed in an
// interval — in one place, each with its method and accuracy stated.
//
// Invariant: every function documents its error; the enclosures (LbetaErr,
// IncBeta, IncBetaSeries) contain the exact value.
package special

import "math"

// Trigamma returns ψ′(x), the derivative of the digamma function, for x > 0,
// and +Inf for x ≤ 0 or NaN (callers only evaluate it where 000 Theorem 2 /
// Corollary 3 apply, and +Inf is the conservative "no bound" answer).
//
// Method: the recurrence ψ′(x) = ψ′(x+1) + 1/x² shifts x to ≥ 12, where the
// asymptotic series ψ′(x) ~ 1/x + 1/(2x²) + Σ_{k≥1} B_{2k}/x^{2k+1}
// (Abramowitz & Stegun 6.4.12) is summed through B₁₄. The first omitted term,
// |B₁₆|/x¹⁷ ≤ 7.1/12¹⁷, is below 4·10⁻¹⁸ relative to ψ′(12) ≈ 0.087, so the
// error is rounding only (TestTrigammaAccuracy checks ≤ 4·10⁻¹⁵ relative
// against exact values and gonum's mathext.Zeta(2, x), the Hurwitz zeta
// ζ(2, x) = ψ′(x)).
func Trigamma(x float64) float64 {
	if !(x > 0) {
		return math.Inf(1)
	}
	if math.IsInf(x, 1) {
		return 0
	}
	// Shift with the recurrence; terms are added from the smallest (largest
	// x) upward below, so accumulate them first and add the tail last.
	var acc float64
	for x < 12 {
		acc += 1 / (x * x)
		x++
	}
	ix := 1 / x
	z := ix * ix
	// Bernoulli numbers B2..B14: 1/6, -1/30, 1/42, -1/30, 5/66, -691/2730, 7/6.
	tail := ix * z * (1.0/6 + z*(-1.0/30+z*(1.0/42+z*(-1.0/30+z*(5.0/66+z*(-691.0/2730+z*(7.0/6)))))))
	return acc + (ix + 0.5*z + tail)
}

// Digamma returns ψ(x) = Γ′(x)/Γ(x) for finite x > 0 (NaN otherwise),
// and mag, the sum of the magnitudes it was computed from (for rounding
// allowances: the absolute error is a few ulps of mag).
//
// Method, as for Trigamma: the recurrence ψ(x) = ψ(x+1) − 1/x shifts x to
// y ≥ 12, where the asymptotic series ψ(y) ~ log y − 1/(2y) −
// Σ_{j≥1} B_{2j}/(2j·y^{2j}) (Abramowitz & Stegun 6.3.18) is summed through
// B₁₄; the first omitted term, |B₁₆|/(16·y¹⁶) ≤ 7.1/(16·12¹⁶), is below
// 2·10⁻¹⁸, so the error is rounding only (TestAverageDigamma checks it
// against exact values and gonum's mathext.Digamma).
func Digamma(x float64) (psi, mag float64) {
	if !(x > 0) || math.IsInf(x, 1) {
		return math.NaN(), math.NaN()
	}
	var acc float64
	for x < 12 {
		acc += 1 / x
		x++
	}
	z := 1 / (x * x)
	tail := z * (1.0/12 - z*(1.0/120-z*(1.0/252-z*(1.0/240-z*(1.0/132-z*(691.0/32760-z/12))))))
	lx := math.Log(x)
	psi = lx - 0.5/x - tail - acc
	return psi, math.Abs(lx) + acc + 0.5/x
}

// LgammaDiff returns L = log Γ(x+s) − log Γ(x) for x > 0, s ≥ 0, and the sum
// of the magnitudes of the terms it added (for rounding margins: the
// absolute error of L is a few ulps of mag).
//
// Method: the recurrence log Γ(z+1) = log Γ(z) + log z shifts x to ≥ 16,
// L(x, s) = L(x+n, s) − Σ_{j<n} log1p(s/(x+j)); then Stirling's series
// log Γ(z) = (z−½)log z − z + ½log 2π + Σ_k B_2k/(2k(2k−1)z^(2k−1)) gives,
// for y = x + s,
//
//	L = (x−½)·log1p(s/x) + s·log y − s + R(y) − R(x),
//
// with R the series through B₁₂ (the first omitted term is below 2e-18 at
// z ≥ 16). No large log Γ values are subtracted, so L is accurate to a few
// ulps of its own size (TestLgammaDiff).
func LgammaDiff(x, s float64) (l, mag float64) {
	if s == 0 {
		return 0, 0
	}
	var corr float64
	for x < 16 {
		corr += math.Log1p(s / x)
		x++
	}
	y := x + s
	a := (x - 0.5) * math.Log1p(s/x)
	b := s * math.Log(y)
	l = a + b - s + (StirlingTail(y) - StirlingTail(x)) - corr
	mag = math.Abs(a) + math.Abs(b) + s + corr
	return l, mag
}

// StirlingTail is Σ_{k=1}^{6} B_2k/(2k(2k−1)·z^(2k−1)) for z ≥ 16.
func StirlingTail(z float64) float64 {
	iz := 1 / z
	z2 := iz * iz
	return iz * (1.0/12 + z2*(-1.0/360+z2*(1.0/1260+z2*(-1.0/1680+z2*(1.0/1188+z2*(-691.0/360360))))))
}

func Lgamma(x float64) float64 {
	v, _ := math.Lgamma(x)
	return v
}

// LgammaErr bounds |Lgamma(x) − log Γ(x)| for finite x > 0, given the
// computed lg = Lgamma(x) (see the comment at the top of this file).
func LgammaErr(lg float64) float64 { return RoundRel * (1 + math.Abs(lg)) }

// LbetaErr returns Lbeta(a, b) and a bound of its absolute error for finite
// a, b > 0 (see the comment at the top of this file). With both shapes
// below 16 it is Lgamma(a) + Lgamma(b) − Lgamma(a+b), bounded by the three
// Lgamma allowances, the two additions and the rounding of a + b. Otherwise,
// with x = max(a, b) ≥ 16 and s = min(a, b), it is Lgamma(s) − L(x, s) with
// L = log Γ(x+s) − log Γ(x) from Stirling's series (LgammaDiff, exact.go),
// which subtracts no large Lgamma values: its error is a few ulps of the
// magnitude of its terms (bounded by RoundRel·(1 + mag)) plus the series
// truncation (< 2e-18 per evaluation at z ≥ 16, so 4e-18), where the
// direct form would be off by ulps of Lgamma(x) — ≈ 1e-12 at x = 1000,
// 2e-6 at x = 1e9.
func LbetaErr(a, b float64) (v, err float64) {
	if math.Max(a, b) >= 16 {
		return LbetaStirling(a, b)
	}
	return LbetaDirect(a, b)
}

// LbetaStirling is LbetaErr's form Lgamma(s) − L(x, s), x = max(a, b) ≥ 16.
func LbetaStirling(a, b float64) (v, err float64) {
	x, s := math.Max(a, b), math.Min(a, b)
	ls := Lgamma(s)
	d, mag := LgammaDiff(x, s)
	v = ls - d
	err = LgammaErr(ls) + RoundRel*(1+mag) + 4e-18 + UnitRound*(math.Abs(ls)+math.Abs(d))
	return v, err
}

// LbetaDirect is LbetaErr's form Lgamma(a) + Lgamma(b) − Lgamma(a+b).
func LbetaDirect(a, b float64) (v, err float64) {
	sum := a + b
	la, lb, lsum := Lgamma(a), Lgamma(b), Lgamma(sum)
	v = la + lb - lsum
	mag := math.Abs(la) + math.Abs(lb) + math.Abs(lsum)
	err = LgammaErr(la) + LgammaErr(lb) + LgammaErr(lsum) + 2*UnitRound*mag
	// Rounding of a + b: |fl(a+b) − (a+b)| ≤ u·(a+b), times max |ψ| ≤
	// |log y| + 1/y near it (doubled for the second-order terms).
	err += 2 * UnitRound * (sum*math.Abs(math.Log(sum)) + 1)
	return v, err
}

// ExpWiden returns w with e^E ≤ 1 + w and e^−E ≥ 1 − w for 0 ≤ E ≤ 1: a
// quantity computed as exp(L) with |L − exact| ≤ E (and exp itself < 1 ulp,
// covered by the constant 1 in E's RoundRel·(1 + M)) lies within a
// relative w of the exact value.
func ExpWiden(e float64) float64 { return e + e*e }

// IncBetaSeries encloses the regularized incomplete beta function I_x(a, b)
// for 0 < x < 1, a, b > 0, by its hypergeometric series (DLMF 8.17.8):
//
//	I_x(a, b) = x^a (1−x)^b / (a·B(a, b)) · Σ_{n≥0} t_n,
//	t_0 = 1,  t_{n+1} = t_n · (a+b+n)/(a+1+n) · x.
//
// The ratio ρ_n = (a+b+n)/(a+1+n)·x is non-increasing in n when b ≥ 1 and
// at most x when b < 1, so after N terms the omitted tail is at most
// t_N/(1−ρ_N) (b ≥ 1, if ρ_N < 1) or t_N/(1−x) (b < 1): a rigorous bound.
// ok is false if the series did not converge within MaxSeriesTerms.
func IncBetaSeries(x, a, b float64) (lo, hi float64, ok bool) {
	lx, l1x := math.Log(x), math.Log1p(-x)
	lb, lbErr := LbetaErr(a, b)
	la := math.Log(a)
	logPre := a*lx + b*l1x - la - lb
	sum, t := 0.0, 1.0
	var n int
	tail := math.Inf(1)
	for n = 0; n < MaxSeriesTerms; n++ {
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
		if d := (1-r)*(1-2*UnitRound) - 9*UnitRound; d > 0 {
			tail = next * (1 + 8*float64(n+2)*UnitRound) * (1 + 4*UnitRound) / d
			if tail <= 1e-17*sum {
				break
			}
		}
		t = next
	}
	if math.IsInf(tail, 1) || n == MaxSeriesTerms && tail > 1e-10*sum {
		return 0, 1, false
	}
	// The result is exp(logPre + log Σ): logPre within Lbeta's own bound
	// plus RoundRel·(1 + M) for the rest (M also counting the logarithms of
	// the sums); the summed recurrence is within 9(n+1)u relative (see the
	// comment at the top of this file), doubled as a bound of its log.
	ls, lt := math.Log(sum), math.Log(sum+tail)
	mag := math.Abs(a*lx) + math.Abs(b*l1x) + math.Abs(la) + math.Abs(lb) + math.Abs(ls) + math.Abs(lt)
	w := ExpWiden(lbErr + RoundRel*(1+mag) + 18*float64(n+1)*UnitRound)
	lo = math.Exp(logPre+ls) * (1 - w)
	hi = math.Exp(logPre+lt) * (1 + w)
	// Below 2^-1022, exp and the product lose relative precision: their
	// absolute error is at most 2·2^-1075, i.e. one denormal step (adding
	// or subtracting it leaves a normal number unchanged).
	lo -= math.SmallestNonzeroFloat64
	hi += math.SmallestNonzeroFloat64
	return math.Max(lo, 0), math.Min(hi, 1), true
}

// IncBeta encloses I_x(a, b) for x ∈ [0, 1], a, b > 0: the series above
// when x is below (a+1)/(a+b+2) (where it converges fast, and gives full
// relative precision in the lower tail), else 1 − I_{1−x}(b, a).
func IncBeta(x, a, b float64) (lo, hi float64, ok bool) {
	switch {
	case !(x > 0):
		return 0, 0, true
	case !(x < 1):
		return 1, 1, true
	case x <= (a+1)/(a+b+2):
		return IncBetaSeries(x, a, b)
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
		l, h, ok := IncBetaSeries(yLo, b, a)
		switch {
		case yHi == yLo:
		case yHi >= 1:
			h = 1
		default:
			var ok2 bool
			_, h, ok2 = IncBetaSeries(yHi, b, a)
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

// Lbeta is log B(a, b) = log Γ(a) + log Γ(b) − log Γ(a+b), without its
// error bound (see LbetaErr).
func Lbeta(a, b float64) float64 { v, _ := LbetaErr(a, b); return v }

// RoundRel is the rounding allowance per unit of magnitude: a quantity L
// computed from terms of total magnitude M (including the 1 + |Lgamma|
// of every Lgamma it uses) is trusted to an absolute RoundRel·(1+M) ≈
// 90u·(1+M), u = 2^-53 (see above for why that covers the error).
const RoundRel = 1e-14

// UnitRound is u = 2^-53, the unit roundoff of float64.
const UnitRound = 0x1p-53

// MaxSeriesTerms bounds the hypergeometric series of IncBetaSeries; with
// x ≤ 1/2 (the series is only used below the mean, see IncBeta) the terms
// decay at least like (1/2)^n after a transient, so this is never reached
// for shapes below ~1e6; beyond it the enclosure is reported as failed.
const MaxSeriesTerms = 200000
