package mechanism

import (
	"fmt"
	"math"
	"slices"
)

// Private Bayesian posteriors for the Beta–Binomial (d = 2) and
// Dirichlet–Multinomial (d ≥ 3) models (shared/papers 002 and 004): the data
// are n observations from d categories, summarized by their count vector c
// (Σc = n); with a Dir(α) prior the posterior is Dir(α + c) (004 §2). The
// mechanisms release a posterior Dir(α̃) — its parameters, not a sample — so
// that a dashboard can draw credible intervals:
//
//   - laplace-posterior (this file): Laplace noise on the posterior
//     parameters, ε-DP (002 Algorithms 1–2, LSDim and LSHist; 004
//     §4.1.3–4.1.4), with public n — for `stage calibrate` and `stage eval`;
//     the stage's mechanism of the same config name, for streams where n is
//     private, is [CountPosterior] (streamposterior.go);
//   - ehd and ehds (hellinger.go): the exponential mechanism over the
//     candidate posteriors {Dir(α + c′) : Σc′ = n} scored by Hellinger
//     distance, ε-DP with global sensitivity (002 Algorithm 3) and
//     (ε, δ)-DP with smooth sensitivity (002 Algorithm 5, 004 §4.2).
//
// Neighbours (004 footnote 1): datasets of the same size n differing in one
// observation, i.e. count vectors c, c′ with c′ = c − e_i + e_j. n is
// public (the same for neighbours); the candidate set of ehd/ehds depends
// on it. Under add/remove neighbours (n not public) none of these
// guarantees applies as stated.
//
// Release(rng, counts, out) writes the posterior mean α̃/Σα̃ (a point of the
// simplex, every entry > 0); ReleasePosterior writes α̃ itself
// ([PosteriorReleaser]). Every α̃_i ≥ α_i > 0, so α̃ is always a valid
// Dirichlet parameter. counts must be whole numbers ≥ 0.

// PosteriorVariant selects the noise calibration of laplace-posterior.
type PosteriorVariant string

const (
	// Hist is 002 Algorithm 2 (LSHist) / 004 §4.1.4: noise Lap(k/ε) on the
	// first d−1 posterior parameters with k = 1 for d = 2 and k = 2
	// otherwise — the ℓ1 sensitivity of those d−1 counts under one
	// replacement.
	Hist PosteriorVariant = "hist"
	// Dim is 002 Algorithm 1 (LSDim): noise Lap(d/ε), calibrated to ℓ1
	// sensitivity d. It adds more noise than Hist for d ≥ 3 and its true
	// guarantee is the smaller ε of DP().
	Dim PosteriorVariant = "dim"
)

// DefaultMaxCandidates is the limit on the number of candidate posteriors
// of ehd and ehds when PosteriorSpec.MaxCandidates is 0.
const DefaultMaxCandidates = 1_000_000

// PosteriorSpec configures the laplace-posterior, ehd and ehds kinds:
// Spec.Posterior.
type PosteriorSpec struct {
	// Prior is α of the Dir(α) prior (Beta(α₁, α₂) for d = 2): d ≥ 2
	// finite entries > 0, at most 1e12.
	Prior []float64
	// N is the public number of observations n ≥ 1. Required by ehd and
	// ehds (the candidate set is every posterior of n observations);
	// optional for laplace-posterior, where 0 means n = Σcounts of each
	// release (the guarantee is for replacement neighbours, which keep n).
	// Release refuses counts with Σcounts ≠ N when N is set.
	N int
	// Epsilon is the target ε > 0 of one release.
	Epsilon float64
	// Delta is the target δ ∈ (0, 1) of ehds; 0 for the other kinds.
	Delta float64
	// Variant selects laplace-posterior's calibration: Hist (default when
	// empty) or Dim. Empty for ehd and ehds.
	Variant PosteriorVariant
	// MaxCandidates bounds the number of candidate posteriors of ehd and
	// ehds, C(n+d−1, d−1); 0 means DefaultMaxCandidates. More candidates
	// is refused with a *CandidateLimitError.
	MaxCandidates int
}

// PosteriorReleaser is implemented by the laplace-posterior, ehd and ehds
// mechanisms and by the stage's [CountPosterior]: ReleasePosterior writes the released posterior's parameters
// α̃ (every entry ≥ the prior's, so > 0) into alphaOut (len(counts)
// entries). Release writes the same draw's posterior mean α̃/Σα̃; the two
// are different draws (each call is one release and costs one guarantee).
type PosteriorReleaser interface {
	ReleasePosterior(rng *Rand, counts []float64, alphaOut []float64) error
}

// ApproxDP is implemented by the mechanisms whose guarantee is stated as
// (ε, δ)-DP — δ = 0 meaning pure ε-DP — rather than by an RDP curve alone:
// simplex-dirichlet and ehds (δ > 0; their RDP is +Inf at every order),
// laplace-posterior and ehd (δ = 0; their RDP(λ) is a valid curve implied
// by pure DP, see PureDPRDP). DP returns the guarantee of one release.
type ApproxDP interface {
	DP() (epsilon, delta float64)
}

// PureDPRDP is the RDP at order λ > 1 implied by ε-DP alone, the minimum
// of three valid bounds:
//
//   - ε (Mironov 2017, "Rényi Differential Privacy", Proposition 3);
//   - λε²/2 (Bun & Steinke 2016, "Concentrated Differential Privacy:
//     Simplifications, Extensions, and Lower Bounds", Proposition 3.3:
//     ε-DP ⇒ ½ε²-zCDP);
//   - ε − log((1 + e^{−ε})/(1 + e^{−(2λ−1)ε}))/(λ−1), the exact RDP of
//     randomized response, which is the worst case among ε-DP mechanisms
//     (Steinke 2024, "Sharp RDP & zCDP from pure DP", differentialprivacy.org,
//     Theorem 4; proof by randomized rounding of the likelihood ratio and
//     Jensen). It is below the other two (TestPureDPRDP checks this on a
//     grid); they are kept as guards against rounding.
//
// It returns +Inf for invalid arguments (ε not finite and ≥ 0, λ not
// finite and > 1) and 0 for ε = 0.
func PureDPRDP(eps, order float64) float64 {
	if !(eps >= 0) || math.IsInf(eps, 0) || !(order > 1) || math.IsInf(order, 0) {
		return math.Inf(1)
	}
	if eps == 0 {
		return 0
	}
	rr := eps - (math.Log1p(math.Exp(-eps))-math.Log1p(math.Exp(-(2*order-1)*eps)))/(order-1)
	v := math.Min(eps, order*eps*eps/2)
	if rr >= 0 && rr < v {
		// Rounding allowance: the expression is a difference of O(ε)
		// terms computed to a few ulps.
		v = math.Min(v, rr+4*0x1p-52*(eps+1))
	}
	return v
}

// newPosteriorMechanism validates the common part of a posterior spec and
// dispatches on the kind.
func newPosteriorMechanism(spec Spec) (Mechanism, error) {
	if spec.Posterior == nil {
		return nil, paramErr("posterior", nil, "must be set for kind "+string(spec.Kind))
	}
	if spec.Simplex != nil {
		return nil, paramErr("simplex", nil, "must be nil for kind "+string(spec.Kind))
	}
	if err := checkNoRDPFields(spec); err != nil {
		return nil, err
	}
	p := *spec.Posterior
	p.Prior = slices.Clone(p.Prior)
	if len(p.Prior) < 2 {
		return nil, paramErr("posterior.prior", len(p.Prior), "must have at least 2 entries (d >= 2 categories)")
	}
	for i, a := range p.Prior {
		if !(a > 0) || !(a <= 1e12) {
			return nil, paramErr("posterior.prior["+itoa(i)+"]", a, "must be finite, > 0 and <= 1e12")
		}
	}
	if err := checkFinitePositive("posterior.epsilon", p.Epsilon); err != nil {
		return nil, err
	}
	if p.N < 0 || p.N > maxExactCount {
		return nil, paramErr("posterior.n", p.N, "must be in [0, 2^53]")
	}
	out := Spec{Kind: spec.Kind}
	switch spec.Kind {
	case LaplacePosterior:
		if p.Delta != 0 {
			return nil, paramErr("posterior.delta", p.Delta, "must be 0 for laplace-posterior (it is pure ε-DP)")
		}
		if p.MaxCandidates != 0 {
			return nil, paramErr("posterior.max_candidates", p.MaxCandidates, "must be 0 for laplace-posterior")
		}
		switch p.Variant {
		case "":
			p.Variant = Hist
		case Hist, Dim:
		default:
			return nil, paramErr("posterior.variant", string(p.Variant), `must be "hist", "dim" or empty (hist)`)
		}
		return asMechanism(newLaplacePosterior(out, p))
	default: // EHD, EHDS
		if p.Variant != "" {
			return nil, paramErr("posterior.variant", string(p.Variant), "must be empty for "+string(spec.Kind))
		}
		if p.N < 1 {
			return nil, paramErr("posterior.n", p.N, "must be >= 1 for "+string(spec.Kind)+" (the candidate set is every posterior of n observations)")
		}
		if p.MaxCandidates < 0 {
			return nil, paramErr("posterior.max_candidates", p.MaxCandidates, "must be >= 0 (0 = default 1e6)")
		}
		if p.MaxCandidates == 0 {
			p.MaxCandidates = DefaultMaxCandidates
		}
		if spec.Kind == EHD {
			if p.Delta != 0 {
				return nil, paramErr("posterior.delta", p.Delta, "must be 0 for ehd (it is pure ε-DP)")
			}
			return asMechanism(newEHD(out, p))
		}
		if !(p.Delta > 0 && p.Delta < 1) {
			return nil, paramErr("posterior.delta", p.Delta, "must be in (0, 1) for ehds")
		}
		return asMechanism(newEHDS(out, p))
	}
}

// laplacePosteriorMech is 002 LSHist / LSDim with discrete Laplace noise.
type laplacePosteriorMech struct {
	spec  Spec
	p     PosteriorSpec
	d1    float64 // true ℓ1 sensitivity of the noised d−1 counts: 1 (d = 2) or 2
	t     uint64  // scale b = t/2^k
	k     uint
	pureE float64 // d1/b: the pure ε of one release
}

// newLaplacePosterior calibrates the scale b = k/ε (Hist: k = 1 for d = 2,
// 2 otherwise; Dim: k = d), rounded up to a dyadic rational for the exact
// discrete Laplace sampler (CKS20 Algorithm 2; see discrete.go).
//
// Privacy: one replacement moves one observation from bin i to bin j, so
// the first d−1 counts change by a vector with ‖·‖₁ ≤ 2 and ‖·‖∞ ≤ 1 (one
// +1 and one −1, or a single ±1 when bin d is involved; ‖·‖₁ ≤ 1 for d = 2).
// Adding independent Lap_Z(b) noise to integer counts is then
// (ℓ1 sensitivity)/b-DP — the paper's Lap(k/ε) with k = 2 (k = 1 for
// d = 2) is exactly ε-DP — and everything after (clamping to [0, n], the
// last parameter computed from n and the others, adding the prior) is
// post-processing of the noisy counts and the public n. The discrete
// Laplace replaces 002's floored continuous Laplace ⌊c + η⌋: it yields
// integers directly, with the same ε and no floating-point artefacts.
//
// RDP curve: the exact RDP of the discrete Laplace vector mechanism for
// changes with ‖·‖₁ ≤ d1, ‖·‖∞ ≤ 1 (laplaceVectorRDP), capped by
// PureDPRDP(d1/b, λ).
func newLaplacePosterior(out Spec, p PosteriorSpec) (*laplacePosteriorMech, error) {
	d := len(p.Prior)
	d1 := 2.0
	if d == 2 {
		d1 = 1
	}
	kNoise := d1
	if p.Variant == Dim {
		kNoise = float64(d)
	}
	b := kNoise / p.Epsilon
	if !(b <= maxLaplaceB) {
		return nil, paramErr("posterior.epsilon", p.Epsilon, "is too small for the laplace sampler (scale would exceed 2^50)")
	}
	b = math.Max(b, minLaplaceB)
	t, k := dyadicCeil(b, dyadicPrecBits)
	if t == 0 {
		return nil, paramErr("posterior.epsilon", p.Epsilon, "is out of the laplace sampler's range")
	}
	m := &laplacePosteriorMech{spec: out, p: p, d1: d1, t: t, k: k}
	m.pureE = d1 / m.scale()
	if !(m.pureE <= p.Epsilon) {
		return nil, paramErr("posterior.epsilon", p.Epsilon, "could not be met after rounding the scale") // not reachable: the scale is rounded up
	}
	return m, nil
}

func (m *laplacePosteriorMech) scale() float64 { return math.Ldexp(float64(m.t), -int(m.k)) }

// Spec returns the spec with a copy of its PosteriorSpec (Variant filled in).
func (m *laplacePosteriorMech) Spec() Spec {
	p := m.p
	p.Prior = slices.Clone(m.p.Prior)
	s := m.spec
	s.Posterior = &p
	return s
}

// Params reports the discrete Laplace scale b.
func (m *laplacePosteriorMech) Params() Params { return Params{Scale: m.scale()} }

// DP returns (d1/b, 0): pure ε-DP with ε ≤ PosteriorSpec.Epsilon.
func (m *laplacePosteriorMech) DP() (epsilon, delta float64) { return m.pureE, 0 }

// MaxOrder is +Inf: the RDP curve is finite at every order.
func (m *laplacePosteriorMech) MaxOrder() float64 { return math.Inf(1) }

// RDP returns min(laplaceVectorRDP(λ, d1, 1, b), PureDPRDP(d1/b, λ)).
func (m *laplacePosteriorMech) RDP(order float64) float64 {
	if math.IsNaN(order) || math.IsInf(order, 0) || !(order > 1) {
		return math.Inf(1)
	}
	v := laplaceVectorRDP(order, m.d1, 1, m.scale())
	if math.IsNaN(v) || v < 0 {
		v = math.Inf(1)
	}
	return math.Min(v, PureDPRDP(m.pureE, order))
}

// checkPosteriorCounts validates counts (whole numbers ≥ 0, length d) and
// returns n = Σcounts, checked against the spec's N when set.
func checkPosteriorCounts(rng *Rand, p *PosteriorSpec, counts, out []float64, outField string) (float64, error) {
	if rng == nil {
		return 0, paramErr("rng", nil, "must not be nil (use NewRand)")
	}
	d := len(p.Prior)
	if len(counts) != d {
		return 0, paramErr("counts", len(counts), "must have one entry per prior parameter ("+itoa(d)+")")
	}
	if len(out) != d {
		return 0, &ParamError{Field: outField, Value: len(out), Reason: "must have the same length as counts (" + itoa(d) + ")"}
	}
	var n float64
	for i, x := range counts {
		if !(x >= 0) || x != math.Trunc(x) || x > maxExactCount {
			return 0, paramErr("counts["+itoa(i)+"]", x, "must be a whole number in [0, 2^53]")
		}
		n += x
	}
	if n > maxExactCount {
		return 0, paramErr("counts", n, "must sum to at most 2^53")
	}
	if p.N > 0 && n != float64(p.N) {
		return 0, paramErr("counts", n, fmt.Sprintf("must sum to posterior.n = %d (the public dataset size)", p.N))
	}
	return n, nil
}

// ReleasePosterior writes α̃ of 002 Algorithm 2 (Hist) or 1 (Dim):
//
//	α̃_i = α_i + clamp(c_i + Z_i, 0, n),  i < d,  Z_i ~ Lap_Z(b) independent,
//	α̃_d = α_d + clamp(n − Σ_{i<d} clamp(c_i + Z_i, 0, n), 0, n).
//
// Every α̃_i ≥ α_i > 0. alphaOut may alias counts. It does not allocate.
func (m *laplacePosteriorMech) ReleasePosterior(rng *Rand, counts []float64, alphaOut []float64) error {
	n, err := checkPosteriorCounts(rng, &m.p, counts, alphaOut, "alpha_out")
	if err != nil {
		return err
	}
	d := len(counts)
	ni := int64(n)
	var rest int64 = ni
	for i := 0; i < d-1; i++ {
		v := int64(counts[i]) + rng.discreteLaplace(m.t, m.k)
		v = min(max(v, 0), ni)
		rest -= v
		alphaOut[i] = m.p.Prior[i] + float64(v)
	}
	rest = min(max(rest, 0), ni)
	alphaOut[d-1] = m.p.Prior[d-1] + float64(rest)
	return nil
}

// Release writes the posterior mean α̃/Σα̃ of one ReleasePosterior draw.
func (m *laplacePosteriorMech) Release(rng *Rand, counts []float64, out []float64) error {
	if err := m.ReleasePosterior(rng, counts, out); err != nil {
		return err
	}
	normalizeInPlace(out)
	return nil
}

// normalizeInPlace divides a vector of positive entries by its sum.
func normalizeInPlace(v []float64) {
	var s kahan
	for _, x := range v {
		s.add(x)
	}
	inv := 1 / s.value()
	for i := range v {
		v[i] *= inv
	}
}
