package mechanism

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dpstage/stage/internal/lib/special"
)

// Hellinger-distance exponential mechanisms over candidate posteriors
// (shared/papers 002 Algorithms 3 and 5; 004 §4.1.1 and §4.2). See
// posterior.go for the model and the neighbour relation.
//
// Candidates: R_post = {Dir(α + c′) : c′ ∈ ℤ^d_{≥0}, Σc′ = n}, the
// C(n+d−1, d−1) posteriors of n observations (004 §4, §4.2.1), enumerated
// once at construction and bounded by PosteriorSpec.MaxCandidates. The
// score of candidate r for data c is the Hellinger distance
//
//	H(Dir(a), Dir(b)) = √(1 − B((a+b)/2)/√(B(a)B(b)))        (002 §1, 004 §4.2.1)
//
// between the true posterior Dir(α + c) and r.
//
// Sampling is exact for the computed weights w_r ∈ [0, 1] (the score is
// ≥ 0 and the true posterior, a candidate, has w = 1): propose r uniformly
// (an exact uniform integer) and accept with probability w_r, compared bit
// by bit with a uniform real (bernoulliFloat), so P[r] ∝ w_r exactly; there
// is no cumulative sum whose rounding could leak. The expected number of
// proposals is |R|/Σw ≤ e^{ε/(2Δ)} for EHD and ≤ |R| for EHDS.
//
// Rounding of the scores: the Hellinger distance is computed from log Γ
// (math.Lgamma); hellinger returns, with the value, a bound τ on its error,
// assuming log Γ accurate to 8 ulps of its magnitude (hellRound;
// TestHellingerAccuracy checks the distances against 30-digit mpmath
// values). The sensitivities used in the exponents are raised by the
// data-independent bound τ_max(α, n) on every score's error (twice or
// three times, see newEHD and newEHDS), so the privacy proofs hold for the
// computed scores, not only for the exact ones.

// hellRound is the rounding allowance of one log Γ, relative to its
// magnitude: 8 ulps.
const hellRound = 8 * 0x1p-52

// ErrTooManyCandidates is matched by a [*CandidateLimitError].
var ErrTooManyCandidates = errors.New("mechanism: too many candidate posteriors")

// CandidateLimitError reports an ehd/ehds configuration whose candidate set
// C(n+d−1, d−1) exceeds the limit. It matches ErrTooManyCandidates and
// ErrInvalidParameter.
type CandidateLimitError struct {
	N, D       int     // observations and categories
	Candidates float64 // C(n+d−1, d−1) (a lower bound once it exceeds the limit)
	Limit      int
}

func (e *CandidateLimitError) Error() string {
	return fmt.Sprintf("mechanism: %g candidate posteriors (n = %d observations, d = %d categories: C(n+d−1, d−1)) exceed posterior.max_candidates = %d; "+
		"use laplace-posterior, fewer categories or a smaller n, or raise the limit", e.Candidates, e.N, e.D, e.Limit)
}

// Is makes errors.Is(err, ErrTooManyCandidates) and errors.Is(err,
// ErrInvalidParameter) true.
func (e *CandidateLimitError) Is(target error) bool {
	return target == ErrTooManyCandidates || target == ErrInvalidParameter
}

// maxAbsLgamma bounds |log Γ| on [lo, hi] ⊂ (0, ∞): log Γ is convex there,
// so its maximum is at an end, and its minimum is ≈ −0.1215 (at 1.4616).
func maxAbsLgamma(lo, hi float64) float64 {
	return math.Max(math.Max(math.Abs(special.Lgamma(lo)), math.Abs(special.Lgamma(hi))), 0.1215)
}

// hellingerLog returns L = log of the Bhattacharyya coefficient
// B((a+b)/2)/√(B(a)B(b)) ≤ 0 and a bound e on its rounding error.
func hellingerLog(a, b []float64) (l, e float64) {
	var s, mag kahan
	var ta, tb float64
	for i := range a {
		ta += a[i]
		tb += b[i]
		if a[i] == b[i] {
			continue
		}
		m := special.Lgamma((a[i] + b[i]) / 2)
		la, lb := special.Lgamma(a[i]), special.Lgamma(b[i])
		s.add(m - la/2 - lb/2)
		mag.add(math.Abs(m) + math.Abs(la)/2 + math.Abs(lb)/2)
	}
	if ta != tb {
		m := special.Lgamma((ta + tb) / 2)
		la, lb := special.Lgamma(ta), special.Lgamma(tb)
		s.add(-(m - la/2 - lb/2))
		mag.add(math.Abs(m) + math.Abs(la)/2 + math.Abs(lb)/2)
	}
	l = s.value()
	e = hellRound*(mag.value()+1) + 0x1p-52
	return l, e
}

// hellingerFromLog turns L and its error e into H = √(1 − e^L) and a
// bound on the error of H: the true 1 − e^L lies within e of the computed
// value (the map is 1-Lipschitz for L ≤ 0).
func hellingerFromLog(l, e float64) (h, tau float64) {
	if l == 0 && e == 0 {
		return 0, 0
	}
	u := -math.Expm1(math.Min(l, 0))
	u = math.Min(math.Max(u, 0), 1)
	h = math.Sqrt(u)
	up := math.Sqrt(math.Min(u+e, 1)) - h
	down := h - math.Sqrt(math.Max(u-e, 0))
	return h, math.Max(up, down) + 0x1p-52
}

// hellinger returns H(Dir(a), Dir(b)) and a bound on its rounding error;
// exactly (0, 0) for a == b.
func hellinger(a, b []float64) (h, tau float64) {
	if slices.Equal(a, b) {
		return 0, 0
	}
	return hellingerFromLog(hellingerLog(a, b))
}

// Hellinger returns the Hellinger distance between Dir(a) and Dir(b) (Beta
// distributions for length 2), 002 §1 / 004 §4.2.1. a and b must have the
// same length ≥ 2 and finite entries > 0; otherwise a *ParamError.
func Hellinger(a, b []float64) (float64, error) {
	if len(a) < 2 {
		return 0, paramErr("a", len(a), "must have at least 2 entries")
	}
	if len(b) != len(a) {
		return 0, paramErr("b", len(b), "must have the same length as a ("+itoa(len(a))+")")
	}
	for i := range a {
		if err := checkFinitePositive("a["+itoa(i)+"]", a[i]); err != nil {
			return 0, err
		}
		if err := checkFinitePositive("b["+itoa(i)+"]", b[i]); err != nil {
			return 0, err
		}
	}
	h, _ := hellinger(a, b)
	return h, nil
}

// logR is log r(v) = log Γ(v+½) − ½log Γ(v) − ½log Γ(v+1). r is strictly
// increasing on (0, ∞): (log r)′ = ψ(v+½) − ψ(v) − 1/(2v), and by DLMF
// 5.9.16, ψ(v+½) − ψ(v) = ∫_0^∞ e^{−vt}(1 − e^{−t/2})/(1 − e^{−t}) dt
// = ∫_0^∞ e^{−vt}/(1 + e^{−t/2}) dt > ∫_0^∞ e^{−vt}/2 dt = 1/(2v).
func logR(v float64) float64 {
	return special.Lgamma(v+0.5) - special.Lgamma(v)/2 - special.Lgamma(v+1)/2
}

// neighbourHellinger is H between the posteriors Dir(u) and
// Dir(u − e_i + e_j) of neighbouring data (one observation moved from bin i
// to bin j): the multivariate betas' totals and every other coordinate
// cancel, leaving BC = r(u_i − 1)·r(u_j).
func neighbourLog(ui, uj float64) float64 { return logR(ui-1) + logR(uj) }

// GlobalHellingerSensitivity is the global sensitivity of the score
// −H(Dir(α + c), r) under one replacement, for the prior α (at least two
// entries > 0) and any n ≥ 1:
//
//	GS = √(1 − r(α₍₁₎)·r(α₍₂₎)),   r(v) = Γ(v+½)/√(Γ(v)Γ(v+1)),
//
// α₍₁₎ ≤ α₍₂₎ the two smallest prior parameters. Proof: by the triangle
// inequality |H(p, r) − H(p′, r)| ≤ H(p, p′), attained at r = p, so the
// sensitivity is the largest H between neighbouring posteriors Dir(u) and
// Dir(u − e_i + e_j), u = α + c, c_i ≥ 1, whose Bhattacharyya coefficient is
// r(u_i − 1)·r(u_j) (neighbourLog); r is increasing (logR), u_i − 1 ≥ α_i
// and u_j ≥ α_j, so the minimum is at c_i = 1, c_j = 0 on the two smallest
// α's. For α = (1, 1), r(1) = Γ(3/2) = √π/2 and GS = √(1 − π/4) ≈ 0.4633,
// the constant of 002 §1; for priors with entries below 1 it is larger, so
// 002's constant is only valid when the two smallest prior parameters are
// ≥ 1.
func GlobalHellingerSensitivity(prior []float64) (float64, error) {
	if len(prior) < 2 {
		return 0, paramErr("prior", len(prior), "must have at least 2 entries")
	}
	for i, a := range prior {
		if err := checkFinitePositive("prior["+itoa(i)+"]", a); err != nil {
			return 0, err
		}
	}
	a1, a2 := twoSmallest(prior)
	gs, _ := hellingerFromLog(neighbourLog(a1+1, a2), 0)
	return gs, nil
}

func twoSmallest(v []float64) (a1, a2 float64) {
	a1, a2 = math.Inf(1), math.Inf(1)
	for _, x := range v {
		switch {
		case x < a1:
			a1, a2 = x, a1
		case x < a2:
			a2 = x
		}
	}
	return a1, a2
}

// localSensitivity returns LS(c) = max over neighbours c′ of
// H(Dir(u), Dir(u′)), u = α + c (004 §4.1.2, reduced by the triangle
// inequality as in 004 §6.1): the largest H over moves of one observation
// from a bin i with c_i ≥ 1 to a bin j ≠ i, i.e. the smallest
// r(u_i − 1)·r(u_j) (neighbourLog). It returns 0 if n = 0 (no neighbour),
// and an error bound.
func localSensitivity(prior, u []float64) (ls, tau float64) {
	best := math.Inf(1)
	var bestMag float64
	// Two smallest u_j and their indices.
	j1, j2 := -1, -1
	for j := range u {
		switch {
		case j1 < 0 || u[j] < u[j1]:
			j1, j2 = j, j1
		case j2 < 0 || u[j] < u[j2]:
			j2 = j
		}
	}
	for i := range u {
		if !(u[i]-prior[i] >= 1) {
			continue
		}
		j := j1
		if j == i {
			j = j2
		}
		l := neighbourLog(u[i], u[j])
		if l < best {
			best = l
			bestMag = math.Abs(special.Lgamma(u[i]-0.5)) + math.Abs(special.Lgamma(u[i]-1))/2 + math.Abs(special.Lgamma(u[i]))/2 +
				math.Abs(special.Lgamma(u[j]+0.5)) + math.Abs(special.Lgamma(u[j]))/2 + math.Abs(special.Lgamma(u[j]+1))/2
		}
	}
	if math.IsInf(best, 1) {
		return 0, 0
	}
	return hellingerFromLog(best, hellRound*(bestMag+1)+0x1p-52)
}

// LocalHellingerSensitivity returns LS(c) of 004 §4.1.2 for prior α and
// counts c (whole numbers ≥ 0): the largest Hellinger distance between the
// posterior Dir(α + c) and the posterior of a neighbouring dataset. It is
// NOT a differentially private quantity; it is exported for evaluations
// (EHDL, internal/eval/posterior.go) and tests.
func LocalHellingerSensitivity(prior, counts []float64) (float64, error) {
	if len(prior) < 2 {
		return 0, paramErr("prior", len(prior), "must have at least 2 entries")
	}
	if len(counts) != len(prior) {
		return 0, paramErr("counts", len(counts), "must have the same length as prior ("+itoa(len(prior))+")")
	}
	u := make([]float64, len(prior))
	for i := range prior {
		if err := checkFinitePositive("prior["+itoa(i)+"]", prior[i]); err != nil {
			return 0, err
		}
		if !(counts[i] >= 0) || counts[i] != math.Trunc(counts[i]) || counts[i] > maxExactCount {
			return 0, paramErr("counts["+itoa(i)+"]", counts[i], "must be a whole number in [0, 2^53]")
		}
		u[i] = prior[i] + counts[i]
	}
	ls, _ := localSensitivity(prior, u)
	return ls, nil
}

// candidateCount returns C(n+d−1, d−1), stopping (with over = true) once
// it exceeds limit.
func candidateCount(n, d, limit int) (count float64, over bool) {
	c := 1.0
	for i := 1; i <= d-1; i++ {
		c = c * float64(n+i) / float64(i)
		c = math.Round(c) // exact while c < 2^53: C(n+i, i) is an integer
		if c > float64(limit) {
			return c, true
		}
	}
	return c, false
}

// PosteriorCandidates returns the C(n+d−1, d−1) candidate posteriors
// α + c′ (Σc′ = n) of ehd/ehds, flattened (candidate i is
// out[i·d:(i+1)·d]), or a *CandidateLimitError if there are more than
// limit (limit ≤ 0: DefaultMaxCandidates).
func PosteriorCandidates(prior []float64, n, limit int) ([]float64, error) {
	if len(prior) < 2 {
		return nil, paramErr("prior", len(prior), "must have at least 2 entries")
	}
	for i, a := range prior {
		if err := checkFinitePositive("prior["+itoa(i)+"]", a); err != nil {
			return nil, err
		}
	}
	if n < 1 || n > maxExactCount {
		return nil, paramErr("n", n, "must be in [1, 2^53]")
	}
	if limit <= 0 {
		limit = DefaultMaxCandidates
	}
	d := len(prior)
	count, over := candidateCount(n, d, limit)
	if over {
		return nil, &CandidateLimitError{N: n, D: d, Candidates: count, Limit: limit}
	}
	out := make([]float64, 0, int(count)*d)
	c := make([]int, d)
	c[d-1] = n
	for {
		for i := range c {
			out = append(out, prior[i]+float64(c[i]))
		}
		// Next composition: take the last non-zero part among c[1:], move
		// one of its units one place left and the rest of it to the end.
		// Starting from (0, …, 0, n) this visits every composition once,
		// ending at (n, 0, …, 0).
		k := -1
		for i := d - 1; i >= 1; i-- {
			if c[i] > 0 {
				k = i
				break
			}
		}
		if k < 0 {
			break
		}
		v := c[k]
		c[k] = 0
		c[k-1]++
		c[d-1] += v - 1
	}
	return out, nil
}

// tauMax bounds the rounding error of every Hellinger distance between
// posteriors of n observations under prior α (and of every local
// sensitivity), from the largest |log Γ| over the range of their
// parameters: every per-coordinate term has magnitude ≤ 2·G_i and the
// total's ≤ 2·G_0.
func tauMax(prior []float64, n int) float64 {
	var mag, total float64
	fn := float64(n)
	for _, a := range prior {
		lo := math.Max(a-1, a/2) // local sensitivities evaluate log Γ down to u_i − 1 ≥ α_i, and at half-integers above
		mag += 2 * maxAbsLgamma(math.Min(lo, a), a+fn+1)
		total += a
	}
	mag += 2 * maxAbsLgamma(total, total+fn)
	e := hellRound*(mag+1) + 0x1p-52
	return math.Sqrt(e) + 0x1p-52
}

// bernoulliFloat returns true with probability w exactly, for a float64
// w ∈ [0, 1]: w is a dyadic rational m·2^e, compared with a uniform real
// U = 0.b₁b₂… read 64 bits at a time (true iff U < w).
func (g *Rand) bernoulliFloat(w float64) bool {
	if !(w > 0) {
		return false
	}
	if w >= 1 {
		return true
	}
	frac, exp := math.Frexp(w)       // w = frac·2^exp, frac ∈ [0.5, 1), exp ≤ 0
	mant := uint64(frac * (1 << 53)) // exact: 53-bit integer
	// w = mant · 2^(exp−53): its binary expansion has −exp zeros after the
	// point, then the 53 bits of mant.
	zeros := -exp
	for zeros >= 64 {
		if g.src.Uint64() != 0 {
			return false // U ≥ 2^-64·… > w
		}
		zeros -= 64
	}
	// Read zeros + 53 more bits of U: first the zeros.
	if zeros > 0 {
		if g.src.Uint64()>>(64-uint(zeros)) != 0 {
			return false
		}
	}
	v := g.src.Uint64() >> 11 // next 53 bits of U
	switch {
	case v < mant:
		return true
	case v > mant:
		return false
	default:
		return false // U ≥ w: the remaining bits make U ≥ mant·2^(exp−53) = w
	}
}

// drawByWeight returns i ∈ [0, n) with probability w(i)/Σw exactly, for
// weights in [0, 1], by uniform proposals accepted with probability w(i).
// ok is false if no proposal was accepted within 64·n + 10⁶ trials and the
// weights sum to 0.
func (g *Rand) drawByWeight(n int, w func(int) float64) (int, bool) {
	limit := 64*n + 1_000_000
	for t := 0; ; t++ {
		i := int(g.uint64n(uint64(n)))
		if g.bernoulliFloat(w(i)) {
			return i, true
		}
		if t == limit {
			var s float64
			for j := 0; j < n; j++ {
				s += w(j)
			}
			if !(s > 0) {
				return 0, false
			}
			t = 0
		}
	}
}

// SampleByWeight returns i ∈ [0, n) with probability proportional to
// weight(i) ∈ [0, 1], exactly for the float64 weights given (uniform
// proposals, accepted by an exact Bernoulli(weight) — see hellinger.go).
// The expected number of weight evaluations is n/Σweight, so some weight
// should be close to 1. Errors: n < 1, rng nil, a weight outside [0, 1]
// (*ParamError), or weights all 0.
func SampleByWeight(rng *Rand, n int, weight func(int) float64) (int, error) {
	if rng == nil {
		return 0, paramErr("rng", nil, "must not be nil (use NewRand)")
	}
	if n < 1 {
		return 0, paramErr("n", n, "must be >= 1")
	}
	var bad error
	w := func(i int) float64 {
		v := weight(i)
		if !(v >= 0 && v <= 1) && bad == nil {
			bad = paramErr("weight", v, "must be in [0, 1]")
			return 1
		}
		return v
	}
	i, ok := rng.drawByWeight(n, w)
	if bad != nil {
		return 0, bad
	}
	if !ok {
		return 0, paramErr("weight", 0.0, "must not be 0 for every candidate")
	}
	return i, nil
}
