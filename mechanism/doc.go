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
// where ψ′ is the trigamma function. Three calibrations solve (r, α) from a
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
// normalized by log-sum-exp. Outputs are finite, > 0 (entries below 2^-1022
// are reported as 2^-1022) and sum to 1 within ~3e-14, for any d. The sampler
// is a floating-point one, as the papers' mechanism is continuous; only the
// baselines below have exact integer samplers.
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
