package mechanism

import "math"

// ReleaseGrid returns Q, the public grid of a floating-point release with
// the given number of bins: the released probabilities are n_i/Q for
// integers n_i ≥ 0 with Σ n_i = Q. Q is 10⁴ up to 100 bins, 10⁵ up to 1000
// and 10⁶ beyond (bins < 1 gives 10⁴). Why these values: see "Release grid"
// in the package documentation — Q must be coarse enough that every grid
// cell holds very many outputs of the sampler for every shape the stage uses
// (so the cell's probability is the ideal Dirichlet's within a small
// relative factor), and fine enough for the histograms' resolution (a grid
// step of at most 1% of the uniform share 1/d up to 10⁴ bins). A power of
// ten keeps the JSON short: n/10⁴ prints as at most four decimals. Q is not
// configurable: a finer grid would weaken the argument (cells holding fewer
// lattice points), and a coarser one is post-processing any consumer can
// apply to the release.
func ReleaseGrid(bins int) int64 {
	switch {
	case bins <= 100:
		return 10_000
	case bins <= 1000:
		return 100_000
	default:
		return 1_000_000
	}
}

// maxGrid bounds the q accepted by RoundToGrid, so that q times the
// allowed error of Σ p (1e-9) stays below one unit (see roundToGrid).
const maxGrid = 100_000_000

// RoundToGrid rounds the probability vector p in place to the grid of
// spacing 1/q: p_i becomes n_i/q with integers n_i ≥ 0, Σ n_i = q exactly,
// and |n_i − q·p_i| < 1 for every i (so no coordinate moves by 1/q or more).
// The n_i are the largest-remainder rounding of q·p: every n_i is ⌊q·p_i⌋ or
// ⌊q·p_i⌋ + 1, and the units left over after the floors go to the largest
// fractional parts, ties to the lower index. It is a deterministic function
// of p, so applying it to a private release is post-processing.
//
// p must have at least one entry, every entry finite and ≥ 0, summing to 1
// within 1e-9; q must be in [1, 10⁸]. Otherwise the error is a *ParamError
// and p is left untouched. RoundToGrid does not allocate.
func RoundToGrid(p []float64, q int64) error {
	if q < 1 || q > maxGrid {
		return paramErr("q", q, "must be in [1, 1e8]")
	}
	if len(p) < 1 {
		return paramErr("p", len(p), "must have at least 1 entry")
	}
	var sum kahan
	for i, v := range p {
		// !(v >= 0) rejects NaN and negatives, v > MaxFloat64 rejects +Inf.
		if !(v >= 0) || v > math.MaxFloat64 {
			return paramErr("p["+itoa(i)+"]", v, "must be finite and >= 0")
		}
		sum.add(v)
	}
	if s := sum.value(); !(math.Abs(s-1) <= 1e-9) {
		return paramErr("p", s, "must sum to 1 within 1e-9")
	}
	roundToGrid(p, q)
	return nil
}

// roundToGrid is RoundToGrid without validation: p finite, ≥ 0, summing to
// 1 within 1e-9, 1 ≤ q ≤ 10⁸.
//
// Why Σ n_i = q exactly: with t_i = q·p_i as computed (each within a
// relative 2^-53 of the real product) and F = Σ ⌊t_i⌋ (an exact integer
// sum), the number of units to hand out is R = q − F = (q − Σ t_i) +
// Σ (t_i − ⌊t_i⌋), as real numbers (t − ⌊t⌋ is exact in float64). The first
// term is at most q·1e-9 + q·2^-53·Σ p_i < 0.2 in magnitude for q ≤ 10⁸,
// the second is in [0, d), and R is an integer, so 0 ≤ R ≤ d: giving one
// unit to each of the R largest remainders is always possible and makes the
// sum exactly q. Each n_i is ⌊t_i⌋ or ⌊t_i⌋ + 1, so |n_i − t_i| < 1.
//
// The R largest remainders are found without sorting (and without
// allocating): remainders are non-negative floats, whose IEEE bit patterns
// order like their values, so a binary search over the 64-bit patterns
// finds the largest pattern T with at least R remainders ≥ T; every
// remainder above T gets a unit, and the rest of the R units go to the
// remainders equal to T in index order. At most 64 passes over p, about
// 10 + log₂ d for distinct remainders (the search stops once exactly R
// remainders are ≥ T). Up to 64 bins a direct selection (R passes) is
// faster and gives the same n.
func roundToGrid(p []float64, q int64) {
	qf := float64(q)
	var floors int64
	for i, v := range p {
		t := v * qf
		p[i] = t
		floors += int64(math.Floor(t))
	}
	units := q - floors
	if units < 0 {
		units = 0 // unreachable under the preconditions (see above)
	}
	if units > int64(len(p)) {
		units = int64(len(p))
	}
	if units == 0 {
		for i, t := range p {
			p[i] = math.Floor(t) / qf
		}
		return
	}
	rem := func(t float64) uint64 { return math.Float64bits(t - math.Floor(t)) }
	if len(p) <= 64 {
		// Few bins: hand the units out one by one to the largest remainder
		// not served yet (ties to the lower index), O(units·d) ≤ O(d²).
		var served uint64
		for ; units > 0; units-- {
			best, bestR := -1, uint64(0)
			for i, t := range p {
				if served&(1<<i) == 0 {
					if r := rem(t); best < 0 || r > bestR {
						best, bestR = i, r
					}
				}
			}
			served |= 1 << best
		}
		for i, t := range p {
			n := math.Floor(t)
			if served&(1<<i) != 0 {
				n++
			}
			p[i] = n / qf
		}
		return
	}
	// Largest T with #{i : rem_i ≥ T} ≥ units, searched between the smallest
	// and largest remainder. Invariant: count(≥ lo) ≥ units (count(≥ min) =
	// d), count(≥ hi) < units (hi is above every remainder). The search may
	// stop early at a T with count(≥ T) = units exactly: the units then go to
	// the remainders ≥ T, which is the same set (no tie straddles T).
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for _, t := range p {
		r := rem(t)
		lo, hi = min(lo, r), max(hi, r)
	}
	hi++
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		var c int64
		for _, t := range p {
			if rem(t) >= mid {
				c++
			}
		}
		if c >= units {
			lo = mid
			if c == units {
				break
			}
		} else {
			hi = mid
		}
	}
	thr := lo
	// count(> T) < units ≤ count(≥ T) (after an early stop count(≥ T) =
	// units): the remainders above T all get a unit, and those equal to T
	// (≥ 1 of them) the rest, in index order.
	ties := units
	for _, t := range p {
		if rem(t) > thr {
			ties--
		}
	}
	for i, t := range p {
		n := math.Floor(t)
		if x := rem(t); x > thr || x == thr && ties > 0 {
			if x == thr {
				ties--
			}
			n++
		}
		p[i] = n / qf
	}
}

// roundRelease rounds a floating-point draw (finite entries ≥ 0 summing to
// 1 within 1e-12) to its release grid, ReleaseGrid(len(out)). Every Release
// of a mechanism sampled in floating point ends with it.
func roundRelease(out []float64) { roundToGrid(out, ReleaseGrid(len(out))) }

// Unrounded is implemented by the mechanisms whose Release rounds a
// floating-point draw to the release grid (dirichlet in every calibration,
// simplex-dirichlet, and SimplexAverage): ReleaseUnrounded writes the draw
// before the rounding, with the same arguments, validation and randomness.
// It is for offline simulation of the papers' continuous mechanisms and for
// tests: its low-order bits identify the shapes it was drawn
// from (see "Release grid" in the package documentation), so its output
// must never be published.
type Unrounded interface {
	ReleaseUnrounded(rng *Rand, counts []float64, out []float64) error
}

// ReleaseGridRho is ρ, the relative deviation of a grid cell's probability
// under the floating-point sampler from the ideal mechanism's, per Gamma
// coordinate, that the stage assumes and charges ("Release grid" in the
// package documentation: measured |R| ≤ 5·10⁻⁶ at Q = 10⁶, falling like 1/Q
// to a floor near 10⁻⁶; 10⁻⁵ is taken for every grid the stage uses).
const ReleaseGridRho = 1e-5

// Rounded reports whether releases of kind are floating-point draws rounded
// to the release grid ([RoundToGrid]): their privacy loss is the ideal
// mechanism's plus the grid residual ([GridResidualRDP],
// [GridResidualDP]). The integer samplers (gaussian, laplace — and
// laplace-posterior, built on laplace noise) and ehd/ehds (a choice among
// public candidates) are exact and carry no residual.
func Rounded(kind Kind) bool { return kind == Dirichlet || kind == SimplexDirichlet }

// GridCoordinates is k, the number of Gamma coordinates whose shape can
// differ between neighbours for a count vector with sensitivity s: counts
// are integers, so a coordinate that changes changes by at least 1 and
// contributes at least 1 to both ‖x − x′‖₁ and ‖x − x′‖₂², hence
// k ≤ min(Δ1, Δ2²), rounded up. 0 when neither is positive (no bound: the
// caller must refuse).
func GridCoordinates(s Sensitivity) float64 {
	k := math.Inf(1)
	for _, v := range []float64{s.L1, s.L2Sq} {
		if v > 0 && !math.IsInf(v, 1) {
			k = math.Min(k, math.Ceil(v))
		}
	}
	if math.IsInf(k, 1) {
		return 0
	}
	return k
}

// GridResidualRDP is the RDP the release grid adds at order λ to a rounded
// release (Dirichlet, every calibration) whose neighbours change k Gamma
// coordinates ([GridCoordinates]):
//
//	e_k(λ) = k·[λ·log(1+ρ) − (λ−1)·log(1−ρ)]/(λ−1),   ρ = ReleaseGridRho.
//
// Derivation (the hybrid of "Release grid"). Let P′, Q′ be the released
// cell probabilities under neighbours x, x′ and P, Q those of the hybrids
// whose k changed coordinates are drawn by the ideal Gamma sampler (the
// unchanged coordinates are the same sampler in both worlds). Swapping one
// coordinate multiplies every cell's probability by a factor in
// [1−ρ, 1+ρ], so cellwise P′ ≤ (1+ρ)^k·P and Q′ ≥ (1−ρ)^k·Q. With λ > 1,
// x ↦ x^λ is increasing and x ↦ x^(1−λ) decreasing, so
//
//	Σ P′^λ·Q′^(1−λ) ≤ (1+ρ)^(kλ)·(1−ρ)^(−k(λ−1))·Σ P^λ·Q^(1−λ),
//
// and taking log/(λ−1): D_λ(P′‖Q′) ≤ D_λ(P‖Q) + e_k(λ). D_λ(P‖Q) is at most
// the sum of the changed coordinates' Gamma divergences (independence,
// then data processing through the normalization and the rounding), which
// is what the mechanism's RDP curve bounds. Issue #21 states the same term
// with ρ′ = (1+ρ)^k − 1 in place of both factors; since (1−ρ)^k ≥ 1 − ρ′,
// that form is an upper bound of this one (they differ by O(k²ρ²)), and it
// becomes vacuous at ρ′ ≥ 1 where this one stays finite. e_k is linear in
// k, so the residuals of windows changing k₁ and k₂ coordinates add to
// that of k₁ + k₂ (plan's cross-window bound relies on it).
//
// The value is inflated by a relative 10⁻¹² (rounding). k ≤ 0, λ ≤ 1 or
// NaN give +Inf (no bound).
func GridResidualRDP(order, k float64) float64 {
	if !(order > 1) || !(k > 0) || math.IsInf(order, 1) || math.IsInf(k, 1) {
		return math.Inf(1)
	}
	rho := ReleaseGridRho
	return residualUp(k * (order*math.Log1p(rho) - (order-1)*math.Log1p(-rho)) / (order - 1))
}

// residualUp inflates a residual computed in floating point by a relative
// 10⁻¹², far above the few ulps of its logs and divisions, so that what is
// charged is never below the exact value.
func residualUp(x float64) float64 { return x * (1 + 1e-12) }

// GridResidualDP is the (ε, δ) of a rounded release of an (epsilon,
// delta)-DP mechanism over d Gamma coordinates that all may change between
// neighbours (the average kind: the padded mean moves every bin): for a
// union S of grid cells, with P, P̃ the ideal mechanism's probabilities
// under neighbours and P′, P̃′ the sampler's, the hybrid of
// [GridResidualRDP] gives P′(S) ≤ (1+ρ)^d·P(S) ≤ (1+ρ)^d·(e^ε·P̃(S) + δ)
// ≤ (1+ρ)^d·(e^ε·(1−ρ)^(−d)·P̃′(S) + δ), so the release is
//
//	(ε + d·log((1+ρ)/(1−ρ)),  δ·(1+ρ)^d)-DP
//
// (ε + ≈2dρ; issue #21's "ε + 2dρ"). Both are rounded up (the residual
// parts inflated by a relative 10⁻¹²). d < 1 or an
// invalid (ε, δ) give (+Inf, 1).
func GridResidualDP(epsilon, delta float64, d int) (float64, float64) {
	if d < 1 || !(epsilon >= 0) || math.IsInf(epsilon, 1) || !(delta >= 0 && delta < 1) {
		return math.Inf(1), 1
	}
	rho := ReleaseGridRho
	n := float64(d)
	e := epsilon + residualUp(n*(math.Log1p(rho)-math.Log1p(-rho)))
	dl := delta * GridResidualDeltaFactor(d)
	return math.Nextafter(e, math.Inf(1)), math.Min(1, dl)
}

// GridResidualDeltaFactor is (1+ρ)^d rounded up: the factor the release
// grid's residual multiplies an (ε, δ) mechanism's δ by over d changed
// coordinates ([GridResidualDP]).
func GridResidualDeltaFactor(d int) float64 {
	return residualUp(math.Exp(float64(d) * math.Log1p(ReleaseGridRho)))
}
