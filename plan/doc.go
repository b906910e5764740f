// Package plan derives the stage's privacy plan from its configuration:
// the sensitivities of each histogram's count vector (DeriveSensitivity,
// from the contribution bounds and the neighbour relation), the calibrated
// mechanism of every release (count histograms: CountPlan; average
// histograms: AveragePlan), and what one window charges the budget period
// (Charges). It is pure privacy arithmetic: no Kafka, no I/O; `stage
// validate`, `stage plan`, the HTTP API and the running stage all read the
// same Plan.
//
// Invariant: sensitivities are derived from the bounds, never assumed, and
// a planned period — every window's charges composed — converts to at most
// the period's (ε, δ) budget (TestPlannedScheduleFitsTheBook,
// TestWindowBoundScheduleFitsTheBook).
//
// # The cross-window bound (contribution.max_windows_per_user = K)
//
// Admission (aggregate/admission.go): a user's events count only in the K
// earliest windows of the budget period in which the user has an eligible
// event (an event that passed decoding and the arrival rule), for every
// histogram of those windows; the events of its later windows are dropped
// before counting. Which windows a user is admitted to is a function of
// that user's own events (ground rule 7). Let W be the windows of a period
// and K′ = min(K, W).
//
// Claim. Let c_r(λ) and c_a(λ) be one (histogram, window) unit's RDP curve
// of the calibrated mechanism under the replace and the add_remove
// sensitivities (the per-window bound of "What one window charges" below,
// same noise parameters). Then one count histogram's releases of a whole
// period are (λ, ε(λ))-RDP with
//
//	add_remove: ε(λ) = K′·c_a(λ);   replace: ε(λ) = K′·c(λ),  c = max(c_r, 2·c_a),
//
// and H count histograms K′·H times that curve (000 Lemma 2).
//
// Proof. Fix a neighbouring pair of streams D, D′ and an order λ. Every
// other user's admitted windows and bounded contributions are the same in
// D and D′ (they depend on that user's own events only), so a window's
// count vector differs between D and D′ only through the one user that
// differs. The period's releases are independent draws given their inputs
// (one per group and window; the calibration is fixed by the config, not
// by the data), so the Rényi divergence of the whole period is the sum of
// the windows' divergences, and a window whose inputs are equal adds 0.
//
//   - add_remove (D′ = D plus user u): the windows whose inputs differ are
//     among u's admitted windows S, |S| ≤ K′; in each the change is u's
//     bounded contribution added, within the add_remove sensitivities:
//     divergence ≤ c_a(λ). Total ≤ K′·c_a(λ).
//   - replace (u in D replaced by u′ in D′): u is admitted to S, u′ to S′,
//     |S|, |S′| ≤ K′. A window of S ∩ S′ sees x − v + w (≤ c_r(λ)); one of
//     S \ S′ sees only v removed and one of S′ \ S only w added (each
//     ≤ c_a(λ)); the others nothing. With a = |S ∩ S′|,
//     |S △ S′| = |S| + |S′| − 2a ≤ 2K′ − 2a, so the total is at most
//     a·c_r + (2K′ − 2a)·c_a ≤ a·c + (K′ − a)·c = K′·c(λ),
//     since c_r ≤ c and 2·c_a ≤ c.
//
// The per-window curve of each mechanism under both relations:
//
//   - Dirichlet with 000 Corollary 3's curve (concentrated, closed-form,
//     diffuse, optimal off the exact frontier): ½λr²Δ2²ψ′(α − (λ−1)rΔ∞) is
//     linear in Δ2² at equal Δ∞ = m, and replace has Δ2² = 2m², add_remove
//     m²: c_r = 2·c_a = c. The Gaussian's λΔ2²/(2σ²) likewise.
//   - Laplace (and laplace-posterior, its post-processing): the curve
//     n·f(Δ∞) + f(Δ1 − n·Δ∞), n = ⌊Δ1/Δ∞⌋ (mechanism/additive.go), is
//     2·f(m) for replace (Δ1 = 2m) and f(m) for add_remove: c_r = 2·c_a.
//   - Dirichlet exact (and optimal on the exact frontier; unit changes,
//     m = 1): with the per-bin worst cases h₊, h₋ (mechanism/exact.go),
//     c_r = min(h₊ + h₋, C) and c_a = min(max(h₊, h₋), C/2), C the
//     Corollary 3 bound under replace. So c = min(2·max(h₊, h₋), C) > c_r
//     in general: the exact curve of the same (r, α) over every change
//     with at most two unit changes (p + q ≤ 2) — the spec's any-pair
//     relation with the replace sensitivities.
//
// The release grid's residual (mechanism.GridResidualRDP, charged with
// every Dirichlet unit: CountPlan.Charge = curve + e_k) fits the same
// argument: a window whose change moves k coordinates adds e_k(λ), and e_k
// is linear in k. Under add_remove each of the ≤ K′ windows adds e_m; under
// replace the total is a·e_{2m} + (2K′ − 2a)·e_m = 2K′·e_m = K′·e_{2m}, so
// charging each of K′ windows the residual of the replace Δ1 = 2m (what
// the any-pair spec's sensitivity gives) covers it.
//
// The private totals a Dirichlet unit carries (totals.go: the discrete
// Gaussian on its group totals, whose sensitivities are the count
// vector's) add the Gaussian curve λ·Δ2²/(2σ_T²) to CountPlan.Charge; it is
// linear in Δ2², so c_r = 2·c_a for it too and the argument holds for the
// sum. An average unit's total adds λ/(2σ_T²) per release, composed over
// its AverageReleases as its (ε, δ) is.
//
// So under replace with K > 0 the planner calibrates the count mechanism
// on the any-pair relation (mechanism.AnyNeighbour; only the exact curves
// read it), whose curve is exactly c for every kind, and under add_remove
// on its own spec (curve c_a). Either way CountPlan.Charge is the curve a
// window composes and the calibration spreads the budget over
// Units = K′·H of it — not W·H. mechanism/windowbound_test.go checks the
// claim by brute force with the exact divergence (000 eq. (19)) on random
// periods (TestWindowBoundBruteForce) and that the any-pair curve equals
// max(c_r, 2·c_a) for every calibration (TestWindowBoundChargeCurve).
//
// Average histograms (the simplex Dirichlet, (ε_r, δ_r)-DP per release
// whatever the neighbour changes of the padded mean, ≤ 2/users): the
// windows whose input differs are at most K′ under add_remove and
// |S ∪ S′| ≤ min(2K, W) under replace, so a period composes
// WindowBound.AverageReleases releases' (ε_r, δ_r) by basic composition.
//
// # Views: each histogram's own windows and bound
//
// A histogram with its own window (histograms[].window = r_h·window.size,
// dividing the period; W_h = period / window_h windows per period) has its
// own bound K_h (config.Config.HistWindowBound: histograms[].
// max_windows_per_user, else K at window.size; a coarser histogram must
// set it) and K′_h = min(K_h, W_h). Admission is per window size, over that
// size's windows: a user's events count in histogram h only in the K_h
// earliest windows of h's size in the period in which the user has an
// eligible event for a histogram of that size (histograms of one size have
// one bound, so they share the decision, as all histograms share it at
// window.size). That set is again a function of the user's own events, so
// the claim above holds for each histogram over its own windows: the
// period's releases of count histogram h are (λ, K′_h·c(λ))-RDP, c the
// per-window curve (one calibration, and one window of h bounds a user to
// m events over its groups, as a base window does: "Per-histogram windows"
// in Plan). The views' releases are independent draws, so by composition
// (000 Lemma 2) the period costs
//
//	ε(λ) = Σ_h K′_h·c(λ)     (count histograms h)
//
// plus the average histograms' Σ_h AverageReleases_h·(ε_r, δ_r) with
// AverageReleases_h = K′_h (add_remove) or min(2K_h, W_h) (replace). The
// grid residual is inside c (CountPlan.Charge) and linear in k, so each
// view's K′_h windows carry K′_h residuals, as above. The calibration
// spreads the budget over Units = Σ_h K′_h curves, and histogram h's
// reservation is CountPlan.Reservations[h] = K′_h copies of Charge: an hour
// view with K_h = 24 costs 24 windows' curves a day, the same as 24 minute
// windows, but each of its windows counts a user's events of the whole
// hour (still m of them). Neither view's admissions constrain the other's:
// a user can count in K_minute minute windows and K_hour hour windows,
// and both are charged.
//
// Changing one histogram's K_h, or its window, in the middle of a period
// gives its reservation a new key (release.ReservationKey covers K_h and the
// curve), so a new reservation is charged on top: the argument of the
// next section, per histogram. The admission state of a window size is
// kept across such a change (it is monotone: the windows admitted under
// the old K_h count towards the new one).
//
// # Charging: the period reservation
//
// With the bound the period's cost does not grow with the windows
// released, so it is not charged per window. The first unit of histogram h
// in period p under a given configuration charges the book h's whole
// period reservation (CountPlan.Reservation = K′ copies of Charge composed,
// rounded up; for an average histogram AveragePlan.ReserveEpsilon,
// ReserveDelta) before any value of that unit leaves the process; later
// units of (h, p) under the same configuration charge nothing and record
// the reservation that covers them (release/, ledger.Unit.CoveredBy). A
// reservation the book refuses leaves the unit budget_exhausted, as a
// refused per-window charge does. At every point of the period each
// released unit is covered by a reservation made no later than it, and a
// reservation bounds every release it will ever cover, so the book's total
// bounds the period's releases so far and to come.
//
// A reservation is keyed by the histogram and the configuration that
// fixes its cost (K, the neighbour relation, the reservation's curve or
// (ε, δ)). A config change in the middle of a period makes a new key, and
// so a new reservation with its first unit — unless a reservation the
// period holds for the same histogram, window, K_h and neighbour relation
// is at least the new one at every order, which then covers it (release/,
// "Cover by dominance": adding a view lowers every per-window curve, and
// the histograms whose own settings did not change keep releasing); when
// it is not, the new reservation of such a histogram tops the held one up,
// charging only the rise R_new − R_old at the orders where it is positive
// (release/, "Top-up": a user's windows of that admission state lose at
// most K′ times the largest per-window curve, which the running maximum of
// the reservations bounds). That is sound because
// admission is monotone and shared: a user's admitted windows released
// under one configuration are at most that configuration's K, so the
// period's releases split into per-configuration parts each bounded by its
// own reservation, and the reservations add. After a restart the book
// restores which reservations a period holds from the ledger (written in
// the same transaction as the unit that made them), so the later units
// are covered and no reservation is made twice.
//
// # Upgrading across the grid residual (issue #21)
//
// Versions before issue #21 charged a Dirichlet or average release its
// ideal curve or (ε, δ) only; this one adds the release grid's residual
// (mechanism's "Release grid"). A ledger written by an older version
// restores unchanged: its units, spends and reservation keys are read as
// they were recorded, and nothing recorded is rewritten or charged again.
// In the period during which the upgrade happens:
//
//   - with max_windows_per_user (reservations), the reservation's curve
//     changes (the residual, and the recalibration it causes), so its key
//     changes: the first unit after the upgrade tops the old reservation
//     up (release's "Top-up": it charges R_new − R_old where that is
//     positive, order by order, and covers the larger of the two from
//     then on). Where the recalibration lowered the curve at some orders
//     and the residual raised it at others, the larger of the two may not
//     fit a budget the old reservations filled: the top-up is then refused
//     and the histogram's later units of the period are budget_exhausted,
//     visibly (before issue 28's review the new reservation was charged in
//     full on top of the old one, refused whenever the budget was
//     reserved);
//   - without it (per-window charges), the units recorded before the
//     upgrade keep their ideal charges and the later ones carry the
//     residual: the period's book lacks the residual of the releases the
//     old version made, at most (units released before the upgrade)·e(λ)
//     — the stage cannot tell from the ledger which recorded charges lack
//     it, so it does not top them up. Every later period is charged in
//     full.
//
// To avoid both, upgrade at a budget period's boundary (or right after
// one, before the period's first release).
//
// # Upgrading across the rounded-up charges (issue 28)
//
// Issue 28 rounds every charged curve up (budget.ChargeOf,
// mechanism.UpperRDP: by a relative 10⁻¹⁶–10⁻¹⁰): the curves, and so the
// reservation keys, change by rounding-sized amounts upward (the
// quickstart's reservation rises at 152 of its 157 orders, by at most
// 1.3·10⁻¹⁵ relative), so a reservation made before the upgrade does not
// dominate the new one. An upgrade in the middle of a period is accepted:
// each histogram's first unit after it tops its held reservation up by
// the difference K′·(c_new − c_old)⁺ at every order (R_new − R_old, the
// subtraction rounded up; release's "Top-up", recorded as the unit's
// charge with ledger.Unit.TopUp naming the reservation topped up), its
// later units are covered, and the period's spend grows by those
// differences only — which fit, since the new plan fits its own,
// rounded-up reservations (TestReservationTopUp). Before issue 28's
// review the first unit after the upgrade reserved again in full, on top
// of the old reservation: budget_exhausted for the rest of the period
// whenever the budget was already reserved. Without max_windows_per_user
// (per-window charges) the units before the upgrade keep their recorded
// charges, lower by the rounding (at most a relative 10⁻¹⁰ of the
// period's spend). An older version reading a ledger with top-ups (a
// downgrade in the middle of a period) ignores ledger.Unit.TopUp: its own
// reservation is still held and covers its units, and it never takes a
// top-up for a cover (the difference recorded does not hash to the
// top-up's key) — never less safe.
package plan
