// Package budget accounts for the privacy loss of the stage's releases in
// Rényi differential privacy (RDP) and converts it to (ε, δ)-DP.
//
// Every release's mechanism reports its whole RDP curve λ ↦ ε̂(λ); the package
// evaluates it on a fixed grid of orders ([DefaultOrders] plus the
// calibration order, [WithOrder]) as a [Curve]. Composition adds curves order
// by order ([Curve.Add], [Curve.Scale]; 000 Lemma 2, 001 Lemma 1), and the
// composed curve is converted to (ε, δ)-DP by minimizing the conversion of
// 000 Lemma 1 eq. (2) (the bound of Canonne–Kamath–Steinke 2020; the same
// formula is 000 eq. (11) and, solved for ε, 001 eq. (14)) over every order
// of the grid ([ToEpsilon], [ToDelta]).
//
// What a release is charged is [ChargeOf]: the mechanism's curve rounded
// up (mechanism.UpperRDPOf: never below the exact value of the mechanism's
// formula at any order, whatever the floating-point rounding; issue 28)
// plus, for
// a mechanism whose releases are floating-point draws rounded to the public
// release grid (Dirichlet, every calibration), the grid residual
// [GridResidual] (mechanism.GridResidualRDP has the derivation). The
// planners compose that charged curve, so what is planned is what the book
// is charged (issue #21).
//
// On top of that:
//   - [DirichletDelta] is 000 Theorem 4: the δ of one Dirichlet draw at a
//     given ε, minimizing h(λ) of eq. (13) over the whole open interval
//     (1, α_m/Δ∞ + 1) rather than over a grid;
//   - [Accountant] tracks the RDP spent in one budget scope and period and
//     refuses ([ExceededError]) a release that would push the total past the
//     (ε, δ) limit;
//   - [NewPlan] is the planner the stage uses to "allocate RDP per window":
//     the largest per-release RDP target whose composition over a period
//     still converts to at most the period's (ε, δ).
//
// Papers (shared/papers): 000 is Ponnoprat, Differential Privacy of Dirichlet
// Posterior Sampling; 001 is Ponnoprat, Dirichlet Mechanism for
// Differentially Private KL Divergence Minimization.
//
// Conservativeness: wherever the package has to guess (a NaN or negative RDP
// value reported by a mechanism, an order beyond a mechanism's MaxOrder), it
// assumes +Inf, so that privacy loss is never under-reported. Every δ or ε it
// returns is the value of the cited bound at an actual order, so it is a
// valid guarantee even when the minimization is not exact.
package budget
