package mechanism

import (
	"math"

	"github.com/dpstage/stage/internal/lib/special"
)

// This file is the `exact` calibration of the Dirichlet mechanism: r = 1 and
// the smallest α (the same for every bin) whose exact worst-case Rényi
// divergence between neighbouring releases — 000 eq. (19), maximized over
// every admissible pair of count vectors — equals the target ε, instead of
// 000 Theorem 2's upper bound (eq. (8)). For unit contributions under the
// replace relation at λ = 2, ε = 1 it gives α = (e+1)/(e−1) ≈ 2.164 where
// `concentrated` needs 3.460.
//
// # Where the maximum sits (proof)
//
// Let u = x + α, u′ = x′ + α, δ = x − x′ (integers), u_0 = Σ_i u_i,
// δ_0 = Σ_i δ_i, φ = log Γ, s = λ − 1. 000 eq. (20) (Appendix A) writes the
// exact divergence as
//
//	s·D_λ(Dir(u) ‖ Dir(u′)) = Σ_i F(u_i; δ_i) − F(u_0; δ_0),
//	F(u; δ) := s·φ(u − δ) + φ(u + s·δ) − λ·φ(u)     (= G + H of eq. (20)).
//
// (1) F ≥ 0: u is the (s/λ, 1/λ)-weighted mean of u − δ and u + sδ, and φ is
// convex, so λφ(u) ≤ sφ(u−δ) + φ(u+sδ) (Jensen). Hence
//
//	D_λ ≤ Σ_i F(u_i; δ_i)/s = Σ_i D_λ(Gamma(u_i) ‖ Gamma(u′_i)),
//
// the divergence of the independent Gamma(u_i, 1) variates that the draw
// normalizes (the same inequality is the data-processing inequality for the
// map g ↦ g/Σg). Bins with δ_i = 0 contribute F = 0.
//
// (2) Each F(u_i; δ_i) is nonincreasing in u_i: ∂F/∂u = sψ(u−δ) + ψ(u+sδ)
// − λψ(u) ≤ 0 by the same Jensen step with ψ = φ′ concave. So the bound is
// largest at the smallest counts the change allows: x_i = δ_i, x′_i = 0 for
// δ_i > 0 (a bin emptied) and x_i = 0, x′_i = |δ_i| for δ_i < 0 (an empty bin
// filled).
//
// (3) The bound is the supremum: F(u_0; δ_0) ≤ ½λs·δ_0²·ψ′(min argument)
// → 0 as the count of an unchanged bin grows (and it is exactly 0 when
// δ_0 = 0, e.g. a replace moving one event between bins, where the supremum
// is attained). So the worst case is NOT "all counts small": the changed bins
// are at their minimum, but D_λ increases towards the bound as the other
// bins' counts (the total) grow — eq. (20)'s total term is subtracted, and it
// decreases in u_0 (TestExactWorstCaseLocation shows both directions).
//
// Hence, with the per-bin worst cases (changes of ±1; s = λ − 1)
//
//	h₊(λ, α) = D_λ(Gamma(α+1) ‖ Gamma(α)) = [L(α+1, s) − s·log α]/s      (bin 1 → 0)
//	h₋(λ, α) = D_λ(Gamma(α) ‖ Gamma(α+1)) = [s·log α − L(α−s, s)]/s      (bin 0 → 1)
//	L(x, s) = log Γ(x+s) − log Γ(x),
//
// the exact worst case over a set of admissible changes is the maximum of
// p·h₊ + q·h₋ over the admissible numbers p of bins that lose one event and
// q of bins that gain one. h₋ is finite iff λ < α + 1, which is therefore
// MaxOrder (the same as 000 Corollary 3's α/Δ∞ + 1 at Δ∞ = 1); beyond it the
// true divergence of an empty bin gaining an event is +Inf (000 eq. (19)).
// At λ = 2: h₊ = log((α+1)/α), h₋ = log(α/(α−1)).
//
// # What is covered, and the fallback
//
// The argument needs integer changes of magnitude 1: it covers specs with
// 1 ≤ Δ∞ < 2 (⌊Δ∞⌋ = 1) and K = ⌊min(Δ2², Δ1)⌋ ≥ 1 changed bins at most (Δ1
// if set; for integer changes Δ1 ≤ Δ2² anyway), on count vectors in ℕ^d
// (Release rejects counts that are not whole numbers). The admissible
// (p, q) are, by Spec.Neighbour:
//
//   - "" (any pair within the sensitivities) and add_remove (x′ = x ± v,
//     v ∈ ℕ^d): p + q ≤ K (add_remove: p = 0 or q = 0, the same maximum
//     K·max(h₊, h₋)).
//   - replace (x′ = x − v + w, v, w ∈ ℕ^d, ‖v‖₁, ‖w‖₁ ≤ M, the stage's
//     relation, plan/plan.go): p, q ≤ M = max(1, ⌊K/2⌋), p + q ≤ K. For
//     the stage's unit contributions (Δ1 = Δ2² = 2, Δ∞ = 1) that is
//     h₊ + h₋, attained by moving one event out of a bin with count 1 into
//     an empty bin. The stage also passes replace for add_remove with its
//     tracked-user cap on, whose changes are "one user out, one in"
//     (plan.ChangeShape).
//
// Everything else (Δ∞ ≥ 2, i.e. max_events_per_user ≥ 2 in the stage; Δ∞ < 1
// or Δ2² < 1, where no integer change is admissible) falls back to the proven
// bound: the mechanism is exactly `concentrated` (000 Theorem 2, eq. (8)),
// reported with Calibration "exact" ([ExactCovers] says which).
//
// RDP(λ′) at every order is the same worst case recomputed at λ′ (valid by
// the proof above at every λ′ > 1), capped by 000 Corollary 3's bound (also
// valid; the cap never binds in exact arithmetic, since the supremum is at
// most the bound). So RDP is never below the true worst-case divergence.
//
// Numerics: L is computed without catastrophic cancellation (log1p and a
// Stirling difference, see special.LgammaDiff), and h₊, h₋ are reported raised by a
// rounding margin of 16 ulps of the magnitudes they subtract, so rounding
// cannot report less than the true value (TestExactGammaTerms checks them
// against cancellation-free closed forms at integer orders).
//
// # One histogram's group releases in one window (the pipeline's charge)
//
// The stage releases each group's count vector with its own draw; the
// sensitivities and the relation describe the change δ of the concatenation
// of all groups' vectors. The joint divergence of independent draws is the
// sum of the per-group divergences, and by (1) each is at most the sum of
// its bins' gamma terms F(u_i; δ_i)/s, which are per bin and, by (2), at most
// h₊ or h₋. So the joint divergence is at most Σ over the changed bins of
// the concatenation of h₊/h₋ — the same maximization as for one release
// with that δ, i.e. ≤ RDP(λ) of the mechanism calibrated with the
// concatenation's sensitivities and relation. Concretely, a replaced user
// whose old event is in group a and new event in group b gives
// D_a + D_b < h₊ + h₋ (each group's divergence is below its gamma bound,
// since each sees a one-sided change with δ_0 ≠ 0); within one group it is
// exactly h₊ + h₋. So one (histogram, window) is charged ONE per-release
// curve, for every max_groups_per_user g and both relations, provided the
// spec carries the concatenation's sensitivities and its Neighbour (with
// Neighbour empty the curve is the looser p + q ≤ K maximum, still valid).
// The exact divergence is not coordinate-additive, but the bound that the
// curve is the supremum of is (TestExactGroupSplit checks it with eq. (19)).

// Neighbour is the neighbour relation a Spec's sensitivities were derived
// under. Only the exact calibration uses it (the other calibrations bound
// every pair within the sensitivities). The strings match the config's
// privacy.neighbour.
type Neighbour string

const (
	// AnyNeighbour: every pair of count vectors within the sensitivities.
	AnyNeighbour Neighbour = ""
	// Replace: x′ = x − v + w with v, w ∈ ℕ^d, ‖v‖₁, ‖w‖₁ ≤ Δ1/2 (one
	// unit's events replaced by another's).
	Replace Neighbour = "replace"
	// AddRemove: x′ = x ± v with v ∈ ℕ^d (one unit's events added or
	// removed).
	AddRemove Neighbour = "add_remove"
)

// exactShape is the set of admissible changes the exact calibration
// maximizes over: at most k bins change, each by ±1, at most pCap of them
// losing an event and at most qCap gaining one.
type exactShape struct{ k, pCap, qCap float64 }

// exactShapeOf returns the admissible changes of spec, or ok = false with
// the reason when the exact argument does not cover it.
func exactShapeOf(spec Spec) (sh exactShape, ok bool, why string) {
	s := spec.Sensitivity
	if math.Floor(s.LInf) != 1 {
		return sh, false, "the exact calibration covers unit changes only (linf_sensitivity in [1, 2)); falls back to concentrated"
	}
	k := math.Floor(s.L2Sq)
	if s.L1 > 0 {
		k = math.Min(k, math.Floor(s.L1))
	}
	if !(k >= 1) || math.IsInf(k, 0) {
		return sh, false, "no integer change is admissible within these sensitivities (l2_sensitivity_sq or l1_sensitivity below 1, or infinite); falls back to concentrated"
	}
	sh = exactShape{k: k, pCap: k, qCap: k}
	if spec.Neighbour == Replace {
		m := math.Max(1, math.Floor(k/2))
		sh.pCap, sh.qCap = m, m
	}
	return sh, true, ""
}

// ExactCovers reports whether the exact calibration's worst-case argument
// covers spec's sensitivities and relation; if not, why (the exact
// calibration then falls back to concentrated, see the file comment).
func ExactCovers(spec Spec) (ok bool, why string) {
	_, ok, why = exactShapeOf(spec)
	return ok, why
}

// worst returns max p·hp + q·hm over p ≤ pCap, q ≤ qCap, p + q ≤ k (hp, hm
// ≥ 0): fill the larger term first.
func (sh exactShape) worst(hp, hm float64) float64 {
	if math.IsInf(hp, 1) || math.IsInf(hm, 1) {
		return math.Inf(1)
	}
	if hm >= hp {
		q := math.Min(sh.qCap, sh.k)
		p := math.Min(sh.pCap, sh.k-q)
		return q*hm + p*hp
	}
	p := math.Min(sh.pCap, sh.k)
	q := math.Min(sh.qCap, sh.k-p)
	return p*hp + q*hm
}

// exactWorst is the exact worst-case divergence at order λ for prior α
// (rounding margin included), or +Inf where it is infinite (λ ≥ α + 1) or
// the order is invalid.
func (sh exactShape) exactWorst(order, alpha float64) float64 {
	if math.IsNaN(order) || math.IsInf(order, 0) || !(order > 1) {
		return math.Inf(1)
	}
	v := sh.worst(gammaRenyiPlus(order, alpha), gammaRenyiMinus(order, alpha))
	if math.IsNaN(v) {
		return math.Inf(1)
	}
	return v
}

// roundingMargin is 16 ulps (2^-52 each): the relative error bound, with
// room to spare, of a few correctly rounded operations on the magnitudes a
// result was computed from.
const roundingMargin = 16 * 0x1p-52

// gammaRenyiPlus is h₊ = D_λ(Gamma(α+1) ‖ Gamma(α)) (a bin emptied:
// count 1 → 0), raised by its rounding margin.
func gammaRenyiPlus(order, alpha float64) float64 {
	s := order - 1
	l, mag := special.LgammaDiff(alpha+1, s)
	la := s * math.Log(alpha)
	v := math.Max((l-la)/s, 0)
	return v + roundingMargin*(mag+math.Abs(la))/s
}

// gammaRenyiMinus is h₋ = D_λ(Gamma(α) ‖ Gamma(α+1)) (an empty bin filled:
// count 0 → 1), raised by its rounding margin; +Inf unless α > λ − 1.
func gammaRenyiMinus(order, alpha float64) float64 {
	s := order - 1
	if !(alpha-s > 0) {
		return math.Inf(1)
	}
	l, mag := special.LgammaDiff(alpha-s, s)
	la := s * math.Log(alpha)
	v := math.Max((la-l)/s, 0)
	return v + roundingMargin*(mag+math.Abs(la))/s
}

// exactMech is the Dirichlet mechanism Dir(x + α) with the exact
// calibration. When the spec is not covered (covered = false) it is the
// concentrated mechanism with Spec().Calibration = Exact.
type exactMech struct {
	*dirichletMech
	covered bool
	shape   exactShape
}

// newExact calibrates the exact calibration from a validated spec (kind
// Dirichlet, calibration Exact, sensitivities > 0, no lower bound).
//
// Solve: the smallest α with RDP(λ) ≤ ε. The worst case is strictly
// decreasing in α (each h is, by (2) of the file comment, as α raises every
// count), +Inf at α = λ − 1 and ≤ 000 eq. (8)'s bound, so α lies in
// (λ − 1, α_concentrated]; bisection to adjacent floats keeps the end where
// RDP(λ) ≤ ε holds as computed.
func newExact(spec Spec) (Mechanism, error) {
	lambda, eps := spec.Order, spec.RDPEpsilon
	l2sq, linf := spec.Sensitivity.L2Sq, spec.Sensitivity.LInf
	conc, err := calibrateConcentrated(lambda, eps, l2sq, linf)
	if err != nil {
		return nil, err
	}
	base := &dirichletMech{spec: spec, r: 1, alpha: conc, l2sq: l2sq, linf: linf}
	base.maxOrder = conc/linf + 1
	if !(base.maxOrder > lambda) || math.IsNaN(base.maxOrder) {
		return nil, errOutOfRange(eps)
	}
	sh, ok, _ := exactShapeOf(spec)
	m := &exactMech{dirichletMech: base, covered: ok, shape: sh}
	if !ok {
		return m, nil
	}
	good := conc
	for i := 0; !m.okAt(good) && i < 64; i++ {
		good *= 2 // only if the rounding margin tipped the bound's α over
	}
	if !m.okAt(good) || math.IsInf(good, 0) {
		return nil, errOutOfRange(eps)
	}
	alpha := bisect(m.okAt, good, lambda-1)
	// Near the pole (huge ε at large λ) α can be within an ulp of λ − 1;
	// raising it keeps RDP(λ) ≤ ε (the worst case decreases in α) and makes
	// MaxOrder = α + 1 exceed λ in float64.
	for i := 0; !(alpha+1 > lambda) && i < 64; i++ {
		alpha = math.Nextafter(alpha, math.Inf(1))
	}
	base.alpha = alpha
	base.maxOrder = alpha + 1
	if !(base.maxOrder > lambda) || !(m.RDP(lambda) <= eps) {
		return nil, errOutOfRange(eps)
	}
	return m, nil
}

// okAt reports whether prior α meets the target at the calibration order.
func (m *exactMech) okAt(alpha float64) bool {
	return m.rdpAt(m.spec.Order, alpha) <= m.spec.RDPEpsilon
}

// rdpAt is the reported RDP at order λ′ for prior α: the exact worst case,
// capped by 000 Corollary 3 (both valid; see the file comment).
func (m *exactMech) rdpAt(order, alpha float64) float64 {
	return math.Min(m.shape.exactWorst(order, alpha), dirichletRDP(order, alpha, 1, m.l2sq, m.linf))
}

// RDP is the exact worst-case divergence at λ′ (covered specs) or 000
// Corollary 3 (fallback); +Inf for λ′ ≥ MaxOrder() and invalid orders.
func (m *exactMech) RDP(order float64) float64 {
	if !m.covered {
		return m.dirichletMech.RDP(order)
	}
	if !(order < m.maxOrder) {
		return math.Inf(1)
	}
	return m.rdpAt(order, m.alpha)
}

// Release writes one draw of Dir(x + α) into out, rounded to the release
// grid as the other Dirichlet calibrations' (see dirichletMech.Release).
// With a covered spec the counts must be whole numbers (≤ 2^53): the
// worst-case argument is over integer count vectors.
func (m *exactMech) Release(rng *Rand, counts []float64, out []float64) error {
	if err := m.ReleaseUnrounded(rng, counts, out); err != nil {
		return err
	}
	roundRelease(out)
	return nil
}

// ReleaseUnrounded ([Unrounded]) is Release before the rounding.
func (m *exactMech) ReleaseUnrounded(rng *Rand, counts []float64, out []float64) error {
	if !m.covered {
		return m.dirichletMech.ReleaseUnrounded(rng, counts, out)
	}
	minC, maxC, err := checkRelease(rng, counts, out, true)
	if err != nil {
		return err
	}
	if !(maxC+m.alpha <= maxShape) {
		return paramErr("counts", maxC, "must be small enough that count + alpha <= 1e300")
	}
	rng.dirichlet(counts, 1, 0, m.alpha, minC+m.alpha < 1, out)
	return nil
}
