package plan

import (
	"fmt"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/mechanism"
)

// # Budget shares: a calibration per view
//
// Without histograms[].budget_share one calibration serves every count
// histogram: the budget is spread over the period's Units = Σ_h U_h
// per-window curves (U_h = K′_h with the cross-window bound, W_h without),
// so a view's part of the budget is U_h/Units — the 480 minute windows of a
// minute + hour + day config take 95 % of it and the hour view, which a
// returning-user dashboard leads with, 4.75 %.
//
// With shares s_h (config.Config.BudgetShares: the configured ones, the
// rest split over the other count histograms in proportion to U_h, so
// that without any share each gets U_h/Units, as before), view h is
// calibrated on its own: for a candidate composed RDP e at the
// calibration order λ, each of its U_h per-window curves is calibrated to
//
//	ε_h(λ) = (1 − t)·s_h·e / U_h      (t = privacy.total_share with charged
//	                                   count totals, else 0)
//
// and the period composes (000 Lemma 2)
//
//	Σ_h U_h·c_h + (the totals' and average totals' curves, as in "Totals")
//
// c_h = budget.ChargeOf(mechanism of h) (+ the count totals' curve). The
// shares split the mechanisms' calibration targets: for the Gaussian and
// Laplace that is the split of the composed curve; a Dirichlet release also
// carries the release grid's residual e(λ), the same for every release
// whatever its calibration, so a Dirichlet view's part of the composition
// is its share plus U_h residuals (validate prints each view's charged
// curve, residual included). The
// largest e whose composition converts to at most the RDP part's
// Planned(ε) at δ is found by budget.Fit, which only returns a candidate
// it has checked — so the accounting rests on the composed curves, never
// on the shares adding up. Each view's reservation is U_h copies of its
// own c_h (Reservations[h]); the cross-window argument of the package doc
// holds per view unchanged (it fixes one histogram's calibration, whatever
// the others'), and the views compose by Lemma 2 as before. A view's
// reservation key hashes its own curve, so changing a share in the middle
// of a period makes new keys (cover by dominance applies per view).

// viewsPlan calibrates the count histograms one view each (shares by
// config index, hunits their per-window curves per period) and the totals
// tp (nil: none) within (eps, delta), and returns the count plan with
// Views set.
func viewsPlan(spec mechanism.Spec, shares []float64, hunits []int, counts int, tp *TotalPlan, eps, delta float64) (*CountPlan, error) {
	orders, err := budget.WithOrder(budget.DefaultOrders(), spec.Order)
	if err != nil {
		return nil, fmt.Errorf("derive privacy plan: %w", err)
	}
	units := 0
	for _, u := range hunits {
		units += u
	}
	ts, d := 0.0, 0.0
	if tp != nil {
		ts = tp.Share // as planTotals: the totals' part, whichever totals are charged
		d = float64(tp.CountUnits)*tp.Sensitivity.L2Sq + float64(tp.AverageUnits)
	}
	target := budget.Planned(eps)
	var best *CountPlan
	var bestTotals TotalPlan
	try := func(e float64) (bool, error) {
		var next TotalPlan
		var totalCharge, composed budget.Curve
		if tp != nil && d > 0 {
			next = *tp
			per := tp.Share * e / d // the totals' RDP at λ per unit of Δ2² ("Totals")
			if tp.CountUnits > 0 {
				n, c, _, err := totalNoise(spec.Order, tp.Sensitivity.L2Sq, per*tp.Sensitivity.L2Sq)
				if err != nil {
					return false, err
				}
				next.Count, next.CountCharge, totalCharge = n, c, c
			}
			if tp.AverageUnits > 0 {
				n, c, _, err := totalNoise(spec.Order, 1, per)
				if err != nil {
					return false, err
				}
				next.Average, next.AverageCharge = n, c
				composed = c.Scale(float64(tp.AverageUnits))
			}
		}
		views := make([]*CountPlan, len(shares))
		for h, s := range shares {
			if hunits[h] == 0 {
				continue // an average histogram
			}
			sp := spec
			sp.RDPEpsilon = (1 - ts) * s * e / float64(hunits[h])
			m, err := mechanism.New(sp)
			if err != nil {
				return false, err
			}
			charge := budget.ChargeOf(m, orders)
			if next.Count != nil {
				charge = charge.Add(totalCharge)
			}
			views[h] = &CountPlan{Sensitivity: spec.Sensitivity, UnitsPerWindow: 1, Units: hunits[h], Mechanism: m, Charge: charge, Share: s}
			composed = plus(composed, charge.Scale(float64(hunits[h])))
		}
		if err := composed.Err(); err != nil {
			return false, err
		}
		got, _ := budget.ToEpsilon(composed, delta)
		if !(got <= target) {
			return false, nil
		}
		best = &CountPlan{Sensitivity: spec.Sensitivity, UnitsPerWindow: counts, Units: units, PlannedEpsilon: got, Views: views}
		bestTotals = next
		return true, nil
	}
	if _, err := budget.Fit(eps, try); err != nil {
		return nil, fmt.Errorf("derive privacy plan: no calibration of the views at their histograms[].budget_share fits the budget (raise privacy.budget.epsilon, or lower the views' windows per period): %w", err)
	}
	for _, v := range best.Views {
		if v != nil {
			v.PlannedEpsilon = best.PlannedEpsilon
			if best.Mechanism == nil { // the first view's: what a caller unaware of views reads
				best.Mechanism, best.Charge = v.Mechanism, v.Charge
			}
		}
	}
	if tp != nil {
		*tp = bestTotals
	}
	return best, nil
}

// For is the calibration of count histogram h (config index): its own
// view's with budget shares (Views), else cp itself — one calibration for
// every count histogram.
func (cp *CountPlan) For(h int) *CountPlan {
	if cp == nil || h < 0 || h >= len(cp.Views) || cp.Views[h] == nil {
		return cp
	}
	return cp.Views[h]
}

// Composed is the count histograms' planned period composition: each
// count histogram's per-window curve (its own with budget shares) composed
// over its Units, summed; Charge·Units without shares.
func (cp *CountPlan) Composed() budget.Curve {
	if cp.Views == nil {
		return cp.Charge.Scale(float64(cp.Units))
	}
	var out budget.Curve
	for _, v := range cp.Views {
		if v != nil {
			out = plus(out, v.Charge.Scale(float64(v.Units)))
		}
	}
	return out
}

// ShareOf is count histogram h's share of the count histograms' period
// budget: its own view's Share with budget shares, else its per-window
// curves over all (Units_h / Units).
func (cp *CountPlan) ShareOf(h int, units int) float64 {
	if v := cp.For(h); v != cp {
		return v.Share
	}
	if cp.Units == 0 {
		return 0
	}
	return float64(units) / float64(cp.Units)
}
