package mechanism

import (
	"math"
	"slices"

	"github.com/dpstage/stage/internal/lib/special"
)

// hellingerMech holds what ehd and ehds share: the candidate posteriors
// and per-candidate constants.
type hellingerMech struct {
	spec  Spec
	p     PosteriorSpec
	d     int
	cands []float64 // α + c′ for every composition c′ of n, flattened
	ncand int
	tau   float64 // tauMax(α, n): bound on every computed score's error
}

func newHellingerBase(out Spec, p PosteriorSpec) (*hellingerMech, error) {
	cands, err := PosteriorCandidates(p.Prior, p.N, p.MaxCandidates)
	if err != nil {
		return nil, err
	}
	d := len(p.Prior)
	return &hellingerMech{spec: out, p: p, d: d, cands: cands, ncand: len(cands) / d, tau: tauMax(p.Prior, p.N)}, nil
}

func (m *hellingerMech) cand(i int) []float64 { return m.cands[i*m.d : (i+1)*m.d] }

// Spec returns the spec with a copy of its PosteriorSpec (MaxCandidates
// filled in).
func (m *hellingerMech) Spec() Spec {
	p := m.p
	p.Prior = slices.Clone(m.p.Prior)
	s := m.spec
	s.Posterior = &p
	return s
}

// Candidates returns |R_post| = C(n+d−1, d−1).
func (m *hellingerMech) Candidates() int { return m.ncand }

// draw runs the exponential mechanism: candidate i with probability
// ∝ exp(−scale·H(Dir(u), r_i)), u = α + counts, and writes α + c′_i into
// alphaOut. u is built in alphaOut (which may alias counts).
func (m *hellingerMech) draw(rng *Rand, u []float64, scale float64, alphaOut []float64) {
	i, _ := rng.drawByWeight(m.ncand, func(i int) float64 {
		h, _ := hellinger(u, m.cand(i))
		return math.Exp(-scale * h)
	})
	copy(alphaOut, m.cand(i))
}

// ehdMech is 002 Algorithm 3 (EHD) / 004 §4.1.1: the exponential mechanism
// with the global sensitivity.
type ehdMech struct {
	*hellingerMech
	gs    float64 // GlobalHellingerSensitivity(α)
	delta float64 // the sensitivity used in the exponent: (gs + 2τ)(1 + 1e-9)
	scale float64 // ε/(2Δ)
}

// newEHD: P[r] ∝ exp(−ε·H(Dir(α+c), r)/(2Δ)) over R_post (002 Algorithm
// 3), with Δ ≥ GS + 2τ_max: for neighbours c, c′ the computed scores differ
// by at most H(true, true′) + 2τ_max ≤ GS + 2τ_max, so the standard proof
// of the exponential mechanism (McSherry & Talwar 2007; 004 §4.1.1) gives
// ε-DP for the scores as computed; the relative margin 1e-9 absorbs the
// rounding of the exponent and of exp. ε/(2Δ) is limited to 700 so that
// every weight is a normal float64 (no underflow to 0).
func newEHD(out Spec, p PosteriorSpec) (*ehdMech, error) {
	base, err := newHellingerBase(out, p)
	if err != nil {
		return nil, err
	}
	gs, _ := GlobalHellingerSensitivity(p.Prior)
	a1, a2 := twoSmallest(p.Prior)
	// Rounding of gs itself: same allowance as any score.
	l := neighbourLog(a1+1, a2)
	mag := math.Abs(special.Lgamma(a1+0.5)) + math.Abs(special.Lgamma(a1))/2 + math.Abs(special.Lgamma(a1+1))/2 +
		math.Abs(special.Lgamma(a2+0.5)) + math.Abs(special.Lgamma(a2))/2 + math.Abs(special.Lgamma(a2+1))/2
	_, tauGS := hellingerFromLog(l, hellRound*(mag+1)+0x1p-52)
	delta := (gs + tauGS + 2*base.tau) * (1 + 1e-9)
	scale := p.Epsilon / (2 * delta)
	if scale > 700 {
		return nil, paramErr("posterior.epsilon", p.Epsilon, "is too large for ehd (ε/(2·GS) must be <= 700)")
	}
	return &ehdMech{hellingerMech: base, gs: gs, delta: delta, scale: scale}, nil
}

// Params reports the sensitivity Δ used in the exponent.
func (m *ehdMech) Params() Params { return Params{HellingerSensitivity: m.delta} }

// DP returns (ε, 0).
func (m *ehdMech) DP() (epsilon, delta float64) { return m.p.Epsilon, 0 }

// MaxOrder is +Inf.
func (m *ehdMech) MaxOrder() float64 { return math.Inf(1) }

// RDP is min(PureDPRDP(ε, λ), λε²/8): the exponential mechanism is
// ε-bounded-range (the log-ratio of output probabilities of neighbours
// lies in an interval of length ε), hence ε²/8-zCDP (Cesar & Rogers 2021,
// "Bounding, Concentrating, and Truncating: Unifying Privacy Loss
// Composition for Data Analytics", ALT; proof via Hoeffding's lemma in
// Steinke's differentialprivacy.org post "Sharp RDP & zCDP from pure DP",
// Lemma 3 and Theorem 5).
func (m *ehdMech) RDP(order float64) float64 {
	v := PureDPRDP(m.p.Epsilon, order)
	if math.IsInf(v, 1) {
		return v
	}
	return math.Min(v, order*m.p.Epsilon*m.p.Epsilon/8)
}

// ReleasePosterior writes the parameters α + c′ of the selected candidate.
// alphaOut may alias counts.
func (m *ehdMech) ReleasePosterior(rng *Rand, counts []float64, alphaOut []float64) error {
	if _, err := checkPosteriorCounts(rng, &m.p, counts, alphaOut, "alpha_out"); err != nil {
		return err
	}
	for i := range counts {
		alphaOut[i] = m.p.Prior[i] + counts[i]
	}
	m.draw(rng, alphaOut, m.scale, alphaOut)
	return nil
}

// Release writes the posterior mean of the selected candidate.
func (m *ehdMech) Release(rng *Rand, counts []float64, out []float64) error {
	if err := m.ReleasePosterior(rng, counts, out); err != nil {
		return err
	}
	normalizeInPlace(out)
	return nil
}

// ehdsMech is 002 Algorithm 5 (EHDS) / 004 §4.2: the exponential mechanism
// calibrated to a γ-smooth upper bound of the local sensitivity.
type ehdsMech struct {
	*hellingerMech
	gamma float64   // smoothing parameter used for S (slightly below the analysed one)
	t     float64   // ε/4 (slightly below)
	ls    []float64 // LS̃(c′) + 3τ for every candidate c′
}

// newEHDS: P[r] ∝ exp(−t·H(Dir(α+c), r)/S(c)) with t = ε/4 and
//
//	S(c) = max_{c′ ∈ R} (LS(c′) + 3τ)·exp(−γ·‖c − c′‖₁/2),       (004 eq. (1))
//	γ = log(1 + ε/(2·(log(|R|/δ) + log|R| + 1))),
//
// ‖c − c′‖₁/2 being the Hamming distance between datasets with counts c and
// c′ (the fewest replacements), so S(c) ≥ LS(c) + 3τ and S(c′) ≤ e^γ·S(c)
// for neighbours (triangle inequality). This is (ε, δ)-DP — our own proof,
// because 004's (Lemmas 4.1–4.3) does not hold as written:
//
// Fix neighbours x, y with scores h_r = H̃(x, r), h′_r = H̃(y, r) ≥ 0 (both
// 0 at the true posteriors, which are candidates), a = 1/S(x), a′ = 1/S(y),
// Z(x) = Σ_r e^{−t·a·h_r} ≥ 1, N = |R|. Scores differ by at most
// H(x, y) + 2τ ≤ min(LS(x), LS(y)) + 2τ ≤ min(S(x), S(y)), and
// e^{−γ}a ≤ a′ ≤ e^γ a. Then for every r
//
//	t(h′a′ − h a) = t[(h′ − h)a′ + h(a′ − a)] ≤ t + t(e^γ − 1)·a·h,
//	Z(y) ≤ Σ_r e^{−t e^{−γ} a (h_r − S(x))} = e^{t e^{−γ}}·Z_x(e^{−γ}),
//
// with Z_x(s) = Σ_r e^{−t s a h_r}. log Z_x is convex with derivative
// −t·a·E_s[h] (E_s under p_s ∝ e^{−t s a h}), so log Z_x(e^{−γ}) − log Z_x(1)
// ≤ (1 − e^{−γ})·t·a·E_{e^{−γ}}[h] ≤ (1 − e^{−γ})(log N + 1)/e^{−γ}, since
// P_s[t s a h ≥ log N + v] ≤ e^{−v} gives E_s[t s a h] ≤ log N + 1. Hence
//
//	log P_x(r)/P_y(r) ≤ 2t + (e^γ − 1)(t·a·h_r + log N + 1).
//
// On G = {r : t·a·h_r ≤ log(N/δ)}, which has P_x(G) ≥ 1 − N·e^{−log(N/δ)} =
// 1 − δ, this is ≤ 2t + (e^γ − 1)(log(N/δ) + log N + 1) = ε/2 + ε/2, so
// P_x(E) ≤ e^ε P_y(E) + δ for every event E. The exponent ε/(4S) matches
// 002 Algorithm 5; 004's γ = log(1 − ε/(2 log(δ/(2(n+1))))) with exponent
// ε/(2S) (004 Definition 4.1, §4.2.1) is larger than this proof supports
// and is not used. Margins of 1e-9 (relative, on t and γ) absorb rounding;
// weights that underflow to 0 lie outside G (their exponent exceeds 745
// while t·a·h ≤ log(N/δ) + O(1) on G) and only make the bound tighter.
func newEHDS(out Spec, p PosteriorSpec) (*ehdsMech, error) {
	base, err := newHellingerBase(out, p)
	if err != nil {
		return nil, err
	}
	n := float64(base.ncand)
	logN := math.Log(n)
	gamma := math.Log1p(p.Epsilon/(2*(logN-math.Log(p.Delta)+logN+1))) * (1 - 1e-9)
	t := p.Epsilon / 4 * (1 - 1e-9)
	ls := make([]float64, base.ncand)
	for i := range ls {
		v, tau := localSensitivity(p.Prior, base.cand(i))
		ls[i] = v + math.Max(tau, base.tau) + 2*base.tau
	}
	return &ehdsMech{hellingerMech: base, gamma: gamma, t: t, ls: ls}, nil
}

// smooth returns S(c) for the candidate whose parameters are u = α + c.
func (m *ehdsMech) smooth(u []float64) float64 {
	var best float64
	for i := 0; i < m.ncand; i++ {
		c := m.cand(i)
		var dist float64
		for j := range c {
			dist += math.Abs(c[j] - u[j])
		}
		v := m.ls[i] * math.Exp(-m.gamma*dist/2)
		if v > best {
			best = v
		}
	}
	return best
}

// SmoothSensitivity returns S(c) of the mechanism for counts c (it is not
// private: exported for evaluations and `stage calibrate`).
func (m *ehdsMech) SmoothSensitivity(counts []float64) (float64, error) {
	u := make([]float64, m.d)
	if _, err := checkPosteriorCounts(&Rand{}, &m.p, counts, u, "counts"); err != nil {
		return 0, err
	}
	for i := range counts {
		u[i] = m.p.Prior[i] + counts[i]
	}
	return m.smooth(u), nil
}

// Params reports the smoothing parameter γ.
func (m *ehdsMech) Params() Params { return Params{Smoothing: m.gamma} }

// DP returns (ε, δ).
func (m *ehdsMech) DP() (epsilon, delta float64) { return m.p.Epsilon, m.p.Delta }

// RDP is +Inf: the guarantee is (ε, δ)-DP only.
func (m *ehdsMech) RDP(float64) float64 { return math.Inf(1) }

// MaxOrder is 1: RDP is finite at no order.
func (m *ehdsMech) MaxOrder() float64 { return 1 }

// ReleasePosterior writes the parameters of the selected candidate.
// alphaOut may alias counts.
func (m *ehdsMech) ReleasePosterior(rng *Rand, counts []float64, alphaOut []float64) error {
	if _, err := checkPosteriorCounts(rng, &m.p, counts, alphaOut, "alpha_out"); err != nil {
		return err
	}
	for i := range counts {
		alphaOut[i] = m.p.Prior[i] + counts[i]
	}
	s := m.smooth(alphaOut)
	m.draw(rng, alphaOut, m.t/s, alphaOut)
	return nil
}

// Release writes the posterior mean of the selected candidate.
func (m *ehdsMech) Release(rng *Rand, counts []float64, out []float64) error {
	if err := m.ReleasePosterior(rng, counts, out); err != nil {
		return err
	}
	normalizeInPlace(out)
	return nil
}
