package mechanism

import (
	"fmt"
	"math"

	"github.com/dpstage/stage/internal/lib/special"
)

// The simplex-average Dirichlet mechanism: a generalization of the simplex
// Dirichlet mechanism of Gohari et al. (shared/papers 003, see simplex.go)
// to the stage's histogram kind `average`, where every user contributes one
// probability vector per window and any coordinate may change.
//
// Input. The stage computes, per window, the padded average
//
//	p̄ = (Σ_{u ∈ kept} v_u + (N_pub − |kept|)·(1/n)·1) / N_pub ∈ Δ_n,
//
// keeping at most N_pub users (the smallest keyed hashes). Adding, removing
// or replacing one user swaps at most one member of the padded multiset of
// N_pub probability vectors, so neighbouring windows give ‖p̄ − p̄′‖₁ ≤
// 2/N_pub (003 Definition 3 with every coordinate in play and b = 2).
//
// Mechanism. Release smooths p̄ into D_η = {p ∈ Δ_n : p_i ≥ η ∀ i},
//
//	p = (1 − nη)·p̄ + η·1,
//
// and returns one draw x ~ Dir(k·p) (003 eq. (1)). The smoothing is what
// the stage does instead of refusing inputs outside 003's domain: it maps
// all of Δ_n into D_η and scales ℓ1 distances by (1 − nη), so neighbours
// give ‖p − p′‖₁ ≤ β = 2(1 − nη)/N_pub.
//
// Guarantee: (ε, δ)-DP with, for any γ ∈ (0, 1/n],
//
//	ε(γ) = (kβ/2)·[ψ(k(1 − (n−1)η)) − ψ(kη) + log((1 − (n−1)γ)/γ)],
//	δ(γ) = n·I_γ(kη, k − kη),
//
// ψ the digamma function, I the regularized incomplete beta function.
// Proof (the structure is 003 Theorem 1: the privacy loss is bounded on
// Ω_γ = {x ∈ Δ_n : x_i ≥ γ ∀ i} (003 eq. (3) with W = all coordinates), and
// δ bounds the probability of leaving Ω_γ (003 Lemma 1)). Write g = log Γ,
// d = p − p′ (Σ d_i = 0, ‖d‖₁ ≤ β). The Γ(k) normalizers cancel, so
//
//	L(x) = log f_p(x)/f_{p′}(x) = Σ_i [g(kp′_i) − g(kp_i)] + k·Σ_i d_i·log x_i.
//
//   - First sum (the beta-ratio term of 003 Lemma 4, here for any number of
//     changed coordinates). g is convex, so g(kp_i) ≥ g(kp′_i) + k·d_i·ψ(kp′_i)
//     and the sum is ≤ −k·Σ_i d_i·ψ(kp′_i). The positive and the negative
//     parts of d each total ‖d‖₁/2 ≤ β/2 (Σ d_i = 0), ψ is increasing and
//     kp′_i ∈ [kη, k(1 − (n−1)η)] (p′ ∈ D_η), so the sum is
//     ≤ (kβ/2)·[ψ(k(1 − (n−1)η)) − ψ(kη)].
//   - Second sum (003 Lemma 4's v₁). On Ω_γ, γ ≤ x_i ≤ 1 − (n−1)γ, so by the
//     same split it is ≤ (kβ/2)·log((1 − (n−1)γ)/γ).
//   - The bound is symmetric in p, p′, so |L| ≤ ε(γ) on Ω_γ.
//   - δ (003 Lemma 1, eq. (7), here by the union bound): P[x ∉ Ω_γ] ≤
//     Σ_i P[x_i < γ] with x_i ~ Beta(kp_i, k − kp_i) (aggregation). With the
//     total k fixed, Beta(a, c − a) is stochastically increasing in a (gamma
//     coupling: with independent G_a, G_t, G_{c−a−t}, G_a/(G_a + G_t +
//     G_{c−a−t}) ~ Beta(a, c − a) is ≤ (G_a + G_t)/(same) ~ Beta(a + t,
//     c − a − t)), so each term is ≤ its value at p_i = η, I_γ(kη, k − kη).
//     (As for simplexDelta, this replaces 003 Lemma 2's log-concavity, which
//     needs Assumption 2, k ≥ 1/η.)
//   - Probabilistic DP ⇒ (ε, δ)-DP (003 Definition 2): for any event S,
//     P_p(S) ≤ P_p(S ∩ Ω_γ) + P_p(Ω_γᶜ) ≤ e^ε·P_{p′}(S ∩ Ω_γ) + δ ≤
//     e^ε·P_{p′}(S) + δ.
//
// Calibration (003 eq. (14)): ε decreases and δ increases in γ, so the best
// γ for a target δ̂ is the largest γ ∈ (0, 1/n] with δ(γ) ≤ δ̂. It is found
// by bisection on log γ (to a relative 1e-9 of γ) against a rigorous upper
// bound of I_γ (special.IncBeta's enclosure, widened by averageDelta), so the
// reported δ is an upper bound of the true δ(γ) and never exceeds δ̂; ε is
// rounded upwards by a relative
// allowance (see averageEpsilonParts). Neither depends on the data, and γ
// does not depend on N_pub, so ε·N_pub is constant in N_pub.
//
// Not covered: the floating-point sampler only approximates Dir(k·p) — its
// draws lie on a lattice that depends on the shapes, which is why Release
// rounds them to the grid 1/ReleaseGrid(n); the guarantee of the rounded
// release is the ideal one's up to the heuristic factor of "Release grid"
// in the package documentation (ε + ≈2nρ) — and the renormalization of p̄
// by its computed sum (within 1e-9 of 1) is part of the stage's query, not
// of the analysis.

// AverageSpec configures the simplex-average Dirichlet mechanism (the
// stage's histograms[i].average settings).
type AverageSpec struct {
	// Bins is n, the length of the input vectors (≥ 2).
	Bins int
	// Users is N_pub ≥ 1: the padded average is over N_pub vectors, one of
	// which may change between neighbours (histograms[i].average.users).
	Users int
	// Eta is the smoothing η ∈ (0, 1/n): the released Dirichlet has mean
	// (1 − nη)·p̄ + η (histograms[i].average.eta).
	Eta float64
	// K is the concentration k of Dir(k·p), finite, > 0 and ≤ 1e9
	// (histograms[i].average.k).
	K float64
	// TargetDelta is δ̂ ∈ (0, 1), the per-release δ (histograms[i].average.delta).
	TargetDelta float64
}

// AverageGuarantee is the (ε, δ)-DP guarantee of one release of the
// simplex-average Dirichlet mechanism, with its parts.
type AverageGuarantee struct {
	// Epsilon is EpsilonPsi + EpsilonLog; each part is rounded upwards by a
	// relative allowance of at least 1e-14 (see averageEpsilonParts).
	Epsilon float64
	// Delta is a rigorous upper bound of n·I_γ(kη, k − kη) at Gamma, ≤ TargetDelta.
	Delta float64
	// Gamma is the γ of Ω_γ: the largest (to a relative 1e-9) in (0, 1/n]
	// whose δ bound meets TargetDelta.
	Gamma float64
	// Beta is 2(1 − nη)/N_pub, the ℓ1 change of the smoothed vector p.
	Beta float64
	// EpsilonPsi is (kβ/2)·[ψ(k(1 − (n−1)η)) − ψ(kη)] (the Γ-ratio term).
	EpsilonPsi float64
	// EpsilonLog is (kβ/2)·log((1 − (n−1)γ)/γ) (the log x term).
	EpsilonLog float64
}

// validateAverage checks every field of s.
func validateAverage(s *AverageSpec) error {
	if s.Bins < 2 {
		return paramErr("bins", s.Bins, "must be >= 2")
	}
	if s.Users < 1 {
		return paramErr("users", s.Users, "must be >= 1 (histograms[i].average.users: the number of vectors the padded average is over)")
	}
	n := float64(s.Bins)
	if math.IsNaN(s.Eta) || !(s.Eta > 0) || !(n*s.Eta < 1) {
		return paramErr("eta", s.Eta, fmt.Sprintf("must be in (0, 1/bins) = (0, %g) (histograms[i].average.eta)", 1/n))
	}
	if math.IsNaN(s.K) || !(s.K > 0) || s.K > 1e9 {
		return paramErr("k", s.K, "must be finite, > 0 and <= 1e9 (histograms[i].average.k)")
	}
	if math.IsNaN(s.TargetDelta) || !(s.TargetDelta > 0 && s.TargetDelta < 1) {
		return paramErr("target_delta", s.TargetDelta, "must be in (0, 1) (histograms[i].average.delta)")
	}
	return nil
}

// averageDelta encloses the δ bound n·I_γ(kη, k − kη) at γ: hi is a rigorous
// upper bound (special.IncBeta's, widened as below, times n, rounded up), lo a lower
// bound of the same quantity. ok is false if the incomplete beta enclosure
// failed.
//
// Widening: special.IncBeta's rounding allowance used to be relative to |log B(a, b)|
// while log B was computed as special.Lgamma(a) + special.Lgamma(b) − special.Lgamma(a+b), whose
// cancellation could exceed it for large shapes (special.Lbeta(1, 999) was off by
// 1.4e-12 against a 3.5e-13 allowance). simplex_delta.go's special.LbetaErr now
// bounds that error itself, so the widening below is redundant; it is kept
// as a margin (it only makes δ larger, i.e. more conservative). The value is
// widened by a further relative special.RoundRel·(|log Γ(a)| + |log Γ(b)| +
// |log Γ(a+b)|) (≈ 1.2e-10 for k = 1000): of the value itself below the
// mean, where special.IncBeta sums the series at γ, and of its complement above.
func averageDelta(s *AverageSpec, gamma float64) (lo, hi float64, ok bool) {
	a := s.K * s.Eta
	b := s.K - a
	l, h, ok := special.IncBeta(gamma, a, b)
	if !ok || math.IsNaN(l) || math.IsNaN(h) {
		return 0, 1, false
	}
	w := special.RoundRel * (math.Abs(special.Lgamma(a)) + math.Abs(special.Lgamma(b)) + math.Abs(special.Lgamma(a+b)))
	if gamma <= (a+1)/(a+b+2) {
		l, h = l*(1-w), h*(1+w)
	} else {
		l, h = l-w*(1-l), h+w*(1-h)
	}
	l, h = math.Max(l, 0), math.Min(h, 1)
	n := float64(s.Bins)
	return n * l * (1 - 0x1p-52), math.Nextafter(n*h, math.Inf(1)), true
}

// averageEpsilonParts returns the two parts of ε(γ) (see the comment at the
// top of this file) and β. Each bracket is rounded upwards by special.RoundRel·(1 +
// the magnitudes it was computed from), which exceeds both its own rounding
// error (a few ulps of those magnitudes) and, being at least 1e-14 of the
// bracket, the rounding of the products and of the final sum.
func averageEpsilonParts(s *AverageSpec, gamma float64) (psiPart, logPart, beta float64) {
	n := float64(s.Bins)
	k, eta := s.K, s.Eta
	beta = 2 * (1 - n*eta) / float64(s.Users)
	psiHi, magHi := special.Digamma(k * (1 - (n-1)*eta))
	psiLo, magLo := special.Digamma(k * eta)
	bPsi := math.Max(0, psiHi-psiLo)
	bPsi += special.RoundRel * (1 + magHi + magLo)
	// log((1 − (n−1)γ)/γ) = log1p(−(n−1)γ) − log γ, ≥ 0 for γ ≤ 1/n.
	l1, l2 := math.Log1p(-(n-1)*gamma), math.Log(gamma)
	bLog := math.Max(0, l1-l2)
	bLog += special.RoundRel * (1 + math.Abs(l1) + math.Abs(l2))
	half := k * beta / 2
	return half * bPsi, half * bLog, beta
}

// AverageCalibrate computes the guarantee of the simplex-average Dirichlet
// mechanism configured by s: the largest γ ∈ (0, 1/n] whose rigorous δ
// bound n·I_γ(kη, k − kη) is ≤ s.TargetDelta (003 eq. (14)), that bound as
// Delta, and ε(γ) (see the comment at the top of average.go). Errors:
// *ParamError for invalid fields, *PrecisionError if the incomplete beta
// function cannot be enclosed or no γ ≥ 1e-300 meets the target.
func AverageCalibrate(s AverageSpec) (AverageGuarantee, error) {
	if err := validateAverage(&s); err != nil {
		return AverageGuarantee{}, err
	}
	target := s.TargetDelta
	hint := "raise histograms[i].average.k·eta (the smallest Dirichlet shape) or delta"
	eval := func(g float64) (hi float64, err error) {
		lo, hi, ok := averageDelta(&s, g)
		if !ok {
			// The series of special.IncBeta converges slowly near the mean kη/k = η
			// when the shapes are large.
			return 0, &PrecisionError{What: fmt.Sprintf("the incomplete beta enclosure of the δ bound n·I_γ(kη, k−kη) at γ = %g", g), Lo: lo, Hi: hi, Required: target,
				Hint: "lower histograms[i].average.k, or delta (γ is then further below eta)"}
		}
		return hi, nil
	}
	good := 1 / float64(s.Bins)
	hi, err := eval(good)
	if err != nil {
		return AverageGuarantee{}, err
	}
	gamma, delta := good, hi
	if hi > target {
		bad := good
		for {
			good /= 16
			if good < minGamma {
				return AverageGuarantee{}, &PrecisionError{What: "the γ of 003 eq. (14)", Lo: 0, Hi: minGamma, Required: 0,
					Hint: "no γ >= 1e-300 gives δ <= delta: " + hint}
			}
			if hi, err = eval(good); err != nil {
				return AverageGuarantee{}, err
			}
			if hi <= target {
				break
			}
			bad = good
		}
		gamma, delta = good, hi
		// Bisect on log γ to a relative 1e-9 of γ.
		for i := 0; i < 200 && bad/good > 1+1e-9; i++ {
			mid := math.Sqrt(good) * math.Sqrt(bad) // good·bad may underflow
			if !(mid > good && mid < bad) {
				break
			}
			h, err := eval(mid)
			if err != nil {
				return AverageGuarantee{}, err
			}
			if h <= target {
				good, gamma, delta = mid, mid, h
			} else {
				bad = mid
			}
		}
	}
	psiPart, logPart, beta := averageEpsilonParts(&s, gamma)
	return AverageGuarantee{
		Epsilon: psiPart + logPart, Delta: delta, Gamma: gamma,
		Beta: beta, EpsilonPsi: psiPart, EpsilonLog: logPart,
	}, nil
}

// SimplexAverage is the calibrated simplex-average Dirichlet mechanism (see
// AverageSpec and the comment at the top of average.go). It is immutable
// and safe for concurrent use; each goroutine needs its own *Rand.
type SimplexAverage struct {
	s    AverageSpec
	guar AverageGuarantee
}

// NewSimplexAverage validates and calibrates s (see AverageCalibrate).
func NewSimplexAverage(s AverageSpec) (*SimplexAverage, error) {
	g, err := AverageCalibrate(s)
	if err != nil {
		return nil, err
	}
	return &SimplexAverage{s: s, guar: g}, nil
}

// Spec returns the spec the mechanism was calibrated from.
func (m *SimplexAverage) Spec() AverageSpec { return m.s }

// Guarantee returns the guarantee with its parts.
func (m *SimplexAverage) Guarantee() AverageGuarantee { return m.guar }

// DP returns the (ε, δ)-DP guarantee of one release.
func (m *SimplexAverage) DP() (epsilon, delta float64) { return m.guar.Epsilon, m.guar.Delta }

// checkPbar validates the arguments shared by Release and Smoothed and
// returns the (compensated) sum of pbar.
func (m *SimplexAverage) checkPbar(pbar, out []float64) (float64, error) {
	if len(pbar) != m.s.Bins {
		return 0, paramErr("pbar", len(pbar), "must have bins = "+itoa(m.s.Bins)+" entries")
	}
	if len(out) != len(pbar) {
		return 0, &ParamError{Field: "out", Value: len(out), Reason: "must have the same length as pbar (" + itoa(len(pbar)) + ")"}
	}
	var sum kahan
	for i, p := range pbar {
		// !(p >= 0) rejects NaN and negatives, p > MaxFloat64 rejects +Inf.
		if !(p >= 0) || p > math.MaxFloat64 {
			return 0, paramErr("pbar["+itoa(i)+"]", p, "must be finite and >= 0 (a probability vector)")
		}
		sum.add(p)
	}
	s := sum.value()
	if !(math.Abs(s-1) <= 1e-9) {
		return 0, paramErr("pbar", s, "must sum to 1 within 1e-9 (a probability vector)")
	}
	return s, nil
}

// Release writes one draw of Dir(k·p) into out, for p = (1 − nη)·p̄ + η·1,
// rounded to the release grid: ReleaseUnrounded, then RoundToGrid with
// q = ReleaseGrid(Bins) (see "Release grid" in the package documentation
// for why). Every entry is a multiple of 1/q, possibly 0, and Σ n_i = q
// exactly. out may alias pbar. Release does not allocate.
func (m *SimplexAverage) Release(rng *Rand, pbar, out []float64) error {
	if err := m.ReleaseUnrounded(rng, pbar, out); err != nil {
		return err
	}
	roundRelease(out)
	return nil
}

// ReleaseUnrounded ([Unrounded]) writes one draw of Dir(k·p) into out, for
// p = (1 − nη)·p̄ + η·1 and p̄ = pbar: a probability vector of length Bins,
// every entry finite and ≥ 0, summing to 1 within 1e-9 (it is renormalized
// by its sum). Anything else is refused with a *ParamError and out is left
// untouched. The output is a point of the simplex with entries > 0
// (2^-1022 floor, as for the Dirichlet mechanism), before the rounding of
// Release: for offline evaluation and tests only, never to be published.
func (m *SimplexAverage) ReleaseUnrounded(rng *Rand, pbar, out []float64) error {
	if rng == nil {
		return paramErr("rng", nil, "must not be nil (use NewRand)")
	}
	s, err := m.checkPbar(pbar, out)
	if err != nil {
		return err
	}
	// Shape k·p_i = r·p̄_i + kη with r = k(1 − nη)/s.
	n := float64(m.s.Bins)
	r := m.s.K * (1 - n*m.s.Eta) / s
	alpha := m.s.K * m.s.Eta
	minP := math.Inf(1)
	for _, p := range pbar {
		minP = math.Min(minP, p)
	}
	rng.dirichlet(pbar, r, 0, alpha, r*minP+alpha < 1, out)
	return nil
}

// Smoothed writes p = (1 − nη)·p̄ + η·1 (p̄ = pbar renormalized by its sum),
// the mean of the released Dirichlet, into out; pbar is validated as by
// Release. out may alias pbar. For tests and offline evaluation.
func (m *SimplexAverage) Smoothed(pbar, out []float64) error {
	s, err := m.checkPbar(pbar, out)
	if err != nil {
		return err
	}
	c := (1 - float64(m.s.Bins)*m.s.Eta) / s
	for i, p := range pbar {
		out[i] = c*p + m.s.Eta
	}
	return nil
}
