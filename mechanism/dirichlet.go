package mechanism

import (
	"math"

	"gonum.org/v1/gonum/floats"

	"github.com/dpstage/stage/internal/lib/special"
)

// dirichletMech releases y ~ Dir(r·max(x, b) + α) (000 eq. (4) with the
// prior Dir(α, …, α), scaled as in 000 Corollary 3 and 001 Algorithm 1).
// Immutable after newDirichlet.
type dirichletMech struct {
	spec     Spec
	alpha    float64 // prior α, the same for every bin
	r        float64 // concentration r (1 for concentrated and closed-form)
	lower    float64 // 001 Remark 2 lower bound b (diffuse only; else 0)
	l2sq     float64 // Δ2²
	linf     float64 // Δ∞
	maxOrder float64 // α_eff/(rΔ∞) + 1
}

// alphaEff is the smallest shape any bin can have: α + r·b. See dirichletRDP.
func (m *dirichletMech) alphaEff() float64 { return m.alpha + m.r*m.lower }

func (m *dirichletMech) Spec() Spec     { return m.spec }
func (m *dirichletMech) Params() Params { return Params{Alpha: m.alpha, R: m.r} }

// MaxOrder is α_eff/(rΔ∞) + 1, the end of Corollary 3's range of orders.
func (m *dirichletMech) MaxOrder() float64 { return m.maxOrder }

// RDP is dirichletRDP at the calibrated (r, α_eff), and +Inf for every order
// ≥ MaxOrder() (so that the rounding of MaxOrder cannot leave a huge finite
// value just below the pole).
func (m *dirichletMech) RDP(order float64) float64 {
	if !(order < m.maxOrder) {
		return math.Inf(1)
	}
	return dirichletRDP(order, m.alphaEff(), m.r, m.l2sq, m.linf)
}

// dirichletRDP is the RDP bound of one draw of Dir(r·x + α) at order λ′,
// 000 Corollary 3, eq. (10):
//
//	ε(λ′) = ½·λ′·r²·Δ2²·ψ′(α_eff − (λ′−1)·r·Δ∞)   for 1 < λ′ < α_eff/(rΔ∞) + 1,
//
// and +Inf for every other λ′ (including NaN and ±Inf): beyond that order the
// bound does not apply — the exact divergence is itself +Inf there for the
// worst neighbours (000 eq. (19): the third Beta function's arguments reach 0).
//
// α_eff is α, plus r·b when every count is known to be ≥ b (001 Remark 2).
// Why: the proof of 000 Theorem 2 (Appendix A.1; 001 Appendix E for r ≠ 1)
// bounds ψ′ at the intermediate points ξ, ξ′ of two Taylor expansions by ψ′
// of their smallest possible value. For a bin whose count grows (x_i ≤ x′_i)
// that value is u_i + (λ′−1)(u_i − u′_i) = r·x_i + α − (λ′−1)·r·(x′_i − x_i)
// ≥ r·b + α − (λ′−1)·r·Δ∞; for a bin whose count shrinks it is u′_i ≥ r·b + α,
// larger still. So every occurrence of α_m in the proof can be replaced by
// α + r·b, and the resulting bound holds whenever all counts of both
// neighbours are ≥ b. Release enforces that by raising counts below b to b, a
// per-coordinate 1-Lipschitz map that cannot increase Δ2 or Δ∞.
//
// The bound is additive over coordinates before the final step (the last
// display of 000 Appendix A.1 is ½λ′·Σ_i (x_i − x′_i)²·ψ′(…) with a ψ′
// factor that depends only on Δ∞): releases of several count vectors (one per
// group) whose changes have Σ_g ‖Δ_g‖₂² ≤ Δ2² and ‖Δ_g‖∞ ≤ Δ∞ jointly satisfy
// the same ε(λ′). TestGroupSplitDirichlet checks this with eq. (19).
func dirichletRDP(order, alphaEff, r, l2sq, linf float64) float64 {
	return corollary3(order, alphaEff, r, l2sq, linf, 0)
}

// corollary3 evaluates dirichletRDP's bound with ψ′'s argument lowered by
// lower·(α_eff + (λ′−1)·r·Δ∞): 0 for dirichletRDP, a rounding allowance
// for dirichletRDPUp (upper.go).
func corollary3(order, alphaEff, r, l2sq, linf, lower float64) float64 {
	if math.IsNaN(order) || math.IsInf(order, 0) || !(order > 1) {
		return math.Inf(1)
	}
	t := (order - 1) * r * linf
	arg := alphaEff - t
	if lower > 0 {
		arg -= lower * (alphaEff + t)
	}
	if !(arg > 0) {
		return math.Inf(1)
	}
	v := 0.5 * order * r * r * l2sq * special.Trigamma(arg)
	if math.IsNaN(v) {
		return math.Inf(1)
	}
	return v
}

// newDirichlet calibrates the Dirichlet mechanism from a validated spec.
func newDirichlet(spec Spec) (*dirichletMech, error) {
	lambda, eps := spec.Order, spec.RDPEpsilon
	l2sq, linf := spec.Sensitivity.L2Sq, spec.Sensitivity.LInf
	m := &dirichletMech{spec: spec, r: 1, l2sq: l2sq, linf: linf}
	var err error
	switch spec.Calibration {
	case Concentrated:
		m.alpha, err = calibrateConcentrated(lambda, eps, l2sq, linf)
	case ClosedForm:
		m.alpha, err = calibrateClosedForm(lambda, eps, l2sq, linf)
	case Diffuse:
		m.lower = spec.LowerBound
		m.r, m.alpha, err = calibrateDiffuse(lambda, eps, l2sq, linf, spec.LowerBound)
	}
	if err != nil {
		return nil, err
	}
	m.maxOrder = m.alphaEff()/(m.r*m.linf) + 1
	if !(m.maxOrder > lambda) || math.IsNaN(m.maxOrder) {
		return nil, errOutOfRange(eps)
	}
	return m, nil
}

func errOutOfRange(eps float64) error {
	return paramErr("rdp_epsilon", eps, "is outside the range the calibration can represent in float64 (together with order and sensitivities)")
}

// calibrateConcentrated solves 000 Theorem 2, eq. (8), with r = 1 for α_m:
// the smallest α_m with ½·λ·Δ2²·ψ′(α_m − (λ−1)Δ∞) ≤ ε.
//
// With s = α_m − (λ−1)Δ∞ the equation is ψ′(s) = c, c = 2ε/(λΔ2²). ψ′ is
// strictly decreasing from +∞ (s → 0⁺) to 0, so the root is unique, and the
// bounds 1/s + 1/(2s²) < ψ′(s) < 1/s + 1/s² (000 eq. (5)) bracket it:
//
//	(1 + √(1+2c))/(2c) < s < (1 + √(1+4c))/(2c).
//
// Bisection to adjacent floats returns the upper end (ψ′(s) ≤ c); α_m is then
// raised by ulps, if rounding requires, until the reported RDP(λ) ≤ ε exactly.
// For the worked example of 000 §3.3 (λ = 2, ε = 1, Δ2² = 2, Δ∞ = 1, i.e.
// ψ′(α_m − 1) = 0.5; see shared/papers/README.md for the paper's typo) this
// gives α_m = 3.4599529483523073 (TestWorkedExample).
func calibrateConcentrated(lambda, eps, l2sq, linf float64) (float64, error) {
	c := 2 * eps / (lambda * l2sq)
	if !(c > 0) || math.IsInf(c, 0) || math.IsNaN(c) {
		return 0, errOutOfRange(eps)
	}
	ok := func(s float64) bool { return special.Trigamma(s) <= c }
	lo := (1 + math.Sqrt(1+2*c)) / (2 * c)
	hi := (1 + math.Sqrt(1+4*c)) / (2 * c)
	for i := 0; ok(lo) && i < 2100; i++ { // guard against rounding at the ends
		lo /= 2
	}
	for i := 0; !ok(hi) && i < 2100; i++ {
		hi *= 2
	}
	if ok(lo) || !ok(hi) || math.IsInf(hi, 0) {
		return 0, errOutOfRange(eps)
	}
	s := bisect(ok, hi, lo)
	alpha := s + (lambda-1)*linf
	return nudgeUp(alpha, func(a float64) bool { return dirichletRDP(lambda, a, 1, l2sq, linf) <= eps }, eps)
}

// calibrateClosedForm is 000 eq. (9): α_m = λΔ2²/(2ε) + (λ−1)Δ∞ + 1, which
// upper-bounds eq. (8) through ψ′(x) < 1/x + 1/x² < 1/(x−1) (x > 1). The
// mechanism still reports the tighter Corollary 3 curve, so RDP(λ) < ε.
func calibrateClosedForm(lambda, eps, l2sq, linf float64) (float64, error) {
	alpha := lambda*l2sq/(2*eps) + (lambda-1)*linf + 1
	if math.IsInf(alpha, 0) || math.IsNaN(alpha) || !(dirichletRDP(lambda, alpha, 1, l2sq, linf) <= eps) {
		return 0, errOutOfRange(eps)
	}
	return alpha, nil
}

// calibrateDiffuse is 001 Algorithm 1 with Remark 2's lower bound b ≥ 0:
// r > 0 solving
//
//	ε = φ(r) := ½·λ·r²·Δ2²·ψ′(1 + r·b + 3(λ−1)·r·Δ∞),   α = 1 + 4(λ−1)·r·Δ∞.
//
// Then α_eff − (λ−1)rΔ∞ = α + rb − (λ−1)rΔ∞ = 1 + rb + 3(λ−1)rΔ∞, so
// Corollary 3 at λ gives exactly φ(r) (see dirichletRDP for α_eff).
//
// φ is strictly increasing from 0 to ∞ (001 Lemma 2; with b > 0 the proof in
// 001 Appendix D applies unchanged to x = r·(b + 3(λ−1)Δ∞)), so the root is
// unique. Bracket: r₀ = √(2ε/(λΔ2²ψ′(1))) (Remark 1's g ≡ 0 value) has
// φ(r₀) ≤ ε because ψ′ is decreasing; doubling finds an upper end.
// Bisection keeps the side with φ ≤ ε, and r is lowered by ulps, if rounding
// requires, until the reported RDP(λ) ≤ ε exactly.
func calibrateDiffuse(lambda, eps, l2sq, linf, b float64) (r, alpha float64, err error) {
	cc := b + 3*(lambda-1)*linf
	phi := func(r float64) float64 { return 0.5 * lambda * r * r * l2sq * special.Trigamma(1+r*cc) }
	ok := func(r float64) bool { return phi(r) <= eps }
	lo := math.Sqrt(2 * eps / (lambda * l2sq * special.Trigamma(1)))
	for i := 0; !ok(lo) && i < 2100; i++ {
		lo /= 2
	}
	hi := 2 * lo
	for i := 0; ok(hi) && i < 2100; i++ {
		hi *= 2
	}
	if !(lo > 0) || !ok(lo) || ok(hi) || math.IsInf(hi, 0) {
		return 0, 0, errOutOfRange(eps)
	}
	r = bisect(ok, lo, hi)
	alphaOf := func(r float64) float64 { return 1 + 4*(lambda-1)*r*linf }
	for i := 0; i < 64; i++ {
		alpha = alphaOf(r)
		if dirichletRDP(lambda, alpha+r*b, r, l2sq, linf) <= eps {
			return r, alpha, nil
		}
		r = math.Nextafter(r, 0)
	}
	return 0, 0, errOutOfRange(eps)
}

// nudgeUp raises x by ulps until ok(x) (at most 64 steps; rounding never
// needs more than a few).
func nudgeUp(x float64, ok func(float64) bool, eps float64) (float64, error) {
	for i := 0; i < 64; i++ {
		if ok(x) {
			return x, nil
		}
		x = math.Nextafter(x, math.Inf(1))
	}
	return 0, errOutOfRange(eps)
}

// Release writes one draw of Dir(r·max(x_i, b) + α) into out, rounded to
// the release grid: ReleaseUnrounded followed by RoundToGrid with
// q = ReleaseGrid(len(counts)). Every entry is a multiple of 1/q (0
// included: a bin whose share is below about 1/(2q) can be released as 0),
// and the entries are n_i/q with Σ n_i = q exactly. Why the draw is
// rounded: the unrounded draw's low-order bits identify the shapes it was
// drawn from (see "Release grid" in the package documentation).
//
// Counts below the declared lower bound b (diffuse calibration only) are
// raised to b; see dirichletRDP for why this keeps the guarantee. out may
// alias counts. Releases do not allocate.
func (m *dirichletMech) Release(rng *Rand, counts []float64, out []float64) error {
	if err := m.ReleaseUnrounded(rng, counts, out); err != nil {
		return err
	}
	roundRelease(out)
	return nil
}

// ReleaseUnrounded ([Unrounded]) writes one draw of Dir(r·max(x_i, b) + α)
// into out, before the rounding of Release.
//
// The draw is a vector of independent Gamma(shape_i, 1) variates normalized
// by their sum (gamma variates from Marsaglia–Tsang, see Rand.gammaGE1). The
// output is always a point of the simplex as a float64 vector: every entry is
// finite and > 0 and the entries sum to 1 within 1e-12 (in fact within
// ~3e-14: see blockSum). When some shape is < 1 the draw is
// made in log space (log G(a) = log G(a+1) + log(U)/a) and normalized by
// log-sum-exp, so tiny shapes do not underflow to 0 and d up to 10⁶ (and
// beyond) is fine. A coordinate whose true value is below 2^-1022 (the
// smallest normal float64; possible only for shapes ≪ 1) is reported as
// 2^-1022; this changes the sum by at most d·2^-1022.
//
// The draw approximates Dir(r·x + α) but is not an exact sample of it: its
// values lie on a lattice fine in absolute terms (about 10⁻⁹ relative) yet
// specific to the shapes, which is why it must not be published (see
// "Release grid" in the package documentation).
func (m *dirichletMech) ReleaseUnrounded(rng *Rand, counts []float64, out []float64) error {
	minC, maxC, err := checkRelease(rng, counts, out, false)
	if err != nil {
		return err
	}
	if !(m.r*maxC+m.alpha <= maxShape) {
		return paramErr("counts", maxC, "must be small enough that r*count + alpha <= 1e300")
	}
	minShape := m.r*math.Max(minC, m.lower) + m.alpha
	rng.dirichlet(counts, m.r, m.lower, m.alpha, minShape < 1, out)
	return nil
}

// maxShape bounds the Dirichlet shapes so that gamma variates and their
// (rescaled) sums stay finite.
const maxShape = 1e300

// smallestNormal is 2^-1022, the floor applied to Dirichlet output entries.
const smallestNormal = 0x1p-1022

// dirichlet writes a draw of Dir(r·max(counts_i, lower) + alpha) into out.
// The caller has validated counts (finite, ≥ 0), r > 0, alpha > 0, and that all
// shapes are finite. logDomain must be true when some shape is < 1.
func (g *Rand) dirichlet(counts []float64, r, lower, alpha float64, logDomain bool, out []float64) {
	if logDomain {
		g.dirichletLog(counts, r, lower, alpha, out)
		return
	}
	for i, x := range counts {
		if x < lower {
			x = lower
		}
		out[i] = g.gammaGE1(r*x + alpha)
	}
	normalizeGammas(out)
}

// normalizeGammas divides the gamma variates in out (finite, > 0) by their
// sum, in place: the linear-space normalization of dirichlet, separate so
// that the tests can replay it on variates of their own (lattice_test.go).
// It sums in blocks of blockLen (plain additions inside a block,
// compensated across blocks; see blockSum) and tracks the smallest variate,
// so that the normalization can skip the 2^-1022 floor when it cannot
// apply.
func normalizeGammas(out []float64) {
	var sum kahan
	minV := math.Inf(1)
	for start := 0; start < len(out); start += blockLen {
		end := min(start+blockLen, len(out))
		block := 0.0
		for _, v := range out[start:end] {
			block += v
			if v < minV {
				minV = v
			}
		}
		sum.add(block)
	}
	s := sum.value()
	if math.IsInf(s, 1) {
		// Huge shapes (up to maxShape) and many bins: rescale by the maximum
		// (finite, since every shape is ≤ 1e300) and sum again.
		mx := 0.0
		for _, v := range out {
			mx = math.Max(mx, v)
		}
		var bs blockSum
		for i := range out {
			out[i] /= mx
			bs.add(out[i])
		}
		s, minV = bs.value(), minV/mx
	}
	inv := 1 / s
	// Rounding is monotone, so if the smallest entry clears the floor, all do.
	if minV*inv >= smallestNormal {
		floats.Scale(inv, out)
		return
	}
	for i, v := range out {
		y := v * inv
		if !(y >= smallestNormal) {
			y = smallestNormal
		}
		out[i] = y
	}
}

// dirichletLog is the log-space path of dirichlet.
func (g *Rand) dirichletLog(counts []float64, r, lower, alpha float64, out []float64) {
	mx := math.Inf(-1)
	for i, x := range counts {
		if x < lower {
			x = lower
		}
		l := g.logGamma(r*x + alpha)
		out[i] = l
		if l > mx {
			mx = l
		}
	}
	var sum blockSum
	for i, l := range out {
		v := math.Exp(l - mx) // in (0, 1], exactly 1 at the maximum
		out[i] = v
		sum.add(v)
	}
	inv := 1 / sum.value() // sum ≥ 1
	for i, v := range out {
		y := v * inv
		if !(y >= smallestNormal) {
			y = smallestNormal
		}
		out[i] = y
	}
}

// kahan is Neumaier's compensated summation: the error of a sum of n terms
// is a few ulps instead of up to n ulps.
type kahan struct{ s, c float64 }

func (k *kahan) add(v float64) {
	t := k.s + v
	if math.Abs(k.s) >= math.Abs(v) {
		k.c += (k.s - t) + v
	} else {
		k.c += (v - t) + k.s
	}
	k.s = t
}

func (k *kahan) value() float64 { return k.s + k.c }

// blockSum sums non-negative terms in blocks of blockLen with plain
// additions and combines the block sums with kahan: the relative error is
// at most about blockLen·2^-53 ≈ 2.8e-14 whatever the number of terms (plain
// summation of 10⁶ terms could be off by 1e-10), at nearly the cost of plain
// summation. A normalized output therefore sums to 1 within ~3e-14.
type blockSum struct {
	k     kahan
	block float64
	n     int
}

const blockLen = 256

func (b *blockSum) add(v float64) {
	b.block += v
	b.n++
	if b.n == blockLen {
		b.k.add(b.block)
		b.block, b.n = 0, 0
	}
}

func (b *blockSum) value() float64 {
	k := b.k
	k.add(b.block)
	return k.value()
}

// checkRelease validates the arguments of Release and returns the smallest
// and largest count. With integer set, counts must also be whole numbers
// ≤ 2^53 (the discrete mechanisms add integer noise to integer counts).
func checkRelease(rng *Rand, counts, out []float64, integer bool) (minC, maxC float64, err error) {
	if rng == nil {
		return 0, 0, paramErr("rng", nil, "must not be nil (use NewRand)")
	}
	if len(counts) < 2 {
		return 0, 0, paramErr("counts", len(counts), "must have at least 2 entries")
	}
	if len(out) != len(counts) {
		return 0, 0, &ParamError{Field: "out", Value: len(out), Reason: "must have the same length as counts (" + itoa(len(counts)) + ")"}
	}
	minC, maxC = math.Inf(1), 0
	for i, x := range counts {
		// !(x >= 0) rejects NaN and negatives, x > MaxFloat64 rejects +Inf.
		if !(x >= 0) || x > math.MaxFloat64 {
			return 0, 0, paramErr("counts["+itoa(i)+"]", x, "must be finite and >= 0")
		}
		if integer && (x != math.Trunc(x) || x > maxExactCount) {
			return 0, 0, paramErr("counts["+itoa(i)+"]", x, "must be a whole number <= 2^53 for the discrete gaussian and laplace mechanisms")
		}
		if x < minC {
			minC = x
		}
		if x > maxC {
			maxC = x
		}
	}
	return minC, maxC, nil
}

// maxExactCount is 2^53: every integer up to it is exact in float64.
const maxExactCount = 1 << 53

// itoa formats a small int without fmt (keeps error paths cheap).
func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	neg := i < 0
	if neg {
		i = -i
	}
	var b [20]byte
	p := len(b)
	for i > 0 {
		p--
		b[p] = byte('0' + i%10)
		i /= 10
	}
	if neg {
		p--
		b[p] = '-'
	}
	return string(b[p:])
}

// DirichletRenyi returns the exact Rényi divergence D_λ(Dir(u) ‖ Dir(u′)) of
// order λ = order between two Dirichlet distributions, from 000 eq. (19)
// (Appendix A.1; 001 eq. (16)):
//
//	E_{y∼Dir(u)}[(P(y)/P′(y))^{λ−1}] = B(u′)^{λ−1}/B(u)^{λ−1} · B(w)/B(u),
//	w = u + (λ−1)(u − u′),
//
// so D_λ = [(λ−1)(log B(u′) − log B(u)) + log B(w) − log B(u)]/(λ−1), with
// log B(v) = Σ_i log Γ(v_i) − log Γ(Σ_i v_i) (math.Lgamma). When some
// w_i ≤ 0 the expectation E[y_i^{(λ−1)(u_i−u′_i)}] diverges and the result is
// +Inf (no error). The computation is arranged as the paper's eq. (20): a sum
// of per-coordinate terms G + H, which vanish exactly for unchanged
// coordinates, minus the same term for the totals u_0, u′_0 (exactly 0 when
// the totals agree). Small negative values from rounding are returned as 0.
// Accuracy is absolute, about 1e-16 times the largest |log Γ| involved.
//
// order must be finite and > 1; u and uPrime must have the same length ≥ 2
// and finite entries > 0. Otherwise the error is a *ParamError.
func DirichletRenyi(order float64, u, uPrime []float64) (float64, error) {
	if err := checkOrder("order", order); err != nil {
		return 0, err
	}
	if len(u) < 2 {
		return 0, paramErr("u", len(u), "must have at least 2 entries")
	}
	if len(uPrime) != len(u) {
		return 0, &ParamError{Field: "u_prime", Value: len(uPrime), Reason: "must have the same length as u (" + itoa(len(u)) + ")"}
	}
	for i := range u {
		if err := checkFinitePositive("u["+itoa(i)+"]", u[i]); err != nil {
			return 0, err
		}
		if err := checkFinitePositive("u_prime["+itoa(i)+"]", uPrime[i]); err != nil {
			return 0, err
		}
	}
	lm1 := order - 1
	var terms, u0, delta0 kahan
	for i := range u {
		ui, vi := u[i], uPrime[i]
		u0.add(ui)
		if ui == vi {
			continue
		}
		wi := ui + lm1*(ui-vi)
		if !(wi > 0) {
			return math.Inf(1), nil
		}
		delta0.add(ui - vi)
		terms.add(lm1*(special.Lgamma(vi)-special.Lgamma(ui)) + special.Lgamma(wi) - special.Lgamma(ui))
	}
	if d0 := delta0.value(); d0 != 0 {
		s := u0.value()
		sp := s - d0
		w0 := s + lm1*d0
		if !(w0 > 0) || !(sp > 0) {
			return math.Inf(1), nil
		}
		terms.add(-(lm1*(special.Lgamma(sp)-special.Lgamma(s)) + special.Lgamma(w0) - special.Lgamma(s)))
	}
	d := terms.value() / lm1
	if math.IsNaN(d) {
		return math.Inf(1), nil
	}
	return math.Max(d, 0), nil
}
