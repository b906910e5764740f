package mechanism

import (
	"math"

	"github.com/dpstage/stage/internal/lib/special"
)

// This file is the `optimal` calibration of the Dirichlet mechanism: the
// (r, α) on the privacy frontier at the target (λ, ε) that minimizes the
// expected ℓ2 error of one release at a public planning figure N (the events
// one release typically counts, Spec.ExpectedEvents) over d bins
// (Spec.Bins).
//
// # The frontier
//
// 000 Corollary 3 holds for every r > 0: one draw of Dir(r·x + α) is
// (λ, ε)-RDP with ε = ½·λ·r²·Δ2²·ψ′(α − (λ−1)·r·Δ∞), eq. (10). For each r
// the smallest α meeting the target is the concentrated calibration with the
// sensitivities scaled by r (Δ2² → r²Δ2², Δ∞ → rΔ∞), since eq. (10) is eq.
// (8) with those sensitivities. Where the exact calibration's worst-case
// argument applies (unit changes; ExactCovers), the exact frontier is used
// instead: the per-bin worst cases of exact.go generalize to r (a count
// change of ±1 moves a shape by ±r), with s = λ − 1 and L(x, t) =
// log Γ(x+t) − log Γ(x),
//
//	h₊(λ, α, r) = D_λ(Gamma(α+r) ‖ Gamma(α))  = [L(α+r, s·r) − s·L(α, r)]/s   (bin 1 → 0)
//	h₋(λ, α, r) = D_λ(Gamma(α) ‖ Gamma(α+r))  = [s·L(α, r) − L(α−s·r, s·r)]/s (bin 0 → 1)
//
// (F(u; δ) of exact.go at u = α + r, δ = r and at u = α, δ = −r), finite iff
// λ < α/r + 1; steps (1)–(3) of exact.go's proof hold for any real shift, so
// the exact worst case is the same maximum of p·h₊ + q·h₋ over the
// admissible (p, q). At r = 1 these are exactly exact.go's h₊, h₋.
//
// # The error model (what "optimal" minimizes)
//
// Let p = x/N be the true normalized histogram and Y ~ Dir(β), β_i = r·x_i
// + α, A = Σβ_i = rN + dα, m_i = E[Y_i] = β_i/A. Then
//
//	E‖Y − p‖₂² = Σ_i Var(Y_i) + Σ_i (m_i − p_i)²
//	           = (1 − Σ_i m_i²)/(A + 1) + α²·Σ_i (1 − d·p_i)²/A²
//
// (Var(Y_i) = m_i(1 − m_i)/(A + 1) for a Dirichlet; m_i − p_i =
// α(1 − d·p_i)/A). The error depends on p through Σp_i² only. The planner
// does not know p, so the model averages it over the flat prior on the
// simplex, p ~ Dir(1, …, 1), for which E[Σp_i²] = 2/(d+1):
//
//	E Σ m_i²         = [2r²N²/(d+1) + 2rNα + dα²]/A²,
//	E Σ (1 − d·p_i)² = d(d − 1)/(d + 1).
//
// Why the flat prior: it is the uniform distribution over every histogram
// the dashboard could show, so it favours neither near-uniform data (where
// the prior's pull toward uniform costs nothing) nor a single dominant bin
// (where it costs most); the model's value at p is between its values at
// the uniform histogram and at a vertex, and ExpectedError states the
// flat-prior average it minimizes. The release's error against the true
// counts is what a dashboard user sees; sampling noise of the data itself is
// not part of it.
//
// r < 1 shrinks the counts' weight and with it the privacy cost of a change,
// so at small ε the frontier's α drops faster than the signal r·N: the pull
// toward uniform (the bias term) shrinks. r > 1 sharpens the draw (variance
// ~ 1/(rN)) when N is large and the bias α/(rN) small. The model trades the
// two; the minimizer is found by a scan over log r (10 points per decade on
// [10⁻⁸, 10⁸]) refined by golden-section search on log r, so it is a
// minimum of the model to about 10⁻⁶ relative in r; every candidate is a
// valid calibration (RDP(λ) ≤ ε), so a search that misses the global
// minimum loses utility, never privacy.
const (
	optimalMinR        = 1e-8
	optimalMaxR        = 1e8
	optimalScanPerDec  = 10
	optimalGoldenSteps = 60
)

// DirichletExpectedError is the error model of the optimal calibration:
// E‖Y − x/N‖₂² for one draw Y of Dir(r·x + α) over d bins at N events,
// averaged over x/N drawn from the flat prior on the simplex (see the file
// comment). NaN for invalid arguments (d < 2, N < 0, r or α not > 0).
func DirichletExpectedError(d int, n, r, alpha float64) float64 {
	if d < 2 || !(n >= 0) || !(r > 0) || !(alpha > 0) || math.IsInf(n, 0) || math.IsInf(r, 0) || math.IsInf(alpha, 0) {
		return math.NaN()
	}
	df := float64(d)
	rn := r * n
	a := rn + df*alpha
	sumM2 := (2*rn*rn/(df+1) + 2*rn*alpha + df*alpha*alpha) / (a * a)
	variance := (1 - sumM2) / (a + 1)
	bias := alpha * alpha * df * (df - 1) / (df + 1) / (a * a)
	return variance + bias
}

// optimalMech is the Dirichlet mechanism Dir(r·x + α) with the optimal
// calibration. Immutable after newOptimal.
type optimalMech struct {
	*dirichletMech
	exact bool       // on the exact frontier (ExactCovers)
	shape exactShape // exact only
	mse   float64    // DirichletExpectedError at (r, α)
}

// newOptimal calibrates the optimal calibration from a validated spec
// (kind Dirichlet, calibration Optimal, sensitivities > 0, no lower bound,
// ExpectedEvents > 0, Bins ≥ 2).
func newOptimal(spec Spec) (Mechanism, error) {
	lambda, eps := spec.Order, spec.RDPEpsilon
	l2sq, linf := spec.Sensitivity.L2Sq, spec.Sensitivity.LInf
	sh, covered, _ := exactShapeOf(spec)
	n, d := spec.ExpectedEvents, spec.Bins

	// alphaAt is the frontier: the smallest α meeting the target at r.
	alphaAt := func(r float64) (float64, bool) {
		conc, err := calibrateConcentrated(lambda, eps, r*r*l2sq, r*linf)
		if err != nil {
			return 0, false
		}
		ok := func(a float64) bool { return dirichletRDP(lambda, a, r, l2sq, linf) <= eps }
		if conc, err = nudgeUp(conc, ok, eps); err != nil {
			return 0, false
		}
		if !covered {
			return conc, conc/(r*linf)+1 > lambda
		}
		okExact := func(a float64) bool { return optimalExactRDP(sh, lambda, a, r, l2sq, linf) <= eps }
		good := conc
		for i := 0; !okExact(good) && i < 64; i++ {
			good *= 2
		}
		if !okExact(good) || math.IsInf(good, 0) {
			return 0, false
		}
		a := bisect(okExact, good, (lambda-1)*r)
		for i := 0; !(a/r+1 > lambda) && i < 64; i++ {
			a = math.Nextafter(a, math.Inf(1))
		}
		return a, a/r+1 > lambda && okExact(a)
	}
	cost := func(logR float64) (float64, float64, float64) {
		r := math.Exp(logR)
		a, ok := alphaAt(r)
		if !ok {
			return math.Inf(1), r, 0
		}
		e := DirichletExpectedError(d, n, r, a)
		if math.IsNaN(e) {
			return math.Inf(1), r, a
		}
		return e, r, a
	}

	lo, hi := math.Log(optimalMinR), math.Log(optimalMaxR)
	steps := int(math.Round((math.Log10(optimalMaxR) - math.Log10(optimalMinR)) * optimalScanPerDec))
	h := (hi - lo) / float64(steps)
	best, bestI := math.Inf(1), -1
	for i := 0; i <= steps; i++ {
		if e, _, _ := cost(lo + float64(i)*h); e < best {
			best, bestI = e, i
		}
	}
	if bestI < 0 {
		return nil, errOutOfRange(eps)
	}
	// Golden-section search on log r in the bracket around the best scan
	// point (the model is smooth in log r; the bracket holds a minimum).
	a, b := lo+float64(max(bestI-1, 0))*h, lo+float64(min(bestI+1, steps))*h
	const g = 0.6180339887498949
	c1, c2 := b-g*(b-a), a+g*(b-a)
	f1, _, _ := cost(c1)
	f2, _, _ := cost(c2)
	for i := 0; i < optimalGoldenSteps; i++ {
		if f1 <= f2 {
			b, c2, f2 = c2, c1, f1
			c1 = b - g*(b-a)
			f1, _, _ = cost(c1)
		} else {
			a, c1, f1 = c1, c2, f2
			c2 = a + g*(b-a)
			f2, _, _ = cost(c2)
		}
	}
	logR := lo + float64(bestI)*h
	if f := min(f1, f2); f < best {
		if f1 <= f2 {
			logR = c1
		} else {
			logR = c2
		}
	}
	mse, r, alpha := cost(logR)
	if math.IsInf(mse, 1) {
		return nil, errOutOfRange(eps)
	}
	base := &dirichletMech{spec: spec, r: r, alpha: alpha, l2sq: l2sq, linf: linf}
	if covered {
		base.maxOrder = alpha/r + 1
	} else {
		base.maxOrder = alpha/(r*linf) + 1
	}
	m := &optimalMech{dirichletMech: base, exact: covered, shape: sh, mse: mse}
	if !(base.maxOrder > lambda) || !(m.RDP(lambda) <= eps) {
		return nil, errOutOfRange(eps)
	}
	return m, nil
}

// optimalExactRDP is the exact frontier's reported RDP at order λ′ for
// (α, r): the exact worst case, capped by 000 Corollary 3 (both valid).
func optimalExactRDP(sh exactShape, order, alpha, r, l2sq, linf float64) float64 {
	if math.IsNaN(order) || math.IsInf(order, 0) || !(order > 1) {
		return math.Inf(1)
	}
	w := sh.worst(gammaRenyiPlusR(order, alpha, r), gammaRenyiMinusR(order, alpha, r))
	if math.IsNaN(w) {
		w = math.Inf(1)
	}
	return math.Min(w, dirichletRDP(order, alpha, r, l2sq, linf))
}

// RDP is the curve of the frontier the calibration is on: the exact worst
// case (ExactCovers) or 000 Corollary 3; +Inf for λ′ ≥ MaxOrder() and
// invalid orders.
func (m *optimalMech) RDP(order float64) float64 {
	if !(order < m.maxOrder) {
		return math.Inf(1)
	}
	if m.exact {
		return optimalExactRDP(m.shape, order, m.alpha, m.r, m.l2sq, m.linf)
	}
	return dirichletRDP(order, m.alpha, m.r, m.l2sq, m.linf)
}

// ExpectedError is the square root of the error model at the calibrated
// (r, α): the root-mean-square ℓ2 error of one release at ExpectedEvents,
// averaged over the flat prior (see DirichletExpectedError).
func (m *optimalMech) ExpectedError() float64 { return math.Sqrt(m.mse) }

// Release writes one draw of Dir(r·x + α) into out, rounded to the release
// grid (grid.go) like every floating-point release. On the exact frontier
// the counts must be whole numbers (≤ 2^53): the worst-case argument is over
// integer count vectors.
func (m *optimalMech) Release(rng *Rand, counts []float64, out []float64) error {
	if err := m.ReleaseUnrounded(rng, counts, out); err != nil {
		return err
	}
	roundRelease(out)
	return nil
}

// ReleaseUnrounded ([Unrounded]) is Release before the rounding.
func (m *optimalMech) ReleaseUnrounded(rng *Rand, counts []float64, out []float64) error {
	if !m.exact {
		return m.dirichletMech.ReleaseUnrounded(rng, counts, out)
	}
	minC, maxC, err := checkRelease(rng, counts, out, true)
	if err != nil {
		return err
	}
	if !(m.r*maxC+m.alpha <= maxShape) {
		return paramErr("counts", maxC, "must be small enough that r*count + alpha <= 1e300")
	}
	rng.dirichlet(counts, m.r, 0, m.alpha, m.r*minC+m.alpha < 1, out)
	return nil
}

// gammaRenyiPlusR is h₊(λ, α, r) (see the file comment), raised by its
// rounding margin; at r = 1 it is gammaRenyiPlus.
func gammaRenyiPlusR(order, alpha, r float64) float64 {
	if r == 1 {
		return gammaRenyiPlus(order, alpha)
	}
	s := order - 1
	l1, m1 := special.LgammaDiff(alpha+r, s*r)
	l2, m2 := special.LgammaDiff(alpha, r)
	v := math.Max((l1-s*l2)/s, 0)
	return v + roundingMargin*(m1+s*m2+math.Abs(l1)+s*math.Abs(l2))/s
}

// gammaRenyiMinusR is h₋(λ, α, r), raised by its rounding margin; +Inf
// unless α > (λ − 1)·r; at r = 1 it is gammaRenyiMinus.
func gammaRenyiMinusR(order, alpha, r float64) float64 {
	if r == 1 {
		return gammaRenyiMinus(order, alpha)
	}
	s := order - 1
	if !(alpha-s*r > 0) {
		return math.Inf(1)
	}
	l1, m1 := special.LgammaDiff(alpha, r)
	l2, m2 := special.LgammaDiff(alpha-s*r, s*r)
	v := math.Max((s*l1-l2)/s, 0)
	return v + roundingMargin*(s*m1+m2+s*math.Abs(l1)+math.Abs(l2))/s
}
