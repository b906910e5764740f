package mechanism

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dpstage/stage/internal/lib/special"
)

// The simplex Dirichlet mechanism of Gohari, Wu, Hawkins, Hale & Topcu,
// "Differential Privacy on the Unit Simplex via the Dirichlet Mechanism"
// (shared/papers 003): an input that already is a probability vector
// p ∈ Δ_n is released as one draw x ~ Dir(k·p) (003 eq. (1)). Its guarantee
// is (ε, δ)-DP (003 Definition 2, probabilistic DP, which implies ordinary
// (ε, δ)-DP), not an RDP curve, so the mechanism's RDP is +Inf at every
// order and the guarantee is reported by [ApproxDP.DP].
//
// Neighbours (003 Definition 1; Definition 3 for averages): p and q in
//
//	Δ^{(η,η̄)}_{n,W} = {p ∈ interior(Δ_n) : p_i ≥ η ∀ i ∈ W, Σ_{i∈W} p_i ≤ 1 − η̄}
//
// differ in two coordinates i, j ∈ W only, with ‖p − q‖₁ ≤ b, hence
// |p_i − q_i| = |p_j − q_j| ≤ b/2. For the average of N such vectors
// (003 Theorem 2, the collections of Definition 3 differing in one member
// by such a change) the average moves by ‖·‖₁ ≤ b/N, and every formula
// below holds with b replaced by b′ = b/N (eq. (15), (18)).
//
// Guarantee (003 Theorem 1 / Lemma 4, with two corrections derived below):
//
//	ε(γ) = [f(η) − f(p*)] + (k·b′/2)·log((1 − (m−1)γ)/γ),
//	f(t) = log B(k·t, k·(1 − η̄ − t)),   p* = min(η + b′/2, (1−η̄)/2),
//	δ(γ) = 1 − min_{p ∈ Δ^{(η,η̄)}_{n,W}} P[Dir(k·p) ∈ Ω₁],  Ω₁ = {x : x_i ≥ γ ∀ i ∈ W},
//
// m = |W|, γ ∈ (0, 1/m] (Assumption 3). γ is not a parameter of the
// mechanism; it is chosen to minimize ε subject to δ ≤ δ̂ (003 eq. (14)):
// ε decreases and δ increases with γ, so the optimum is the largest γ with
// δ(γ) ≤ δ̂, found by bisection on log γ against a rigorous upper bound of
// δ (simplexDelta), so that the reported δ is never below the true one.
//
// Correction 1 (the beta term). 003 Lemma 4 evaluates the beta-ratio term
// at (p_i, q_i) = (η + b/2, η). With f convex (f″(t) = k²(ψ′(kt) +
// ψ′(k(C−t))) > 0, C = 1 − η̄) and symmetric about C/2, the maximum of
// f(q) − f(p) over |p − q| ≤ b′/2, p, q ∈ [η, C − η] is f(η) − f(p*) with
// p* = min(η + b′/2, C/2): for p ≤ C/2 the best q is max(η, p − b′/2); then
// for p ≤ η + b′/2 the objective f(η) − f(p) increases with p (f decreases
// on [η, C/2]), and for p ≥ η + b′/2 the objective f(p − b′/2) − f(p) has
// derivative f′(p − b′/2) − f′(p) ≤ 0. The paper's vertex agrees with p*
// when η + b′/2 ≤ C/2 (so in its §VII examples) and under-states ε
// otherwise. The reduction of the general c = p_i + p_j to c = C is 003
// Lemma 3 (monotonicity in c, from ψ increasing), the x-term bound is the
// paper's v₁ (|log(x_i/x_j)| ≤ log((1−(m−1)γ)/γ) on Ω₁).
//
// Correction 2 (which p the δ is minimized over). 003 Lemma 2 claims
// log-concavity of p ↦ P[Dir(kp) ∈ Ω₁] under Assumption 2 (k ≥ 1/η), from
// which eq. (14) checks the vertices of the domain. We do not rely on it
// (Assumption 2 fails in the paper's own §VII examples, k = 3 and 10 with
// η = 0.05). Instead: the probability is non-decreasing in each p_i,
// i ∈ W, when the mass comes from the coordinates outside W. Coupling
// proof: write Dir(kp) as G/ΣG with independent G_l ~ Gamma(k·p_l); let
// O be the aggregate of the coordinates outside W (aggregation property),
// S = G_i + G_O ~ Gamma(k(p_i + p_O)) and B = G_i/S ~ Beta(kp_i, kp_O),
// independent of S and of the other G_l. Moving t from p_O to p_i leaves
// the law of S, of the other G_l and so of ΣG and of x_l (l ∈ W, l ≠ i)
// unchanged, and makes B stochastically larger (Beta(a, s − a) increases
// in the likelihood-ratio order with a), so x_i = B·S/ΣG can be coupled to
// increase: the event {x_l ≥ γ ∀ l ∈ W} can only gain. Decreasing any p_i
// (i ∈ W) towards η stays inside the domain, so the minimum is at
// p_i = η ∀ i ∈ W (one of the vertices of eq. (14)), whatever k.
// simplexDelta computes δ there.
//
// Interpretation of 003 §VII (W = {2, 3} with n = 3, which Definition 1's
// W ⊆ [n−1] excludes): the proofs only use that W is a proper subset of
// the coordinates (the complement is the aggregated "last" coordinate of
// Lemma 1), and the Dirichlet is exchangeable, so the guarantee depends on
// W only through m = |W|; here W is any set of 0-based indices with
// 2 ≤ m ≤ n − 1. b bounds ‖p − q‖₁ as Definition 1 says (so each changed
// coordinate moves by ≤ b/2, the b/2 of Lemma 4). See docs/papers-examples.md
// for the §VII figures this gives next to the printed ones.
//
// Domain: Release refuses inputs outside Δ^{(η,η̄)}_{n,W}; the caller
// (e.g. the stage's per-user bounding) must project each contribution into
// it (the domain is convex, so the average of such vectors stays in it).

// SimplexSpec configures the simplex-dirichlet kind: Spec.Simplex.
type SimplexSpec struct {
	// K is the concentration k > 0 of Dir(k·p) (003 eq. (1)), at most 1e9.
	K float64
	// Eta (η > 0) and EtaBar (η̄ > 0) define Δ^{(η,η̄)}_{n,W}: p_i ≥ η for
	// i ∈ W and Σ_{i∈W} p_i ≤ 1 − η̄. They must leave room for a change:
	// m·η + η̄ ≤ 1 (non-empty domain) and 2η < 1 − η̄.
	Eta, EtaBar float64
	// Bins is n, the length of the input vectors (≥ 3).
	Bins int
	// W lists the 0-based coordinates that may change between neighbours
	// (003 Definition 1), distinct, in [0, Bins), 2 ≤ len(W) ≤ Bins − 1.
	W []int
	// B ∈ (0, 1] bounds ‖p − q‖₁ between neighbours (003 Definition 1).
	B float64
	// Average is N ≥ 1: the input is the average of N vectors, one of which
	// may change (003 Theorem 2, Definition 3); 1 is the identity query
	// (003 Theorem 1).
	Average int
	// TargetDelta is δ̂ ∈ (0, 1): γ is chosen to minimize ε subject to
	// δ ≤ δ̂ (003 eq. (14)). Exactly one of TargetDelta and Gamma is set.
	TargetDelta float64
	// Gamma, if set, fixes γ ∈ (0, 1/m] instead of optimizing it.
	Gamma float64
}

// SimplexGuarantee is the (ε, δ)-DP guarantee of the simplex Dirichlet
// mechanism, with its parts.
type SimplexGuarantee struct {
	Epsilon float64 // ε = EpsilonBeta + EpsilonGamma (plus a rounding allowance ≤ 1e-9)
	Delta   float64 // δ: a rigorous upper bound of 003 Theorem 1's δ at Gamma
	Gamma   float64 // γ of Ω₁ (003 eq. (3)), optimized per eq. (14) unless fixed

	EpsilonBeta  float64 // f(η) − f(p*): the beta-ratio term (003 Lemma 4's v₂, corrected)
	EpsilonGamma float64 // (k·b′/2)·log((1−(m−1)γ)/γ): 003 Lemma 4's v₁
	PStar        float64 // p* = min(η + b′/2, (1−η̄)/2), where the beta term is attained
	BPrime       float64 // b′ = b/N, the ℓ1 change of the released vector
	// DeltaLower is a lower bound of the exact δ at Gamma. With m = 2 the
	// exact δ (inclusion–exclusion, 2·P1 − P12) lies in [DeltaLower, Delta]
	// with Delta − DeltaLower ≤ 1e-4·δ̂ (or 1e-4·Delta if Gamma is fixed);
	// with m ≥ 3, Delta is the union bound m·P1 and DeltaLower the
	// Bonferroni bound m·P1 − C(m,2)·P12.
	DeltaLower float64
	DeltaExact bool // m = 2: Delta encloses the exact δ to the stated precision
}

// ErrPrecision is matched (errors.Is) by a [*PrecisionError]: a quantity a
// guarantee depends on could not be computed to the required precision, so
// the configuration is refused rather than reported with a wrong value.
var ErrPrecision = errors.New("mechanism: cannot compute the guarantee to the required precision")

// PrecisionError reports a configuration refused because a numerical
// enclosure (e.g. the δ integral of 003 Lemma 1) did not reach the required
// width. It matches both ErrPrecision and ErrInvalidParameter.
type PrecisionError struct {
	What     string  // what was being computed
	Lo, Hi   float64 // the best enclosure reached
	Required float64 // the width required
	Hint     string  // which parameters to change
}

func (e *PrecisionError) Error() string {
	return fmt.Sprintf("mechanism: %s could only be enclosed in [%g, %g] (width required ≤ %g); %s",
		e.What, e.Lo, e.Hi, e.Required, e.Hint)
}

// Is makes errors.Is(err, ErrPrecision) and errors.Is(err,
// ErrInvalidParameter) true.
func (e *PrecisionError) Is(target error) bool {
	return target == ErrPrecision || target == ErrInvalidParameter
}

// simplexRelTol is the relative width to which δ is enclosed (of δ̂, or of
// δ itself for a fixed γ).
const simplexRelTol = 1e-4

// minGamma is the smallest γ the search tries before refusing.
const minGamma = 1e-300

// validateSimplex checks s and returns m = |W|.
func validateSimplex(s *SimplexSpec) (int, error) {
	if !(s.K > 0) || s.K > 1e9 || math.IsNaN(s.K) {
		return 0, paramErr("simplex.k", s.K, "must be finite, > 0 and <= 1e9")
	}
	if s.Bins < 3 {
		return 0, paramErr("simplex.bins", s.Bins, "must be >= 3 (W must be a proper subset of at least 2 coordinates)")
	}
	m := len(s.W)
	if m < 2 || m > s.Bins-1 {
		return 0, paramErr("simplex.w", m, "must list between 2 and bins-1 coordinates (003 Definition 1; the complement of W must be non-empty)")
	}
	seen := make(map[int]bool, m)
	for _, i := range s.W {
		if i < 0 || i >= s.Bins {
			return 0, paramErr("simplex.w", i, "entries must be 0-based indices in [0, bins)")
		}
		if seen[i] {
			return 0, paramErr("simplex.w", i, "entries must be distinct")
		}
		seen[i] = true
	}
	if err := checkFinitePositive("simplex.eta", s.Eta); err != nil {
		return 0, err
	}
	if err := checkFinitePositive("simplex.eta_bar", s.EtaBar); err != nil {
		return 0, err
	}
	fm := float64(m)
	if !(fm*s.Eta+s.EtaBar <= 1) {
		return 0, paramErr("simplex.eta", s.Eta, fmt.Sprintf("must satisfy |W|·eta + eta_bar <= 1 (|W| = %d, eta_bar = %g): otherwise no input lies in the domain", m, s.EtaBar))
	}
	if !(2*s.Eta < 1-s.EtaBar) {
		return 0, paramErr("simplex.eta", s.Eta, "must satisfy 2·eta < 1 − eta_bar (room for two coordinates to change)")
	}
	if !(s.B > 0 && s.B <= 1) {
		return 0, paramErr("simplex.b", s.B, "must be in (0, 1] (003 Definition 1)")
	}
	if s.Average < 1 {
		return 0, paramErr("simplex.average", s.Average, "must be >= 1 (1 = identity query, N = average of N vectors)")
	}
	switch {
	case s.TargetDelta != 0 && s.Gamma != 0:
		return 0, paramErr("simplex.gamma", s.Gamma, "must be 0 when target_delta is set (give one of them)")
	case s.Gamma != 0:
		if !(s.Gamma > 0 && s.Gamma <= 1/fm) {
			return 0, paramErr("simplex.gamma", s.Gamma, fmt.Sprintf("must be in (0, 1/|W|] = (0, %g] (003 Assumption 3)", 1/fm))
		}
	default:
		if !(s.TargetDelta > 0 && s.TargetDelta < 1) {
			return 0, paramErr("simplex.target_delta", s.TargetDelta, "must be in (0, 1)")
		}
	}
	return m, nil
}

// simplexEpsilonParts returns the two terms of ε(γ) (see the package-level
// comment above) and p*.
func simplexEpsilonParts(s *SimplexSpec, m int, gamma float64) (beta, gam, pStar, bPrime float64) {
	k, eta := s.K, s.Eta
	c := 1 - s.EtaBar
	bPrime = s.B / float64(s.Average)
	pStar = math.Min(eta+bPrime/2, c/2)
	fe, errE := special.LbetaErr(k*eta, k*(c-eta))
	fp, errP := special.LbetaErr(k*pStar, k*(c-pStar))
	beta = fe - fp
	// Rounding allowance: special.LbetaErr's bounds of the two log-betas (which
	// cover special.Lgamma's error on the magnitudes of all six special.Lgamma values, see
	// simplex_delta.go), plus special.RoundRel of their magnitudes and of special.Lgamma(kc)
	// for the subtraction and the rounding of the shapes k·t, k·(c − t).
	beta += errE + errP + special.RoundRel*(1+math.Abs(fe)+math.Abs(fp)+6*math.Abs(special.Lgamma(k*c)))
	fm := float64(m)
	// log((1 − (m−1)γ)/γ) = log1p(−(m−1)γ) − log γ, ≥ 0 for γ ≤ 1/m.
	l := math.Log1p(-(fm-1)*gamma) - math.Log(gamma)
	gam = math.Max(0, k*bPrime/2*l)
	gam += special.RoundRel * (1 + gam)
	return beta, gam, pStar, bPrime
}

// SimplexCalibrate computes the guarantee of the simplex Dirichlet
// mechanism configured by s: γ per 003 eq. (14) (or s.Gamma), ε and a
// rigorous upper bound of δ. Errors: *ParamError for invalid fields,
// *PrecisionError if δ cannot be enclosed to the required precision or no
// representable γ ≥ 1e-300 meets δ̂.
func SimplexCalibrate(s SimplexSpec) (SimplexGuarantee, error) {
	m, err := validateSimplex(&s)
	if err != nil {
		return SimplexGuarantee{}, err
	}
	fm := float64(m)
	hint := "lower simplex.k or raise simplex.eta / target_delta"
	var gamma, dLo, dHi float64
	if s.Gamma != 0 {
		// With a fixed γ the width required is relative to δ itself, and
		// δ ≥ P1 = I_γ(kη, k − kη).
		gamma = s.Gamma
		p1Lo, _, ok := special.IncBeta(gamma, s.K*s.Eta, s.K-s.K*s.Eta)
		tol := math.Max(simplexRelTol*p1Lo, 1e-300)
		lo, hi, ok2 := simplexDelta(gamma, s.Eta, s.K, m, tol)
		if !ok || !ok2 {
			return SimplexGuarantee{}, &PrecisionError{What: "the δ of 003 Lemma 1", Lo: lo, Hi: hi, Required: tol, Hint: hint}
		}
		dLo, dHi = lo, hi
	} else {
		target := s.TargetDelta
		tol := simplexRelTol * target
		// eval encloses δ(g). Where δ is certainly above the target (δ ≥ P1
		// = P[X₁ < γ]) the precise enclosure is skipped; an enclosure that
		// misses the required width is an error only if it straddles the
		// target (the decision δ ≤ δ̂ depends on it).
		eval := func(g float64) (lo, hi float64, err error) {
			p1Lo, _, ok := special.IncBeta(g, s.K*s.Eta, s.K-s.K*s.Eta)
			if ok && p1Lo > target {
				return p1Lo, 1, nil
			}
			lo, hi, ok = simplexDelta(g, s.Eta, s.K, m, tol)
			if !ok && !(lo > target) {
				return lo, hi, &PrecisionError{What: fmt.Sprintf("the δ of 003 Lemma 1 at γ = %g", g), Lo: lo, Hi: hi, Required: tol, Hint: hint}
			}
			return lo, hi, nil
		}
		good := 1 / fm
		lo, hi, err := eval(good)
		if err != nil {
			return SimplexGuarantee{}, err
		}
		if hi <= target {
			gamma, dLo, dHi = good, lo, hi
		} else {
			bad := good
			for {
				good /= 16
				if good < minGamma {
					return SimplexGuarantee{}, &PrecisionError{What: "the γ of 003 eq. (14)", Lo: 0, Hi: minGamma, Required: 0,
						Hint: "no γ >= 1e-300 gives δ <= target_delta: raise simplex.k·eta (the Dirichlet shapes) or target_delta"}
				}
				if lo, hi, err = eval(good); err != nil {
					return SimplexGuarantee{}, err
				}
				if hi <= target {
					break
				}
				bad = good
			}
			gamma, dLo, dHi = good, lo, hi
			// Bisect on log γ to a relative 1e-9 of γ. The geometric mean
			// is taken as √good·√bad: good·bad underflows below γ ≈ 1e-154.
			for i := 0; i < 200 && bad/good > 1+1e-9; i++ {
				mid := math.Sqrt(good) * math.Sqrt(bad)
				if !(mid > good && mid < bad) {
					break
				}
				l, h, err := eval(mid)
				if err != nil {
					return SimplexGuarantee{}, err
				}
				if h <= target {
					good, gamma, dLo, dHi = mid, mid, l, h
				} else {
					bad = mid
				}
			}
		}
	}
	beta, gam, pStar, bPrime := simplexEpsilonParts(&s, m, gamma)
	return SimplexGuarantee{
		Epsilon: beta + gam, Delta: dHi, Gamma: gamma,
		EpsilonBeta: beta, EpsilonGamma: gam, PStar: pStar, BPrime: bPrime,
		DeltaLower: dLo, DeltaExact: m == 2,
	}, nil
}

// simplexMech is the calibrated simplex Dirichlet mechanism.
type simplexMech struct {
	spec Spec // Simplex points to a private copy
	s    SimplexSpec
	inW  []bool
	guar SimplexGuarantee
}

func newSimplexDirichlet(spec Spec) (*simplexMech, error) {
	if spec.Simplex == nil {
		return nil, paramErr("simplex", nil, "must be set for kind simplex-dirichlet")
	}
	if err := checkNoRDPFields(spec); err != nil {
		return nil, err
	}
	if spec.Posterior != nil {
		return nil, paramErr("posterior", nil, "must be nil for kind simplex-dirichlet")
	}
	s := *spec.Simplex
	s.W = slices.Clone(s.W)
	g, err := SimplexCalibrate(s)
	if err != nil {
		return nil, err
	}
	inW := make([]bool, s.Bins)
	for _, i := range s.W {
		inW[i] = true
	}
	out := Spec{Kind: SimplexDirichlet}
	return &simplexMech{spec: out, s: s, inW: inW, guar: g}, nil
}

// checkNoRDPFields rejects the RDP-target fields for the kinds whose
// guarantee is not calibrated from an RDP target (Order is ignored: a
// configuration-wide default must not break them).
func checkNoRDPFields(spec Spec) error {
	if spec.RDPEpsilon != 0 {
		return paramErr("rdp_epsilon", spec.RDPEpsilon, "must be 0 for kind "+string(spec.Kind)+" (its guarantee is (ε, δ)-DP, set in its own spec)")
	}
	if spec.LowerBound != 0 {
		return paramErr("lower_bound", spec.LowerBound, "must be 0 for kind "+string(spec.Kind))
	}
	if spec.Sensitivity != (Sensitivity{}) {
		return paramErr("l1_sensitivity", spec.Sensitivity.L1, "sensitivities must be 0 for kind "+string(spec.Kind)+" (its neighbour relation is fixed by its paper)")
	}
	if spec.Calibration != "" {
		return paramErr("calibration", string(spec.Calibration), "must be empty for kind "+string(spec.Kind))
	}
	return nil
}

// Spec returns the spec with a copy of its SimplexSpec.
func (m *simplexMech) Spec() Spec {
	s := m.s
	s.W = slices.Clone(m.s.W)
	out := m.spec
	out.Simplex = &s
	return out
}

// Params reports k and the γ of the guarantee.
func (m *simplexMech) Params() Params { return Params{K: m.s.K, Gamma: m.guar.Gamma} }

// RDP is +Inf at every order: the mechanism's guarantee is (ε, δ)-DP
// (003 Theorems 1–2), with no RDP curve (see DP).
func (m *simplexMech) RDP(float64) float64 { return math.Inf(1) }

// MaxOrder is 1: RDP is finite at no order.
func (m *simplexMech) MaxOrder() float64 { return 1 }

// DP returns the (ε, δ)-DP guarantee of one release.
func (m *simplexMech) DP() (epsilon, delta float64) { return m.guar.Epsilon, m.guar.Delta }

// Guarantee returns the guarantee with its parts.
func (m *simplexMech) Guarantee() SimplexGuarantee { return m.guar }

// Release writes one draw of Dir(k·p) into out, for p = counts, rounded to
// the release grid (ReleaseUnrounded, then RoundToGrid with
// q = ReleaseGrid(Bins); see dirichletMech.Release for why). out may alias
// counts. Release does not allocate.
func (m *simplexMech) Release(rng *Rand, counts []float64, out []float64) error {
	if err := m.ReleaseUnrounded(rng, counts, out); err != nil {
		return err
	}
	roundRelease(out)
	return nil
}

// ReleaseUnrounded ([Unrounded]) writes one draw of Dir(k·p) into out, for
// p = counts, a probability vector of length Bins in the domain
// Δ^{(η,η̄)}_{n,W}: every entry finite and > 0, summing to 1 within 1e-9
// (it is renormalized), the entries in W ≥ η and their sum ≤ 1 − η̄ (after
// renormalization). Inputs outside the domain are refused (*ParamError):
// the guarantee does not cover them. The output is a point of the simplex
// with entries > 0 (2^-1022 floor, as for the Dirichlet mechanism), before
// the rounding of Release.
func (m *simplexMech) ReleaseUnrounded(rng *Rand, counts []float64, out []float64) error {
	if rng == nil {
		return paramErr("rng", nil, "must not be nil (use NewRand)")
	}
	if len(counts) != m.s.Bins {
		return paramErr("counts", len(counts), "must have simplex.bins = "+itoa(m.s.Bins)+" entries")
	}
	if len(out) != len(counts) {
		return &ParamError{Field: "out", Value: len(out), Reason: "must have the same length as counts (" + itoa(len(counts)) + ")"}
	}
	var sum kahan
	minP := math.Inf(1)
	for i, p := range counts {
		if !(p > 0) || p > 1 {
			return paramErr("counts["+itoa(i)+"]", p, "must be in (0, 1] (an interior point of the simplex)")
		}
		sum.add(p)
		minP = math.Min(minP, p)
	}
	s := sum.value()
	if !(math.Abs(s-1) <= 1e-9) {
		return paramErr("counts", s, "must sum to 1 within 1e-9 (a probability vector)")
	}
	var inW float64
	for i, p := range counts {
		if m.inW[i] {
			if !(p >= m.s.Eta*s) {
				return paramErr("counts["+itoa(i)+"]", p/s, fmt.Sprintf("must be >= eta = %g for a coordinate in W (003 Δ^(η,η̄)_{n,W}); project contributions into the domain first", m.s.Eta))
			}
			inW += p
		}
	}
	if !(inW <= (1-m.s.EtaBar)*s) {
		return paramErr("counts", inW/s, fmt.Sprintf("sum over W must be <= 1 − eta_bar = %g (003 Δ^(η,η̄)_{n,W}); project contributions into the domain first", 1-m.s.EtaBar))
	}
	r := m.s.K / s
	rng.dirichlet(counts, r, 0, 0, r*minP < 1, out)
	return nil
}
