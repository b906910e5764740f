// Package interval computes, for every bin of a release, a confidence
// interval for the bin's true share x_i/N of the window's counted
// contributions (after bounding), and the interval of the window's total
// N — from the release, its private total and public parameters only
// (post-processing: nothing here reads a count, and nothing is charged).
// It sits below release/ and imports no package of the stage.
//
// The intervals are per bin (marginal), like Google's DP library's
// ConfidenceInterval per noisy count: each holds its bin's true share with
// probability about the level (output.interval_level, default 0.95), not
// all bins at once. They are measured, not only derived: coverage_test.go
// sweeps every mechanism × N × truth through the real samplers and
// calibrations (the table is in docs/intervals.md).
//
// # Additive mechanisms (gaussian, laplace, laplace-posterior)
//
// The release is a function of the noisy counts x̃_j = x_j + Z_j, Z_j
// i.i.d. discrete Gaussian N_Z(0, σ²) or discrete Laplace Lap_Z(b) (public
// σ or b); laplace-posterior's α̃ is computed from the same x̃ as the
// laplace baseline's (000 §4, 002 LSHist). Let t = Σ_j x̃_j, d bins,
// v = Var Z. For bin i and a candidate share s,
//
//	x̃_i − s·t = (x_i − s·N) + (1−s)·Z_i − s·Σ_{j≠i} Z_j,
//
// and at the true share (x_i = s·N) it is the pivot W(s) = (1−s)·Z_i −
// s·Σ_{j≠i} Z_j, of known law and variance v·(1 − 2s + d·s²). The interval
// is the set of s ∈ [0, 1] not rejected, {s : |x̃_i − s·t| ≤ κ(s)·√(v·(1 −
// 2s + d·s²))} (Fieller's construction for a ratio; additive.go): it
// holds the true share exactly when |W(s)| ≤ κ(s)·sd, so with probability
// the level whatever N, x and the projection (clipping at 0 and dividing
// by the clipped sum is applied to the published probabilities only; the
// intervals use x̃ before it). κ(s) is the pivot's quantile: for the
// Gaussian the normal z_{(1+level)/2} (a sum of independent Gaussians,
// the discrete ones up to their lattice: variance ≤ σ², CKS20); for the
// Laplace the quantile of a weighted sum of Laplace variables, computed
// exactly from their normal-variance-mixture form (laplace.go) — the
// normal quantile would under-cover by up to 1.3 points where bin i's own
// noise dominates (W ≈ Laplace, whose 95% quantile is 2.12 sd, not 1.96).
// Where the set is empty within [0, 1] (probability ≤ 1 − level) the
// interval is the point of [0, 1] nearest to x̃_i/t.
//
// The total is t (clamped at 0) with the interval t ± κ_T·√(d·v), κ_T the
// quantile of Σ_j Z_j, rounded inward to whole numbers: free, since x̃ is
// already drawn and charged.
//
// # Charged totals (dirichlet, average)
//
// A Dirichlet or average release has no noisy counts, so each release
// carries a charged count ñ = n + Z, Z ~ N_Z(0, σ_T²) from the exact
// discrete Gaussian sampler: n the (histogram, group) window's counted
// events (dirichlet), or the average histogram's kept users (average).
// Its interval is ñ ± z·σ_T over the whole numbers of [0, max] (Count;
// max = average.users for the average kind). Its sensitivity and charge
// are plan's (plan.TotalPlan).
//
// # Dirichlet releases (every calibration)
//
// y ~ Dir(r·x + α) over d bins (000 eq. (4), scaled as in Corollary 3; r,
// α public, in params), rounded to multiples of 1/Q (mechanism's "Release
// grid": the unrounded draw y′ has |y_i − y′_i| < 1/Q). By the Dirichlet's
// aggregation property bin i's marginal is
//
//	y′_i ~ Beta(a, b),  a = r·s·N + α,  b = r·(1−s)·N + (d−1)·α,  s = x_i/N,
//
// stochastically increasing in s for a fixed N. If N were known, the exact
// interval would be the test inversion {s : P(Y ≥ y_i − 1/Q) > β/2 and
// P(Y ≤ y_i + 1/Q) > β/2}, β = 1 − level (the ±1/Q makes each tail a
// bound for the unrounded draw's, so the rounding can only widen it). N is
// private; the stage never uses it here. It is replaced by the release's
// private total: each tail probability is averaged over the total's
// confidence distribution N ~ ñ − Z, Z ~ N(0, σ_T²) (clamped to N ≥ 0; a
// 10-node Gauss–Hermite rule), and the interval inverts these averaged
// tails (beta.go). Why averaging rather than a union over N in the
// total's own interval with the level split (a Bonferroni bound): where
// N's uncertainty matters — N of a few times d·α — the union widens each
// end by the worst N of that interval: at N = 100 (concentrated, the
// sweep's privacy) it covers 97.2% and is 42% wider than the averaged
// tails, which cover 94.8% (TestUnionOverCovers), while the average is exact to first order: linearizing the tail in N
// around the true N, the averaged tail compares y_i with the law of
// y_i + c·(Z′ − Z) for the total's own noise Z and an independent copy
// Z′, which is the law y_i has given ñ — so the two errors are accounted
// for once each. It is not a theorem beyond that linearization; the sweep
// measures it (every calibration, N from 30 to 100,000).
//
// # Average releases (kind average)
//
// y ~ Dir(k·p), p = (1 − dη)·p̄ + η, p̄ = (n·a + (users − n)·u)/users the
// padded average of the n kept users' mean vectors a (u uniform; 003
// eq. (1) with the stage's smoothing, mechanism/average.go). The target is
// a_i, the kept users' average share. Bin i's marginal is Beta(k·p_i,
// k·(1 − p_i)), p_i increasing in a_i for n > 0; the interval inverts it
// as above, averaging over the kept-user count's confidence distribution
// (clamped to [0, users]). When every plausible n is 0 the release says
// nothing about a and the interval is [0, 1].
//
// # Cost
//
// An additive release's intervals are closed-form per bin (the Laplace's
// κ table is computed once per bin count and level, in about 50 ms). A
// Dirichlet or average release inverts two mixture tails per distinct
// released value: about 0.1–0.2 ms each on one core, and bins with the
// same value share the inversion — measured 1 ms for 10 bins, 24 ms for
// 1,000, 30 ms for 10,000 and 18 ms for 100,000 bins of small shares
// (whose values on the grid repeat).
//
// # What the intervals are not
//
// They are intervals for the shares of the counted contributions: events
// dropped by bounding, by the window bound or as late are not in N.
// Where a release carries little information (N ≪ d·α, or noise ≫ N) the
// intervals are wide, up to [0, 1], and cover more often than the level;
// a bin whose true share is 0 is covered more often too (its lower end
// sits at 0). See docs/intervals.md for the measured figures.
package interval
