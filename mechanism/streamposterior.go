package mechanism

// The stage's laplace-posterior: a private posterior Dir(α̃) for a stream.
//
// Relationship to the LaplacePosterior kind (posterior.go). That kind is 002
// LSHist/LSDim as the papers state them: the dataset size n is public,
// neighbours replace one observation (c′ = c − e_i + e_j), noise goes on the
// first d−1 counts only, and the last parameter is n minus the others. A
// stream fits none of this: n (the number of bounded events in a window) is
// private, and one user contributes up to m events per window under either
// of the stage's neighbour relations. So the stage does not use that kind
// (it stays for `stage calibrate` and `stage eval`, which reproduce the
// papers); it uses [CountPosterior] instead, which is LSHist's idea — add
// discrete Laplace noise to the histogram and read a Dirichlet posterior
// off the noisy counts — on top of the stage's discrete-Laplace baseline:
//
//	x̃ = x + Z,  Z_i ~ Lap_Z(b) independent, i = 1..d   (all d counts: n is not public)
//	α̃_i = α₀ + max(x̃_i, 0)                             (α₀ > 0 the public prior)
//	probabilities = α̃/Σα̃                               (the mean of Dir(α̃))
//
// Privacy: x̃ is exactly the noisy vector of the Laplace baseline (kind
// Laplace, whose Release is x̃ clipped and renormalized), calibrated by
// [New] from the sensitivities the caller derived from its contribution
// bounds and neighbour relation and from the per-release RDP target. α̃ and
// the probabilities are deterministic functions of x̃ and the public α₀,
// i.e. post-processing, which cannot increase any Rényi divergence (data
// processing inequality; Mironov 2017, "Rényi Differential Privacy",
// Proposition 9). Hence a CountPosterior release has exactly the RDP curve of
// the Laplace baseline it wraps — RDP, MaxOrder, Params and Spec are the
// wrapped mechanism's — and everything the stage derives from that curve
// (planning, the per-(histogram, window) charge over several groups,
// laplaceVectorRDP's group-split argument) carries over unchanged.
//
// Clamping only at 0 (not at n as LSHist does) is forced by n being
// private; the prior keeps every α̃_i ≥ α₀ > 0, so Dir(α̃) is always a valid
// posterior, also for a group that had no events.

// CountReleaser is implemented by mechanisms whose release is a
// post-processing of integer noisy counts (the discrete-Laplace and
// discrete-Gaussian baselines, kinds Laplace and Gaussian): ReleaseCounts writes the noisy counts x̃ = x + Z themselves
// (whole numbers, possibly negative) into noisy. Its privacy is the
// mechanism's RDP curve: Release is ReleaseCounts followed by clipping and
// renormalization. counts must be whole numbers in [0, 2^53], len ≥ 2;
// noisy must have the same length and may alias counts. It does not
// allocate.
type CountReleaser interface {
	Mechanism
	ReleaseCounts(rng *Rand, counts []float64, noisy []float64) error
}

// CountNoiser is implemented by the discrete Gaussian mechanism (kind
// Gaussian): NoisyCount adds one draw of its noise to one whole count.
// The stage's charged totals (plan.TotalPlan) are such counts: a
// histogram's group totals form a vector whose sensitivities the
// mechanism was calibrated for, and NoisyCount draws its coordinates one
// at a time (independent draws, so the vector's RDP curve is the
// mechanism's).
type CountNoiser interface {
	Mechanism
	NoisyCount(rng *Rand, x float64) (float64, error)
}

// ReleaseCounts writes x + Z, Z_i ~ Lap_Z(b) independent (see CountReleaser).
func (m *laplaceMech) ReleaseCounts(rng *Rand, counts []float64, noisy []float64) error {
	if _, _, err := checkRelease(rng, counts, noisy, true); err != nil {
		return err
	}
	for i, x := range counts {
		noisy[i] = float64(int64(x) + rng.discreteLaplace(m.t, m.k))
	}
	return nil
}

// MaxPriorAlpha is the largest prior α₀ a CountPosterior accepts (the same
// limit as PosteriorSpec.Prior).
const MaxPriorAlpha = 1e12

// CountPosterior is the stage-facing laplace-posterior (derivation and
// relationship to the LaplacePosterior kind in streamposterior.go): a [CountReleaser] whose noisy counts are turned
// into the posterior Dir(α̃), α̃_i = α₀ + max(x̃_i, 0). It implements
// [Mechanism] (Release writes the posterior mean α̃/Σα̃) and
// [PosteriorReleaser] (ReleasePosterior writes α̃). Its RDP curve, MaxOrder,
// Params (plus Params.Prior = α₀) and Spec (kind Laplace: New(Spec())
// recreates the noise mechanism) are those of the wrapped mechanism.
type CountPosterior struct {
	base  CountReleaser
	prior float64
}

// NewCountPosterior wraps base, which must implement [CountReleaser] (a
// mechanism of kind Laplace from New), with the prior α₀ ∈ (0, 1e12] given
// to every bin.
func NewCountPosterior(base Mechanism, prior float64) (*CountPosterior, error) {
	cr, ok := base.(CountReleaser)
	if !ok || base == nil || base.Spec().Kind != Laplace {
		kind := "<nil>"
		if base != nil {
			kind = string(base.Spec().Kind)
		}
		return nil, paramErr("base", kind, "must be a mechanism releasing noisy counts (kind laplace)")
	}
	if !(prior > 0) || !(prior <= MaxPriorAlpha) {
		return nil, paramErr("prior", prior, "must be finite, > 0 and <= 1e12")
	}
	return &CountPosterior{base: cr, prior: prior}, nil
}

// Prior returns α₀.
func (m *CountPosterior) Prior() float64 { return m.prior }

// Base returns the wrapped noise mechanism.
func (m *CountPosterior) Base() Mechanism { return m.base }

// Spec returns the wrapped mechanism's spec (kind Laplace).
func (m *CountPosterior) Spec() Spec { return m.base.Spec() }

// Params returns the wrapped mechanism's parameters (the Laplace scale b)
// with Prior = α₀.
func (m *CountPosterior) Params() Params {
	p := m.base.Params()
	p.Prior = m.prior
	return p
}

// RDP is the wrapped mechanism's curve (post-processing adds nothing).
func (m *CountPosterior) RDP(order float64) float64 { return m.base.RDP(order) }

// MaxOrder is the wrapped mechanism's.
func (m *CountPosterior) MaxOrder() float64 { return m.base.MaxOrder() }

// ReleasePosterior writes α̃_i = α₀ + max(x̃_i, 0) for one draw of the noisy
// counts x̃ into alphaOut (len(counts) entries, each ≥ α₀ > 0). alphaOut
// may alias counts. It does not allocate.
func (m *CountPosterior) ReleasePosterior(rng *Rand, counts []float64, alphaOut []float64) error {
	if err := m.base.ReleaseCounts(rng, counts, alphaOut); err != nil {
		return err
	}
	for i, v := range alphaOut {
		alphaOut[i] = m.prior + max(v, 0)
	}
	return nil
}

// Release writes the posterior mean α̃/Σα̃ of one ReleasePosterior draw
// (every entry > 0, summing to 1 within a few ulps).
func (m *CountPosterior) Release(rng *Rand, counts []float64, out []float64) error {
	if err := m.ReleasePosterior(rng, counts, out); err != nil {
		return err
	}
	normalizeInPlace(out)
	return nil
}

// PosteriorMean writes α/Σα, the mean of Dir(α), into out. alpha must have
// ≥ 2 entries in (0, 1e300] and out the same length (it may alias alpha).
func PosteriorMean(alpha []float64, out []float64) error {
	if len(alpha) < 2 {
		return paramErr("alpha", len(alpha), "must have at least 2 entries")
	}
	if len(out) != len(alpha) {
		return &ParamError{Field: "out", Value: len(out), Reason: "must have the same length as alpha (" + itoa(len(alpha)) + ")"}
	}
	for i, a := range alpha {
		if !(a > 0) || !(a <= 1e300) {
			return paramErr("alpha["+itoa(i)+"]", a, "must be in (0, 1e300]")
		}
	}
	copy(out, alpha)
	normalizeInPlace(out)
	return nil
}
