// Package mechanism turns a window's count vector into a private normalized
// histogram. Every mechanism the stage can use implements [Mechanism]:
// calibrated once from a [Spec] (a target (λ, ε)-RDP and the sensitivities the
// caller derived from its contribution bounds) by [New], then released many
// times, and able to report its whole RDP curve ε(λ′) so that the budget
// accountant can compose releases at every order. Randomness comes from a
// per-goroutine [Rand] (ChaCha8 keyed from crypto/rand); seeds exist for
// tests and simulations only.
//
// # Papers
//
// Cited by file in shared/papers:
//   - 000: Ponnoprat, Differential Privacy of Dirichlet Posterior Sampling —
//     Theorem 2 / eq. (8), eq. (9), Corollary 3 / eq. (10), eq. (19)
//     (Appendix A.1), eq. (5) (bounds on ψ′).
//   - 001: Ponnoprat, Dirichlet Mechanism for Differentially Private KL
//     Divergence Minimization — Algorithm 1, Lemma 2 (Appendix D), Remarks
//     1–2, Appendix E (proof of Theorem 1).
//   - CKS20: Canonne, Kamath, Steinke, The Discrete Gaussian for Differential
//     Privacy, NeurIPS 2020 (arXiv:2004.00010) — Algorithms 1–3 (exact
//     samplers), the concentrated-DP guarantee of the discrete Gaussian.
//   - Mironov 2017, Rényi Differential Privacy (CSF 2017) — RDP of the
//     Laplace mechanism (Proposition 6, Table II), used as a cross-check.
//
// # Dirichlet mechanism
//
// A release is one draw y ~ Dir(r·x + α·1) for counts x ∈ ℝ^d_{≥0}, d ≥ 2.
// For neighbouring count vectors with Σ_i (x_i − x′_i)² ≤ Δ2² and
// max_i |x_i − x′_i| ≤ Δ∞, 000 Corollary 3 (Theorem 2 with x → r·x) bounds
// the Rényi divergence at every order λ′ ∈ (1, α/(rΔ∞) + 1):
//
//	ε(λ′) = ½·λ′·r²·Δ2²·ψ′(α − (λ′−1)·r·Δ∞)                    (000 eq. (10))
//
// where ψ′ is the special.Trigamma function. Three calibrations solve (r, α) from a
// target (λ, ε):
//
//   - concentrated (000 eq. (8)): r = 1, α the root of
//     ½λΔ2²ψ′(α − (λ−1)Δ∞) = ε, unique because ψ′ decreases strictly from +∞
//     to 0; bracketed by 000 eq. (5), 1/s + 1/(2s²) < ψ′(s) < 1/s + 1/s², and
//     bisected to adjacent floats.
//   - closed-form (000 eq. (9)): r = 1, α = λΔ2²/(2ε) + (λ−1)Δ∞ + 1.
//   - diffuse (001 Algorithm 1, Remark 2): r the root of
//     ε = ½λr²Δ2²ψ′(1 + rb + 3(λ−1)rΔ∞), α = 1 + 4(λ−1)rΔ∞, where b ≥ 0 is a
//     known lower bound on every count (0 if none). The left side is
//     increasing in r (001 Lemma 2; the proof holds verbatim for the slope
//     b + 3(λ−1)Δ∞), so the root is unique.
//
// With a lower bound b every shape is ≥ α + r·b, and the proof of 000
// Theorem 2 only ever uses the smallest shape: the curve above holds with α
// replaced by α_eff = α + r·b (derivation in the doc of dirichletRDP). At the
// diffuse calibration order this reproduces Remark 2's equation exactly.
//
// Whatever the calibration, the mechanism reports the Corollary 3 curve of its
// (r, α_eff), so RDP(λ) ≤ ε at the calibration order (equality up to rounding
// for concentrated and diffuse, strict for closed-form), MaxOrder() is
// α_eff/(rΔ∞) + 1, and RDP is +Inf from there on. The calibrations finish by
// moving the parameter by a few ulps if needed so that RDP(λ) ≤ ε holds
// exactly in float64.
//
// The exact divergence between the two Dirichlets is 000 eq. (19), exported
// as [DirichletRenyi]; the tests check the bound against it on random
// neighbours.
//
// One bound for several histograms: the proof of 000 Theorem 2 (Appendix A.1)
// ends with D_λ < ½λ·Σ_i (x_i − x′_i)²·ψ′(α − (λ−1)Δ∞), whose ψ′ factor
// depends only on Δ∞. So when one user's contributions are spread over
// several groups' count vectors, each released by its own draw, the sum of
// the divergences is at most ½λ·(Σ_g ‖Δ_g‖₂²)·ψ′(…) ≤ ε(λ) as long as the total
// squared ℓ2 change is ≤ Δ2² and every coordinate change is ≤ Δ∞: one
// histogram's release per window costs one ε(λ) however its groups split.
// The same holds for the Gaussian (divergences add, ‖·‖₂² adds) and the
// Laplace (a separable convex loss; see laplaceVectorRDP).
//
// Sampling: independent Gamma(shape_i, 1) variates (Marsaglia–Tsang for shape
// ≥ 1), normalized by a block-compensated sum; when a shape is < 1 the
// variates are drawn as logarithms (log G(a) = log G(a+1) + log(U)/a) and
// normalized by log-sum-exp. The draw is finite, > 0 (entries below 2^-1022
// are reported as 2^-1022) and sums to 1 within ~3e-14, for any d. The
// sampler is a floating-point one, as the papers' mechanism is continuous;
// only the baselines below have exact integer samplers. Release rounds the
// draw to a public grid (next section); ReleaseUnrounded ([Unrounded])
// gives the draw itself, for offline simulation and tests only.
//
// # Release grid
//
// The problem. The floating-point draw is not a sample of Dir(u) but of a
// discrete distribution whose support depends on u. A Gamma(a, 1) variate
// is G = d·(1 + c·z)³ (d = a − 1/3, c = 1/√(9d)) of a normal z from
// math/rand/v2's ziggurat, and outside the ziggurat's tail (|z| > 3.44,
// probability 5.8·10⁻⁴) z is exactly float64(j)·float64(wn[i]): a 32-bit
// integer times one of 128 float32 table entries. Inverting G under a
// candidate shape and checking for such a product identifies the shape:
// TestSamplerLatticeIdentifiesShape reproduces 100% of 20,000 raw draws from
// the true shape a and 0.015–0.4% from a + 1 (shapes 1.5 to 6·10⁴), and
// TestReleaseGridHidesShape does the same to the values the release path
// returned before rounding, for an attacker who knows the other bin's
// variate (two bins; concentrated, exact, diffuse, α ≈ 6·10⁴, the average
// kind): 2000 of 2000 releases explained by a, 0–15 by the neighbouring
// shape. So one unrounded release distinguishes neighbours with a likelihood
// ratio of 10²–10⁴ whatever ε was calibrated; without the other variate the
// search is larger (issue #15 estimates about 2³⁸ candidates per release for
// an attacker who knows the other bins' counts; not measured here) but the
// leak is the same. Post-processing
// does not apply: the analysis is of Dir(u), not of this lattice.
//
// The mitigation. Every Release whose draw is floating point — dirichlet in
// every calibration (exact included), simplex-dirichlet and
// [SimplexAverage] (the stage's average kind) — ends with [RoundToGrid] at
// q = [ReleaseGrid](d): probabilities n_i/Q with integers n_i ≥ 0,
// Σ n_i = Q exactly, |n_i − Q·p_i| < 1 (largest remainder). Q is 10⁴ for
// d ≤ 100, 10⁵ for d ≤ 1000 and 10⁶ beyond. The release is a deterministic
// function of the draw, so all an observer learns is the grid cell (the set
// of draws that round to n) the draw fell in. The mechanisms with exact
// integer samplers need no grid: the gaussian and laplace baselines'
// probabilities are ratios of integers (noisy counts), laplace-posterior's
// posterior_alpha is the public prior plus integers, and ehd/ehds release one
// of a public finite set of candidates.
//
// Why the cell hides the lattice (heuristic, measured; not a proof). Fix
// every coordinate but one, i; as coordinate i's normal z_i moves, the
// release moves monotonically, so the cell's fibre along z_i is an interval
// (a few intervals at most). The sampler's probability of that fibre is a
// sum over the lattice points of each of the 128 strips in it, with weights
// (rectangle 1, wedge acceptance, Marsaglia–Tsang acceptance) that vary
// smoothly: a Riemann sum of the ideal Gamma density, wrong by at most one
// point per strip per end. So the sampler's cell probability is the ideal
// one times (1 ± ρ) with ρ of the order of the lattice step over the cell
// width, plus the deviation of the ziggurat's float32 tables from the
// normal density. Q must therefore be coarse next to the lattice, for every
// shape the stage uses, and fine enough for the histograms (a step of at
// most 1% of the uniform share 1/d up to 10⁴ bins).
//
//   - Lattice steps per grid step (TestLatticeStepsPerCell, 20,000 draws
//     per scenario, the coarsest strip's spacing 1.7·10⁻⁹): at least
//     3.2·10⁴ in every scenario — d = 2 at α = 1 (the smallest), α = 3.46
//     (4·10⁵), α = 0.6 through the shape boost (the uniform's 2^-53 grid:
//     ≥ 9·10⁵), α ≈ 6·10⁴ (8.8·10⁷), d = 100, 1000, 1001 and 10⁴ with one
//     bin holding a quarter of the mass (the worst case of a bound on the
//     step: ≥ 5.3·10⁴ at d = 1001, Q = 10⁶), and the average kind (≥ 2.4·10⁵).
//   - The cell's likelihood ratio itself (TestGridCellLikelihoodRatio: every
//     lattice point of a cell enumerated, two bins, the second variate known,
//     shapes a and a + 1): the sampler's ratio is the ideal one times 1 + R
//     with |R| = 3.3·10⁻⁴ at Q = 10⁸ (≥ 7·10³ points per cell), 3.2·10⁻⁵ at
//     10⁷, 5·10⁻⁶ at 10⁶ (1.5·10⁻⁴ at 10⁷ for shapes 1.2 and 2.2); at
//     Q = 10¹¹ (3 points per cell) it is off by a factor 3. |R| falls like
//     1/Q to a floor near 10⁻⁶ (the tables), so at the stage's grids ρ is
//     taken as 10⁻⁵, a factor ~10 above the extrapolation. Enumerating a cell
//     at Q = 10⁴ (~10⁸ points) is too slow for the tests; that value is
//     extrapolated.
//
// What it costs. If every cell's probability is the ideal one's times
// (1 ± ρ) per coordinate, then for neighbours that change k coordinates
// (the bins one user's events move) replace those k coordinates' sampler by
// the ideal Gamma one at a time (the other coordinates are the same in both
// worlds): the cell probabilities are those of a hybrid with the k
// coordinates ideal, times a factor in [(1−ρ)^k, (1+ρ)^k]. The hybrid's
// divergence is at most Σ over the changed coordinates of
// D_λ(Gamma(u_i) ‖ Gamma(u′_i)) (data processing), which is exactly what 000
// Theorem 2's bound (its proof drops eq. (20)'s total term, see Appendix
// A.1) and the exact calibration (exact.go, step (1)) bound; rounding cannot
// increase it. So ([GridResidualRDP] has the exponent bookkeeping)
//
//	D_λ(released ‖ released′) ≤ RDP(λ) + k·[λ·log(1+ρ) − (λ−1)·log(1−ρ)]/(λ−1),
//
// about (2λ−1)/(λ−1)·kρ: 6·10⁻⁵ per release at λ = 2, k = 2, ρ = 10⁻⁵.
// (Issue #21 writes it with ρ′ = (1+ρ)^k − 1 for both factors, an upper
// bound of this.) For the average kind, whose neighbours move all d
// coordinates and whose guarantee is (ε, δ): P(S) ≤ (1+ρ)^d·(e^ε·P′(S) + δ)
// with P′(S) ≤ (1−ρ)^(−d) times the sampler's gives
// (ε + d·log((1+ρ)/(1−ρ)), δ·(1+ρ)^d) ≈ (ε + 2dρ, δ·(1 + dρ))
// ([GridResidualDP]). These additions ARE charged (issue #21; before, the
// accountant composed the ideal curves only): budget.ChargeOf adds
// [GridResidualRDP] to every count release of a [Rounded] kind, the plan
// charges an average release [GridResidualDP], and every planner calibrates
// with them. The residual does not shrink with the noise, so it bounds the
// number of releases a period can afford: 34,560 releases of k = 2 compose
// to ε ≈ 1.39 at δ = 10⁻⁶ on their residual alone. What is charged is
// ρ = [ReleaseGridRho], the assumed value below — not the measured floor
// near 10⁻⁶, which is not proven.
//
// What is proven, measured and assumed. Proven (and tested): RoundToGrid's
// sum and displacement; that the release path rounds every floating-point
// draw (TestReleaseGrid, and end to end in the pipeline); the hybrid
// algebra above given the per-cell relation. Measured: the identification
// before rounding; the lattice steps per grid step; the per-cell ratio for
// two bins at grids 10⁶–10⁸. Assumed: that the per-cell relation with
// ρ = 10⁻⁵ holds for every cell at the stage's grids — including cells the
// enumeration did not reach: d > 2 (the fibre argument is the same, not
// enumerated), the shape-boost path (steps measured, cells not
// enumerated), the ziggurat's tail (values from the log of a 2^-53-grid
// uniform, a finer lattice, not enumerated), and cells where every variate
// is tiny (where the lattice step in p grows; never observed below
// 3·10⁴ steps per grid step); and that the float32 tables' deviation from
// the normal density is as small as the measured floor (~10⁻⁶, not
// bounded). A failure on a set of cells of small ideal probability τ would
// add τ to δ after conversion, which is not accounted for.
//
// Consequences for users: released probabilities are multiples of 1/Q, and
// a bin whose share is below about 1/(2Q) can be released as exactly 0 (so
// a consumer that takes logarithms should floor at, e.g., 1/(2Q); the
// unrounded draw was > 0). The rounding error, at most 1/Q per bin, is
// below the mechanisms' own noise except for very concentrated releases.
//
// # Gaussian and Laplace baselines
//
// Both add integer noise to integer counts with the exact samplers of CKS20
// (Algorithm 1: Bernoulli(exp(−γ)) for rational γ; Algorithm 2: discrete
// Laplace; Algorithm 3: discrete Gaussian), which use no floating point and so
// are immune to the floating-point attacks on textbook samplers. The noise
// scale is rounded up to a dyadic rational (relative change ≤ 2^-40 except for
// σ below ~2^-9, and never above 2^-21) and the reported RDP is that of the
// rounded scale. The noisy counts are clipped at 0
// and renormalized (all zero → uniform); entries may be exactly 0.
//
//   - Gaussian: σ² = λΔ2²/(2ε) (solving λΔ2²/(2σ²) = ε); ε(λ′) = λ′Δ2²/(2σ²)
//     at every order, valid for the multivariate discrete Gaussian (CKS20).
//   - Laplace: the exact RDP of the discrete Laplace (closed form from three
//     geometric series, see discreteLaplaceRDP), maximized over the integer
//     changes allowed by (Δ1, Δ∞) — ⌊Δ1/Δ∞⌋ coordinates at Δ∞ and the
//     remainder in one more, since the per-coordinate loss is convex — and
//     the scale found by root finding. Mironov 2017's continuous-Laplace
//     formula has the same shape but smaller weights and under-states the
//     discrete Laplace's divergence, so it is not used for calibration.
//
// The Laplace baseline also exposes its noisy counts before projection
// ([CountReleaser]); [CountPosterior] turns them into a private Dirichlet
// posterior (the stage's laplace-posterior) with the same RDP curve.
//
// # Errors
//
// Every exported function validates its input and returns a *[ParamError]
// matching [ErrInvalidParameter]; none panics or returns NaN. Mechanism.RDP
// has no error result: it returns +Inf (the conservative "no bound") for
// orders outside (1, MaxOrder()), NaN and ±Inf included.
package mechanism
