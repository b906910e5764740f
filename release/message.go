package release

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// Release is one output message: the private normalized histogram of one
// (histogram, group, window). Its JSON form is a contract that dashboards
// read. Nothing in it is derived from the data except Probabilities,
// PosteriorAlpha (laplace-posterior), Intervals and Total, all private
// (post-processing of the private draws): no raw count, no exact total.
type Release struct {
	ReleaseID   string   `json:"release_id"`
	Histogram   string   `json:"histogram"`
	Group       string   `json:"group"`
	WindowStart string   `json:"window_start"`
	WindowEnd   string   `json:"window_end"`
	Bins        []string `json:"bins"`
	// Probabilities is the private normalized histogram, in bin order.
	// For the mechanisms sampled in floating point (dirichlet, and the
	// average kind) every entry is n_i/params.grid for integers n_i ≥ 0
	// summing to params.grid exactly (so an entry can be 0); for gaussian,
	// laplace and laplace-posterior it is a ratio of integers (the exact
	// samplers' noisy counts) and params.grid is omitted.
	Probabilities []float64 `json:"probabilities"`
	// PosteriorAlpha (laplace-posterior only; omitted otherwise) is the
	// released posterior Dir(α̃) over Bins, in bin order:
	// α̃_i = params.prior_alpha + max(x̃_i, 0) with x̃ the noisy bounded
	// counts. Every entry is ≥ prior_alpha > 0, and Probabilities is its
	// mean α̃/Σα̃. The marginal of bin i is Beta(α̃_i, Σα̃ − α̃_i), from which
	// a dashboard can draw credible intervals — of this plug-in posterior
	// (002 LSHist's), which treats the noisy counts as if observed: they
	// do not account for the Laplace noise (scale params.scale) and so
	// under-cover the true shares when counts are small relative to the
	// scale (Intervals account for the noise and are measured to cover).
	// It is private to the same
	// guarantee as Probabilities: both are post-processing of one draw of
	// the noisy counts. Note that Σα̃ − d·prior_alpha is a noisy estimate
	// of the window's bounded event total for the group.
	PosteriorAlpha []float64 `json:"posterior_alpha,omitempty"`
	Mechanism      string    `json:"mechanism"`
	Calibration    string    `json:"calibration,omitempty"`
	Params         Params    `json:"params"`
	Privacy        Privacy   `json:"privacy"`
	// Coverage (distributed mode; omitted otherwise) says how many of the
	// input topic's partitions the window's counts include.
	Coverage *Coverage `json:"coverage,omitempty"`
	// Intervals are, per bin in bin order, a confidence interval for the
	// bin's true share of the window's counted contributions, at
	// Intervals.Level (package interval; computed from this release and
	// public parameters only). Total is the window's private total. Both
	// are in every release made since issue 29 (omitted in older ones).
	Intervals *Intervals `json:"intervals,omitempty"`
	Total     *Total     `json:"total,omitempty"`
	// Selection is set on a release of a histogram that selects its
	// groups (group_by without groups): the group passed the window's
	// private selection, and this says how (keyed.go). Omitted otherwise.
	Selection *Selection `json:"selection,omitempty"`
}

// Intervals are a release's per-bin confidence intervals: [Low[i],
// High[i]] ⊆ [0, 1] holds bin i's true share x_i/N of the window's
// counted contributions (after bounding) with probability Level —
// marginally, bin by bin, not all bins at once. For an average release
// the share is the kept users' average a_i.
type Intervals struct {
	Level float64   `json:"level"`
	Low   []float64 `json:"low"`
	High  []float64 `json:"high"`
}

// Total is the window's private total for the (histogram, group): the
// counted events N (count histograms) or the kept users (average), an
// estimate and an interval [Low, High] of whole numbers that holds the
// true total with probability at least Intervals.Level. For gaussian,
// laplace and laplace-posterior it is the sum of the noisy counts already
// drawn (no extra charge); for dirichlet and average releases a discrete
// Gaussian count with σ = params.total_sigma, charged with the release
// (privacy.total_rdp_epsilon).
type Total struct {
	Estimate float64 `json:"estimate"`
	Low      float64 `json:"low"`
	High     float64 `json:"high"`
}

// Coverage is the share of the input partitions a distributed release's
// counts include. Fewer than all means a rolling config change: some
// partitions' bounders were still on another counting config, whose
// partials the releaser does not merge (partial.Merger, "Foreign
// records"), so the release describes the included partitions' users
// only — a dashboard can mark or drop such a window.
//
// It is public, not private data: it is a property of the deployment (the
// input topic's partition count, and which counting config each
// partition's bounder ran), never of the events — every partition emits a
// partial of every window whether it had events or not, and a partition
// that is idle (window.watermark event) counts as included
// (partial.Window.Included). So it says nothing about any user or count,
// and leaves through the output topic like the rest of the public config.
// One caveat, found by the privacy review: during a rolling change, which
// windows a partition's old-config bounder had emitted when its new owner
// took over follows how far it had read — consumer lag, which other
// users' volume drives (under window.watermark event, the partition's
// event times). So across a rolling change the coverage of a window can
// reflect that progress, as release timing does; it carries no count, and
// is outside the DP guarantee like timing (README, Known limitations).
type Coverage struct {
	// Partitions is the input topic's partition count.
	Partitions int `json:"partitions"`
	// Included is how many of them were counted under the releaser's
	// counting config (their counts are in the release).
	Included int `json:"included"`
	// Complete is false when the deployment knows the window's counts
	// miss events of its partitions that the counting rule admits;
	// Incomplete then says why (omitted when complete):
	// IncompleteConfigChange (Included < Partitions) and/or
	// IncompletePartitionsChanged. Like the rest of Coverage it depends on
	// the deployment only — the partition count, when a change of it was
	// seen (recorded in the release log) and public config — never on the
	// events. Releases recorded before this field existed lack it.
	Complete   bool     `json:"complete"`
	Incomplete []string `json:"incomplete,omitempty"`
}

// The reasons of Coverage.Incomplete.
const (
	// IncompleteConfigChange: some partitions' bounders ran another
	// counting config (a rolling change), whose partials are not merged.
	IncompleteConfigChange = "config_change"
	// IncompletePartitionsChanged: the window starts before the input
	// topic's partition count change was seen plus
	// kafka.distributed.partition_change_grace, events.max_future and
	// window.clock_skew_margin: producers with stale metadata may have
	// written its users' events to partitions they no longer hash to,
	// which were dropped as wrong_partition (docs/distributed.md,
	// "Partitions added").
	IncompletePartitionsChanged = "partitions_changed"
)

// Covered is implemented by the counts of a distributed window
// (*partial.Window): the release then carries its Coverage.
type Covered interface {
	Included() (included, partitions int)
}

// coverage is x's Coverage when it is Covered, else nil; reason, when
// not empty, is a deployment-level reason the window is incomplete
// (Releaser.SetIncomplete).
func coverage(x any, reason string) *Coverage {
	c, ok := x.(Covered)
	if !ok {
		return nil
	}
	in, n := c.Included()
	cov := &Coverage{Partitions: n, Included: in}
	if in < n {
		cov.Incomplete = append(cov.Incomplete, IncompleteConfigChange)
	}
	if reason != "" {
		cov.Incomplete = append(cov.Incomplete, reason)
	}
	cov.Complete = len(cov.Incomplete) == 0
	return cov
}

// Params are the public noise parameters of the mechanism that made the
// release, so that a reader can compute the release's uncertainty without any
// private input.
type Params struct {
	Alpha float64 `json:"alpha,omitempty"`
	R     float64 `json:"r,omitempty"`
	Sigma float64 `json:"sigma,omitempty"`
	Scale float64 `json:"scale,omitempty"`
	// PriorAlpha is the public prior α₀ of every bin of a laplace-posterior
	// release (privacy.prior_alpha); omitted for the other mechanisms.
	PriorAlpha float64 `json:"prior_alpha,omitempty"`
	// K, Eta, Users and Gamma are the simplex Dirichlet mechanism's public
	// parameters of an average histogram's release (omitted otherwise):
	// Probabilities is one draw of Dir(K·p) with p = (1 − n·Eta)·p̄ + Eta,
	// p̄ the average of Users vectors (padded with uniform vectors when
	// fewer users contributed), so E[Probabilities_i] = p_i and
	// Var = p_i(1 − p_i)/(K + 1).
	K     float64 `json:"k,omitempty"`
	Eta   float64 `json:"eta,omitempty"`
	Users int     `json:"users,omitempty"`
	Gamma float64 `json:"gamma,omitempty"`
	// Grid is Q of the release grid (mechanism.ReleaseGrid): Probabilities
	// are multiples of 1/Q, rounded from the floating-point draw so that
	// its low-order bits cannot identify the counts. Omitted for the
	// mechanisms with exact integer samplers.
	Grid int64 `json:"grid,omitempty"`
	// TotalSigma is σ of the discrete Gaussian noise on the release's
	// Total (dirichlet and average releases; omitted for the additive
	// mechanisms, whose total carries their own noise).
	TotalSigma float64 `json:"total_sigma,omitempty"`
}

// Privacy states what the release cost and what the period has spent.
type Privacy struct {
	// Order is the RDP order λ the mechanism was calibrated at.
	Order float64 `json:"order"`
	// RDPEpsilon is this release's (λ, ε)-RDP guarantee at Order, as
	// charged: for a Dirichlet release the mechanism's value plus the
	// release grid's residual (issue #21).
	RDPEpsilon float64 `json:"rdp_epsilon"`
	// ChargeID names the unit the budget was charged for: one charge per
	// (histogram, window), shared by the group releases of that histogram in
	// that window (see budget charge derivation in plan.go).
	ChargeID string `json:"charge_id"`
	// With contribution.max_windows_per_user ChargeID is instead the key
	// of the histogram's period reservation, shared by every unit of the
	// histogram it covers in the period, and charged once (after a config
	// change in the middle of the period: the held reservation that
	// covers the release by dominance, release/reservation.go).
	//
	// ChargeRDPEpsilon is the RDP ε at Order charged for ChargeID (for a
	// period reservation: the whole reservation's, charged once).
	ChargeRDPEpsilon float64 `json:"charge_rdp_epsilon"`
	// ChargeWindows is, for a period reservation, how many windows' (or
	// average releases') cost it composes: min(K, windows per period), or
	// for average histograms under replace min(2K, windows per period);
	// omitted without the cross-window bound.
	ChargeWindows int `json:"charge_windows,omitempty"`
	// TotalRDPEpsilon is the part of RDPEpsilon that pays for the
	// release's Total (dirichlet and average releases; omitted otherwise).
	// For an average release RDPEpsilon is that part alone, and
	// ChargeRDPEpsilon the totals' part of its charge.
	TotalRDPEpsilon float64 `json:"total_rdp_epsilon,omitempty"`
	// ReleaseEpsilon and ReleaseDelta are the (ε, δ)-DP guarantee of a
	// release without an RDP curve (an average histogram's histogram; its
	// total is in RDPEpsilon), charged to the period by basic composition;
	// omitted otherwise.
	ReleaseEpsilon float64 `json:"release_epsilon,omitempty"`
	ReleaseDelta   float64 `json:"release_delta,omitempty"`
	// SpentEpsilon is the (ε, δ)-DP spent in the current period so far,
	// including this release, at Delta.
	SpentEpsilon float64 `json:"spent_epsilon"`
	// BudgetEpsilon is the period's total ε.
	BudgetEpsilon float64 `json:"budget_epsilon"`
	// Delta is the period's δ in the budget (privacy.budget.delta, or the
	// lower limit an earlier config of the period left): the δ at which
	// SpentEpsilon and BudgetEpsilon are stated.
	Delta float64 `json:"delta"`
	// TotalDelta is the δ of the period's whole guarantee (BudgetEpsilon,
	// TotalDelta): Delta plus the user-hash collision term 2n·2⁻⁶⁴ for
	// n = privacy.expected_users (config.Config.CollisionDelta). Omitted
	// when expected_users is not set: the term exists then too but is not
	// known to the stage (issue 28 item 5).
	TotalDelta  float64 `json:"total_delta,omitempty"`
	PeriodStart string  `json:"period_start"`
	PeriodEnd   string  `json:"period_end"`
}

// Status is the message published instead of a release when the release was
// not made.
type Status struct {
	Status      string `json:"status"` // "budget_exhausted", StatusGroupsSelected, StatusSelectionWithheld
	ReleaseID   string `json:"release_id"`
	Histogram   string `json:"histogram"`
	WindowStart string `json:"window_start"`
	WindowEnd   string `json:"window_end"`
	Message     string `json:"message"`
	// Groups are the selected groups of a StatusGroupsSelected message, in
	// ascending order (empty: none passed); each has its release.
	Groups []string `json:"groups,omitempty"`
	// Selection says how they were selected (StatusGroupsSelected and
	// StatusSelectionWithheld only).
	Selection *Selection `json:"selection,omitempty"`
	Privacy   struct {
		SpentEpsilon  float64 `json:"spent_epsilon"`
		BudgetEpsilon float64 `json:"budget_epsilon"`
		Delta         float64 `json:"delta"`
		TotalDelta    float64 `json:"total_delta,omitempty"` // as Privacy.TotalDelta
		PeriodStart   string  `json:"period_start"`
		PeriodEnd     string  `json:"period_end"`
	} `json:"privacy"`
}

// ReleaseID is deterministic in (histogram, group, window start): the same
// release always carries the same id, so consumers can deduplicate copies
// republished after a restart. Use group "" for a unit-level status message.
func ReleaseID(histogram, group string, windowStartMs int64) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(histogram)))
	h.Write(n[:])
	h.Write([]byte(histogram))
	binary.BigEndian.PutUint64(n[:], uint64(len(group)))
	h.Write(n[:])
	h.Write([]byte(group))
	binary.BigEndian.PutUint64(n[:], uint64(windowStartMs))
	h.Write(n[:])
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// RFC3339 formats a Unix-ms time as the messages do (UTC, RFC 3339 with
// the fractional seconds it has).
func RFC3339(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}
