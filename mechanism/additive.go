package mechanism

import (
	"math"
)

// The Gaussian and Laplace baselines add integer noise to integer counts and
// project the noisy vector back onto the simplex (clip at 0, renormalize;
// all-zero → uniform), as in 000 §4 and 001 §5. The projection is
// post-processing, so their RDP is that of the noise addition.

// Bounds on the noise scales, set by the integer widths of the exact samplers
// (see discrete.go). Scales below the minimum are raised to it (more noise,
// smaller ε, and the reported RDP is that of the raised scale); targets that
// would need scales above the maximum are rejected.
const (
	minSigma2      = 0x1p-40 // σ ≥ 2^-20
	maxSigma2      = 0x1p48  // σ ≤ 2^24
	minLaplaceB    = 0x1p-20
	maxLaplaceB    = 0x1p50
	dyadicPrecBits = 40 // scales are rounded up to m/2^k with m of ~41 bits
)

// gaussianMech adds discrete Gaussian noise N_Z(0, σ²) to every count.
type gaussianMech struct {
	spec Spec
	l2sq float64
	dg   dgauss
}

// newGaussian calibrates σ from the target: σ² = λΔ2²/(2ε), i.e. the solution
// of λΔ2²/(2σ²) = ε, then rounds σ² up to a dyadic rational (relative
// increase ≤ 2^-40 for σ ≥ ~2^-9, lower precision below so that the
// sampler's integers fit; see newDGauss), so that RDP(λ) ≤ ε.
//
// RDP curve: ε(λ′) = λ′·Δ2²/(2σ²) for all λ′ > 1. For the discrete Gaussian
// is CKS20 (Canonne, Kamath, Steinke 2020, §2; Theorem 4 in the arXiv
// numbering): adding N_Z(0, σ²) to an integer query of sensitivity Δ is
// ½(Δ/σ)²-concentrated DP, i.e. D_λ ≤ λΔ²/(2σ²) for all λ > 1; for a vector
// of independent coordinates the divergences add (CKS20's multivariate
// statement, Theorem 14 in the arXiv numbering), giving
// λ·‖Δ‖₂²/(2σ²) ≤ λΔ2²/(2σ²). TestDiscreteGaussianRenyi checks the univariate
// bound against the exact divergence computed by summation. The same additivity
// makes releases of several groups' count vectors, with total ‖Δ‖₂² ≤ Δ2²,
// cost one ε(λ′) jointly.
func newGaussian(spec Spec) (*gaussianMech, error) {
	lambda, eps, l2sq := spec.Order, spec.RDPEpsilon, spec.Sensitivity.L2Sq
	sigma2 := lambda * l2sq / (2 * eps)
	if math.IsNaN(sigma2) || math.IsInf(sigma2, 0) || sigma2 > maxSigma2 {
		return nil, paramErr("rdp_epsilon", eps, "is too small for the gaussian sampler (sigma would exceed 2^24); raise it or lower the order or sensitivity")
	}
	if sigma2 < minSigma2 {
		sigma2 = minSigma2
	}
	// λΔ2²/(2ε) is rounded to the nearest float64, so the σ² above can be
	// an ulp below the exact solution, and when it is (or rounds up to) a
	// dyadic rational already, RDP(λ) = λΔ2²/(2σ²) evaluates an ulp above
	// ε. Then σ² grows by 2^-40 relative and is calibrated again (at most
	// twice; the privacy check below is what decides). Before, such targets
	// were refused, and budget.PlanReleases' bisection, taking a refusal for
	// "too much", stopped at a quarter of the budget (issue #13: 5 units of
	// ε = 1 planned to ε = 0.377).
	for try := 0; try < 3; try++ {
		dg, ok := newDGauss(sigma2)
		if !ok {
			return nil, errOutOfRange(eps)
		}
		m := &gaussianMech{spec: spec, l2sq: l2sq, dg: dg}
		if m.RDP(lambda) <= eps {
			return m, nil
		}
		sigma2 *= 1 + 0x1p-40
	}
	return nil, errOutOfRange(eps)
}

func (m *gaussianMech) Spec() Spec { return m.spec }

// Params reports σ = √(p/2^k), the standard deviation parameter of the
// discrete Gaussian actually sampled. (The variance of N_Z(0, σ²) is
// slightly below σ², as CKS20 show; TestDiscreteGaussianMoments compares it
// with the exact value.)
func (m *gaussianMech) Params() Params    { return Params{Sigma: math.Sqrt(m.dg.sigma2())} }
func (m *gaussianMech) MaxOrder() float64 { return math.Inf(1) }

// RDP returns λ′Δ2²/(2σ²) for finite λ′ > 1, +Inf otherwise.
func (m *gaussianMech) RDP(order float64) float64 {
	if math.IsNaN(order) || math.IsInf(order, 0) || !(order > 1) {
		return math.Inf(1)
	}
	return order * m.l2sq / (2 * m.dg.sigma2())
}

// Release adds independent N_Z(0, σ²) noise to each count (which must be a
// whole number ≤ 2^53) and projects onto the simplex: clip at 0, divide by
// the sum; if every clipped value is 0 the output is uniform. Entries are ≥ 0
// and sum to 1 within a few ulps; unlike the Dirichlet mechanism, entries can
// be exactly 0. out may alias counts. Releases do not allocate.
func (m *gaussianMech) Release(rng *Rand, counts []float64, out []float64) error {
	if err := m.ReleaseCounts(rng, counts, out); err != nil {
		return err
	}
	for i, v := range out {
		out[i] = max(v, 0)
	}
	projectClipped(out)
	return nil
}

// ReleaseCounts writes x + Z, Z_i ~ N_Z(0, σ²) independent (see
// CountReleaser): the noisy counts Release clips and projects, drawn in
// the same order, so a seeded Release and ReleaseCounts see the same
// noise.
func (m *gaussianMech) ReleaseCounts(rng *Rand, counts []float64, noisy []float64) error {
	if _, _, err := checkRelease(rng, counts, noisy, true); err != nil {
		return err
	}
	for i, x := range counts {
		noisy[i] = float64(int64(x) + rng.discreteGaussian(&m.dg))
	}
	return nil
}

// NoisyCount returns x + Z, Z ~ N_Z(0, σ²): one count of the vector the
// mechanism was calibrated for (see CountNoiser). x must be a whole
// number in [0, 2^53].
func (m *gaussianMech) NoisyCount(rng *Rand, x float64) (float64, error) {
	if rng == nil {
		return 0, paramErr("rng", nil, "must not be nil (use NewRand)")
	}
	if !(x >= 0) || x != math.Trunc(x) || x > maxExactCount {
		return 0, paramErr("count", x, "must be a whole number in [0, 2^53]")
	}
	return float64(int64(x) + rng.discreteGaussian(&m.dg)), nil
}

// Project writes the release of the Gaussian and Laplace baselines for
// the noisy counts noisy (from ReleaseCounts) into out: clipped at 0 and
// divided by their sum, uniform when every clipped value is 0 — what
// Release writes for the same draw. out may alias noisy; both must have
// the same length ≥ 1.
func Project(noisy, out []float64) {
	for i, v := range noisy {
		out[i] = max(v, 0)
	}
	projectClipped(out)
}

// projectClipped normalizes a vector of non-negative values to sum 1, or
// makes it uniform if all are 0.
func projectClipped(out []float64) {
	var sum kahan
	for _, v := range out {
		sum.add(v)
	}
	s := sum.value()
	if s == 0 {
		u := 1 / float64(len(out))
		for i := range out {
			out[i] = u
		}
		return
	}
	for i := range out {
		out[i] /= s
	}
}

// laplaceMech adds discrete Laplace noise Lap_Z(b) to every count.
type laplaceMech struct {
	spec Spec
	d1   float64 // ⌊Δ1⌋
	dinf float64 // min(⌊Δ∞⌋, ⌊Δ1⌋)
	t    uint64  // b = t/2^k
	k    uint
}

func (m *laplaceMech) scale() float64 { return math.Ldexp(float64(m.t), -int(m.k)) }

// discreteLaplaceRDP is the exact Rényi divergence of order λ between
// Lap_Z(b) and Lap_Z(b) shifted by an integer Δ ≥ 0 (P[Z = z] ∝ q^{|z|},
// q = e^{−1/b}). Summing q^{λ|z| + (1−λ)|z−Δ|} over z ≤ 0, 0 < z < Δ and z ≥ Δ
// (three geometric series) and normalizing gives, with z = q^{2λ−1},
//
//	exp((λ−1)·D_λ) = A·e^{(λ−1)Δ/b} + B·e^{−λΔ/b},
//	A = (1 − q·z)/((1+q)(1−z)),   B = (q − z)/((1+q)(1−z)),   A + B = 1,
//
// i.e. D_λ = Δ/b + log(1 − B·(1 − e^{−(2λ−1)Δ/b}))/(λ−1), evaluated with
// expm1 and log1p for accuracy. This has the form of Mironov 2017 ("Rényi Differential Privacy",
// Proposition 6 / Table II) for the continuous Laplace, whose weights are
// A_c = λ/(2λ−1), B_c = (λ−1)/(2λ−1); as b → ∞, A → A_c, and as b → 0,
// A → 1. On every (λ, b) of TestDiscreteLaplaceVersusMironov's grid A > A_c:
// the continuous formula under-states the discrete Laplace's divergence and
// cannot be used for it, which is why the mechanism uses this exact
// expression. TestDiscreteLaplaceRDPExact checks it against direct summation.
//
// As a function of real Δ it is convex: log(A·e^{aΔ} + B·e^{−cΔ}) is a
// log-sum-exp of affine functions of Δ. With value 0 at Δ = 0 and > 0 at
// Δ = 1, it is increasing on the integers.
func discreteLaplaceRDP(lambda, delta, b float64) float64 {
	if delta == 0 {
		return 0
	}
	q := math.Exp(-1 / b)
	den := (1 + q) * -math.Expm1(-(2*lambda-1)/b) // (1+q)(1−z)
	bb := q * -math.Expm1(-2*(lambda-1)/b) / den  // B; q − z = q(1 − e^{−2(λ−1)/b})
	// A + B·E = 1 − B·(1 − E) with E = e^{−(2λ−1)Δ/b}: log1p keeps full
	// relative accuracy even for λ → 1, where the log is O(λ−1).
	return delta/b + math.Log1p(-bb*-math.Expm1(-(2*lambda-1)*delta/b))/(lambda-1)
}

// laplaceVectorRDP is the RDP at order λ of adding independent Lap_Z(b) to
// each coordinate of an integer vector whose change Δ has ‖Δ‖₁ ≤ D1 and
// ‖Δ‖∞ ≤ D∞ (integers, D∞ ≤ D1). The divergence of the product is
// Σ_i f(|Δ_i|) with f = discreteLaplaceRDP(λ, ·, b) convex and f(0) = 0. The
// maximum of a convex separable function over {0 ≤ t_i ≤ D∞, Σ t_i ≤ D1} is
// at the vector n·(D∞), (D1 − n·D∞), 0, … with n = ⌊D1/D∞⌋: that vector
// majorizes every feasible vector with the same total (Karamata's inequality),
// and f is increasing, so larger totals only help. Hence
//
//	ε(λ) = n·f(D∞) + f(D1 − n·D∞).
//
// (If there are fewer than n+1 bins the bound is merely loose.) The same
// argument covers releases of several groups' vectors whose changes jointly
// satisfy the two bounds (TestGroupSplitLaplace), and TestLaplaceWorstCase
// checks the formula by enumeration.
func laplaceVectorRDP(lambda, d1, dinf, b float64) float64 {
	n := math.Floor(d1 / dinf)
	rem := d1 - n*dinf
	return n*discreteLaplaceRDP(lambda, dinf, b) + discreteLaplaceRDP(lambda, rem, b)
}

// newLaplace calibrates the discrete Laplace scale b by root finding on the
// exact RDP above: the smallest b (to float precision, then rounded up to a
// dyadic rational t/2^k with t of ~41 bits) with ε(λ) ≤ ε. Sensitivities are
// floored to integers, since changes of integer counts are whole numbers.
// Bracket: ε(λ) ≤ Σ_i |Δ_i|/b ≤ D1/b (the log term is ≤ 0), so b = D1/ε is
// feasible; halving finds an infeasible lower end. ε(λ) is decreasing in b
// (TestLaplaceScaleMonotone), so the root is unique.
func newLaplace(spec Spec) (*laplaceMech, error) {
	lambda, eps := spec.Order, spec.RDPEpsilon
	d1 := math.Floor(spec.Sensitivity.L1)
	dinf := math.Min(math.Floor(spec.Sensitivity.LInf), d1)
	loss := func(b float64) float64 { return laplaceVectorRDP(lambda, d1, dinf, b) }
	ok := func(b float64) bool { return loss(b) <= eps }
	good := d1 / eps
	if math.IsInf(good, 0) || !ok(good) {
		return nil, errOutOfRange(eps)
	}
	bad := good / 2
	for i := 0; ok(bad) && bad > minLaplaceB/2; i++ {
		bad /= 2
	}
	b := math.Max(bad, minLaplaceB) // ε so large that even tiny scales are feasible
	if !ok(bad) {
		b = bisect(ok, good, bad)
	}
	if b > maxLaplaceB {
		return nil, paramErr("rdp_epsilon", eps, "is too small for the laplace sampler (scale would exceed 2^50); raise it or lower the order or sensitivity")
	}
	b = math.Max(b, minLaplaceB)
	t, k := dyadicCeil(b, dyadicPrecBits)
	if t == 0 {
		return nil, errOutOfRange(eps)
	}
	m := &laplaceMech{spec: spec, d1: d1, dinf: dinf, t: t, k: k}
	for i := 0; i < 64 && !(m.RDP(lambda) <= eps); i++ {
		m.t++ // only if ε(λ) were not monotone in b; never seen
	}
	if !(m.RDP(lambda) <= eps) {
		return nil, errOutOfRange(eps)
	}
	return m, nil
}

func (m *laplaceMech) Spec() Spec { return m.spec }

// Params reports the scale b = t/2^k of the discrete Laplace actually sampled.
func (m *laplaceMech) Params() Params    { return Params{Scale: m.scale()} }
func (m *laplaceMech) MaxOrder() float64 { return math.Inf(1) }

// RDP returns laplaceVectorRDP at the calibrated scale for finite λ′ > 1,
// +Inf otherwise.
func (m *laplaceMech) RDP(order float64) float64 {
	if math.IsNaN(order) || math.IsInf(order, 0) || !(order > 1) {
		return math.Inf(1)
	}
	v := laplaceVectorRDP(order, m.d1, m.dinf, m.scale())
	if math.IsNaN(v) {
		return math.Inf(1)
	}
	return v
}

// Release adds independent Lap_Z(b) noise to each count (which must be a
// whole number ≤ 2^53) and projects onto the simplex exactly as the Gaussian
// mechanism does (entries ≥ 0, possibly exactly 0, summing to 1; all clipped
// to 0 → uniform). out may alias counts. Releases do not allocate. It is
// ReleaseCounts ([CountReleaser]) followed by that projection.
func (m *laplaceMech) Release(rng *Rand, counts []float64, out []float64) error {
	if err := m.ReleaseCounts(rng, counts, out); err != nil {
		return err
	}
	for i, v := range out {
		out[i] = max(v, 0)
	}
	projectClipped(out)
	return nil
}
