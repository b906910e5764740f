package plan

import (
	"fmt"
	"math"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/selection"
)

// # Selecting unlisted groups
//
// A histogram with group_by and no listed groups (config.Histogram.Selects)
// selects its groups privately in every window (package selection: the
// derivation, both relations, the δ term). The plan gives the period's
// selections of every selecting histogram one calibration:
//
//   - their budget is ε_sel = selection.epsilon_share and δ_sel =
//     selection.delta_share of what the average histograms' reservation
//     leaves of privacy.budget (ε − ApproxEpsilon, δ − ApproxDelta);
//   - the count histograms' RDP part (CountPlan.RDPEpsilon, RDPDelta) is
//     what is left after both;
//   - the selections and the rest compose by basic composition (ε's and
//     δ's add; the (ε, δ) part of the budget book, as the average
//     releases): the period's total stays within privacy.budget.
//
// The selections' period is the sum of the selecting histograms' own
// periods (selection.NewPeriod over each one's windows W_h and bound K_h);
// under add_remove with the tracked-user cap the change is replace-shaped
// (one user in, one displaced), as for the counts (ChangeShape).
//
// Selecting groups leaves a histogram's count vector and its sensitivities
// unchanged: a user's events still count toward at most
// max_groups_per_user groups and max_events_per_user events per window,
// over all of its groups; a release is made for each selected group.

// SelectionPlan is the plan of the selections of unlisted groups (nil in
// a Plan without a selecting histogram).
type SelectionPlan struct {
	// Hists are the config indexes of the selecting histograms.
	Hists []int
	// Sizes are the selecting histograms' windows (parallel to Hists):
	// each one's selections compose over the windows its window size's
	// cross-window admissions let a user count in (one admission state per
	// window size), so the period reservation's key names them
	// (release.SelectionReservationKey).
	Sizes []SelectionSize
	// Epsilon and Delta are the period's budget for the selections
	// (ε_sel, δ_sel); Selection.Guarantee is within it.
	Epsilon, Delta float64
	// Selection is the calibrated threshold and what a period of it
	// costs.
	Selection selection.Plan
	// Window is one window's selection alone as (ε, δ)
	// (selection.Threshold.WindowGuarantee); Batch is the batch optimum
	// at that (ε, δ) and max_groups_per_user: what a selection with the
	// same per-window guarantee could at best do (under replace at the
	// add/remove budget that meets it: batchAt).
	Window selection.Guarantee
	Batch  selection.Batch
	// BatchShare is the batch optimum at an equal share of the period's
	// selection budget per window, (Epsilon/Units, Delta/DeltaUnits): the
	// batch selection run in every window, composed by basic composition
	// within the same budget — the per-selection budget a stream gives it.
	BatchShare selection.Batch
}

// SelectionSize is one selecting histogram's window: its length in ms,
// its windows per period W_h and its cross-window bound K_h (0: off).
type SelectionSize struct {
	WindowMs   int64
	Windows, K int
}

// planSelection calibrates the selections of cfg's selecting histograms
// within (eps, delta) shares of what is left after the averages
// (leftEps, leftDelta); nil when no histogram selects.
func planSelection(cfg *config.Config, hbounds []WindowBound, leftEps, leftDelta float64) (*SelectionPlan, error) {
	if !cfg.Selecting() {
		return nil, nil
	}
	replace := cfg.Privacy.Neighbour == config.NeighbourReplace || cfg.Contribution.MaxTrackedUsers > 0
	sp := &SelectionPlan{
		Epsilon: cfg.Selection.EpsilonShare * leftEps,
		Delta:   cfg.Selection.DeltaShare * leftDelta,
	}
	var per selection.Period
	for i, h := range cfg.Histograms {
		if !h.Selects() {
			continue
		}
		w, err := HistWindows(cfg, i)
		if err != nil {
			return nil, err
		}
		sp.Hists = append(sp.Hists, i)
		sp.Sizes = append(sp.Sizes, SelectionSize{WindowMs: h.WindowSize(cfg.Window.Size).D().Milliseconds(), Windows: w, K: hbounds[i].K})
		per = per.Add(selection.NewPeriod(w, hbounds[i].K, replace))
	}
	per.Replace = replace
	l0 := cfg.Contribution.MaxGroupsPerUser
	sel, err := selection.Calibrate(sp.Epsilon, sp.Delta, l0, per, cfg.Privacy.Order, cfg.Selection.MaxKeysPerWindow)
	if err != nil {
		return nil, fmt.Errorf("histograms[%d] selects its groups (group_by without groups): %w", sp.Hists[0], err)
	}
	sp.Selection = sel
	if sp.Window, err = sel.Threshold.WindowGuarantee(replace, sel.Orders); err != nil {
		return nil, err
	}
	sp.Batch = batchAt(sp.Window.Epsilon, sp.Window.Delta(), l0, replace)
	sp.BatchShare = batchAt(sp.Epsilon/float64(per.Units), sp.Delta/float64(per.DeltaUnits), l0, replace)
	return sp, nil
}

// batchAt is the batch optimum that meets (ε, δ) under the neighbour
// relation. The batch selection's guarantee is add/remove; under replace
// (one user's data swapped: a removal then an addition) an add/remove
// (ε′, δ′) mechanism is (2ε′, (1 + e^ε′)·δ′) by group privacy of size two,
// so it gets ε′ = ε/2 and δ′ = δ/(1 + e^{ε/2}). (Comparing with the batch
// optimum at the replace budget itself flattered the stream by about 2×;
// a review found it.)
func batchAt(eps, delta float64, l0 int, replace bool) selection.Batch {
	if replace {
		eps /= 2
		delta /= 1 + math.Exp(eps)
	}
	return selection.Batch{Epsilon: eps, Delta: delta, L0: l0}
}

// Charge is the period reservation of the selections in the budget book:
// their (ε_sel, δ_sel) in the book's (ε, δ) part (basic composition with
// the RDP part, as the average releases; the selections' own RDP curve is
// converted inside that reservation, Selection.Guarantee), under the key
// "selection". The running stage will make it with the first selection of
// a period, before anything of that selection leaves the process.
func (sp *SelectionPlan) Charge() budget.Charge {
	return budget.Charge{Epsilon: sp.Epsilon, Delta: sp.Delta, Reservation: "selection"}
}

// selectionLeft is what the selections leave of (eps, delta), with an
// error saying what to change when nothing is left.
func selectionLeft(sp *SelectionPlan, eps, delta float64) (float64, float64, error) {
	if sp == nil {
		return eps, delta, nil
	}
	e, d := eps-sp.Epsilon, delta-sp.Delta
	if !(e > 0) || !(d > 0) {
		return 0, 0, fmt.Errorf("the selections of unlisted groups leave nothing of the budget for the releases: lower selection.epsilon_share or selection.delta_share")
	}
	return e, d, nil
}

// SelectionWarnings warns when the public planning figure
// privacy.expected_events_per_release (E) is below the distinct users at
// which a group is kept with probability 0.95 in a window: a group of E
// events has at most E distinct users, so such a group is released in
// fewer than 95% of its windows (in under half when E is below the ½
// figure) — it will appear and disappear on the dashboard.
//
// It also warns when the key-count test's noise is over a tenth of
// selection.max_keys_per_window (selection.KeySigmaFor's floor, when many
// windows spread the budget thin): windows with far fewer keys than the
// limit are then withheld too.
func SelectionWarnings(cfg *config.Config, p *Plan) []config.Warning {
	sp := p.Selection
	if sp == nil {
		return nil
	}
	th := sp.Selection.Threshold
	var out []config.Warning
	if lim := float64(th.KeyLimit); lim > 0 && th.KeySigma > lim/10 {
		path := "selection.max_keys_per_window"
		out = append(out, config.Warning{Path: path, Line: cfg.LineOf(path), Message: fmt.Sprintf(
			"the noisy test of a window's distinct keys has σ=%.3g, over a tenth of the limit %d (the selections' budget is spread over %d windows): a window with half the limit's keys is withheld with probability %.2g; set contribution.max_windows_per_user, lengthen window.size or raise selection.epsilon_share",
			th.KeySigma, th.KeyLimit, sp.Selection.Period.Units, normalTailProb(lim/2/th.KeySigma))})
	}
	e := cfg.Privacy.ExpectedEventsPerRelease
	if !(e > 0) {
		return out
	}
	n95 := th.UsersAt(0.95)
	if e >= float64(n95) {
		return out
	}
	fix := ""
	if cfg.Contribution.MaxWindowsPerUser == 0 {
		fix = fmt.Sprintf(", or set contribution.max_windows_per_user (the selections are now composed over all %d windows of the period)", p.WindowsPerPeriod)
	}
	for _, i := range sp.Hists {
		path := fmt.Sprintf("histograms[%d].group_by", i)
		out = append(out, config.Warning{Path: path, Line: cfg.LineOf(path), Message: fmt.Sprintf(
			"privacy.expected_events_per_release = %g is below the %d distinct users at which a selected group is kept with probability 0.95 per window (½ at %d): "+
				"a typical group (at most %g users) is released in about %.0f%% of its windows; list the groups you need every window in histograms[%d].groups, or raise selection.epsilon_share or privacy.budget.epsilon%s",
			e, n95, th.UsersAt(0.5), e, 100*th.PassProbability(int64(e)), i, fix)})
	}
	return out
}

// normalTailProb is Φ̄(x) = P[N(0, 1) > x].
func normalTailProb(x float64) float64 { return 0.5 * math.Erfc(x/math.Sqrt2) }
