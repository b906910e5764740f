// Package selection decides privately, per window, which groups of a
// histogram with group_by and no listed groups are released: Gaussian
// thresholding of each group key's count of distinct users (issue 30).
//
// # The mechanism
//
// Fix one histogram and one window. After bounding (package aggregate:
// each user's events count toward at most l0 = max_groups_per_user groups
// of the histogram per window, ranked by a keyed hash of the user's own
// events, and in at most K windows of the budget period, the histogram's
// cross-window bound), let c_g be the number of distinct users with a
// counted event in group key g. For every key g seen in the window (c_g ≥ 1)
// the stage draws Z_g ~ N_Z(0, σ²), the exact discrete Gaussian (CKS20;
// mechanism's sampler, a cryptographically secure source), independently,
// and selects g iff c_g + Z_g ≥ T, T a whole number. Only the selected keys
// leave the window (their releases are made, the others' are not), and the
// noisy counts themselves are never published.
//
// # Privacy of one window
//
// Add/remove: D′ = D plus user u. Split the keys of D′ into the common
// keys (seen in D, c_g ≥ 1 there) and u's exclusive keys (c_g = 1 in D′, 0
// in D); u has at most l0 keys in the window, so at most l0 exclusive ones.
// Write q = P[1 + Z ≥ T] (PassProbability(1)) and
//
//	p = P[some exclusive key is selected] = 1 − (1 − q)^e ≤ 1 − (1 − q)^{l0} = δ_w,
//
// e ≤ l0 the exclusive keys (the Z_g are independent). Because the
// exclusive keys' noise is independent of the common keys', the output on D′
// is the mixture M(D′) = (1 − p)·A + p·B, where A is the law of the
// selection among the common keys alone and B some other law; and M(D) =
// (1 − p)·M(D) + p·M(D) trivially. A and M(D) are the same thresholding of
// the same keys whose distinct-user counts differ by at most 1 in at most
// l0 coordinates (u's common keys), so they are post-processings of the
// vector Gaussian mechanism with ‖Δ‖₂² ≤ l0:
//
//	D_λ(A ‖ M(D)), D_λ(M(D) ‖ A) ≤ λ·l0/(2σ²)
//
// (CKS20's multivariate discrete Gaussian, as mechanism/additive.go cites
// it; thresholding and dropping the noisy counts is post-processing).
//
// That is δ-approximate RDP (Bun and Steinke 2016, §8, approximate zCDP,
// with the Rényi curve in place of the linear one) with
// δ = δ_w and the Gaussian's curve: both outputs are (1 − δ_w, δ_w)
// mixtures whose main parts are λ·l0/(2σ²)-close in every order λ
// (padding p up to δ_w: (1−p)A + pB = (1−δ_w)A + δ_w·[((δ_w−p)A + pB)/δ_w]).
//
// Replace: u in D replaced by u′ in D′. Now both sides have exclusive keys
// (u's with c_g = 1 in D, u′'s in D′), each side's at most l0, so each side
// is a (1 − δ_w, δ_w) mixture as above — δ_w is the larger of the two sides'
// weights, not their sum, so the per-window δ term does not double. The
// main parts differ by −1 on u's common keys and +1 on u′'s: ‖Δ‖₂² ≤ 2·l0,
// so the curve doubles: λ·2l0/(2σ²) (the Gaussian's Δ2² = 2m² of
// plan.DeriveSensitivity, with m = 1 user per group).
//
// # A period: composition over windows and histograms
//
// Approximate RDP composes adaptively, curves adding and δ's adding (Bun
// and Steinke 2016, §8; the argument is order by order, so it holds for
// an RDP curve as for zCDP's linear one): the product of the windows'
// mixtures is a mixture whose main part has weight at least
// Π(1 − δ_w) ≥ 1 − Σδ_w, and on it the curves add (000 Lemma 2). Per selecting histogram with W windows a period
// and the cross-window bound K (K′ = min(K, W); package plan, "The
// cross-window bound": a user's admitted windows depend on that user's own
// events only, so other users' inputs are equal in every other window):
//
//   - add_remove: the windows whose input differs are among u's ≤ K′
//     admitted ones: curve K′·λ·l0/(2σ²), δ K′·δ_w;
//   - replace: u's admitted windows S and u′'s S′; a window of S ∩ S′ has
//     the replace curve (2l0) and δ_w, one of S △ S′ an add/remove change
//     (curve l0, δ_w). With a = |S ∩ S′|: curve ≤ a·2l0 + (2K′ − 2a)·l0 =
//     K′·2l0 — the replace curve over K′ windows, doubled — and δ ≤
//     |S ∪ S′|·δ_w ≤ min(2K, W)·δ_w: the δ term doubles with the bound (the
//     two users can be admitted to disjoint windows), as the average
//     histograms' releases do (plan.WindowBound.AverageReleases); the
//     key-count test's curve (sensitivity l0 under either relation)
//     likewise changes in every window of S ∪ S′: min(2K, W)·λ·l0²/(2σ_k²);
//   - without the bound (K = 0): every window, W·(curve) and W·δ_w.
//
// [Period] holds these counts (Units for the curve, DeltaUnits for δ_w) and
// [Threshold.Charge] returns the composed curve and δ. The stage then
// converts the curve at the selection's conversion δ (000 Lemma 1, the
// budget package) and adds the δ term: with B the δ-approximate mixture
// weight, P[M(x) ∈ S] = (1−B)P[M′(x) ∈ S] + B·P[M″(x) ∈ S] ≤
// (1−B)(e^ε P[M′(x′) ∈ S] + δ_conv) + B ≤ e^ε P[M(x′) ∈ S] + δ_conv + B,
// so the period's selection is (ε_sel, δ_conv + Σδ_w)-DP ([Guarantee]).
//
// A group's release (its histogram's count vector, restricted to the
// selected groups) composes with its selection: on the main part of the
// mixture only common keys are selected, and the release mechanisms'
// sensitivities are over all of a histogram's groups at once, so restricting
// them to the selected ones is post-processing; the joint output's δ term
// is the selection's.
//
// # Calibration
//
// [Calibrate] gets the selection's share of the period, (ε_sel, δ_sel), and
// splits δ_sel into the conversion's part (1 − f)·δ_sel and the threshold's
// part f·δ_sel: σ is the smallest for which the composed curve converts to
// ε_sel at (1 − f)·δ_sel, then T is the smallest whole number with
// DeltaUnits·δ_w(T) ≤ f·δ_sel; f is chosen on a grid to minimise T. The
// distinct users at which a group is kept with probability p in a window
// are [Threshold.UsersAt]: about T at ½ and T + 1.645σ at 0.95.
//
// # The batch optimum
//
// [Batch] is the optimal selection of one batch of partitions at (ε, δ)
// when each user is in at most l0 partitions (Desfontaines, Voss, Gipson,
// Mandayam, "Differentially private partition selection", PoPETS 2022,
// arXiv:2006.03684; the DP library's PreAggSelectPartition): a partition
// of n users is kept with probability π_n, π_0 = 0,
//
//	π_n = min(e^ε′·π_{n−1} + δ′, 1 − e^{−ε′}·(1 − π_{n−1} − δ′), 1),
//
// at ε′ = ε/l0 and δ′ = 1 − (1 − δ)^{1/l0}. It is what no (ε, δ) selection
// of a single window can beat; `stage validate` and `stage plan` print it
// beside the stage's thresholds at the same per-window (ε, δ)
// ([Threshold.WindowGuarantee]).
//
// # Group keys per window
//
// The keys and their distinct users come from package aggregate (its
// per-shard key dictionaries: a key is held while some tracked user's kept
// groups include it, at most l0 × the window's tracked users keys) and, in
// the distributed mode, from the merged partials; [Keys] draws the
// selection. A key is tracked iff a public hash of the key alone falls
// below rate·2⁶⁴ (selection.key_sample_rate, package keyhash, applied by
// the decoder; ground rule 7: never which keys came first, or how many),
// so a sampled key's count is exactly its count and the analysis above
// holds for the sampled keys; a key not sampled is never released (its
// cost is accuracy only: a group of any size is missed with probability
// 1 − rate). The limit of keys per window (selection.max_keys_per_window)
// is enforced when the window closes, by a noisy test on the window's
// distinct keys F: the selection is withheld iff F + Z_k ≥ limit,
// Z_k ~ N_Z(0, σ_k²), σ_k = max(limit/100, 3·√l0·σ) ([KeySigmaFor]). One
// user changes F by at most l0 under either relation, so the test adds
// λ·l0²/(2σ_k²) to every window's curve ([Threshold.UnitRDP]), and a
// withheld window is a private output like a selection. Refusing keys once
// a cap is reached would make which keys count depend on which came first
// (and one user's keys could push out a group of thousands: no bounded
// sensitivity), so the stage never does.
package selection
