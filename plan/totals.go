package plan

import (
	"errors"
	"fmt"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/mechanism"
)

// # Totals: a private total with every release
//
// Every release carries its window's total (package interval computes its
// interval, and the Dirichlet and average releases' per-bin intervals
// need it). For gaussian, laplace and laplace-posterior the total is Σ of
// the noisy counts already drawn: post-processing, free. A dirichlet or
// average release has no noisy counts, so it carries a charged count,
// drawn with the exact discrete Gaussian sampler (mechanism.CountNoiser):
//
//   - count histogram h, group g: ñ_g = n_g + Z_g, n_g = Σ_i x_{g,i} the
//     group's counted events in the window. Sensitivity: one user's
//     contribution to the vector of h's group totals is t(v)_g = Σ_i v_{g,i}
//     for their bounded contribution v ≥ 0 with ‖v‖₁ ≤ m (m =
//     max_events_per_user over all of h's groups; 2m with the distributed
//     mode's per-partition cap under replace, sensitivityEvents). t(v) ≥ 0
//     and ‖t(v)‖₁ = ‖v‖₁ ≤ m, so the derivation of "Sensitivity" in Plan
//     applies to t word for word: add_remove Δ2² = m² (‖t‖₂² ≤ ‖t‖₁²),
//     replace ‖t(w) − t(v)‖₂² ≤ ‖t(w)‖₂² + ‖t(v)‖₂² ≤ 2m², and with the
//     tracked-user cap add_remove is charged as replace — the count
//     vector's own sensitivities (DeriveSensitivity), so the same
//     Sensitivity serves both. A user changes a (histogram, group-set)
//     total by at most m per window, over all groups.
//   - average histogram: ñ = n + Z, n the kept users (≤ average.users).
//     Adding or removing a user changes n by at most 1; replacing one by
//     another by at most 1 too (n = min(|U|, users), and a replacement
//     changes |U| by at most one: the new user may have no vector), so
//     Δ2² = 1 under both relations.
//
// Both are Gaussian mechanisms with the curve λ·Δ2²/(2σ_T²) (CKS20; the
// group totals of one window are one vector, so one curve per
// (histogram, window) unit, as for the counts). The cross-window bound's
// argument (package doc) applies unchanged: the Gaussian curve is linear
// in Δ2², so c_r = 2·c_a for the count totals, and the average totals
// compose AverageReleases releases as the average releases do.
//
// Charging. A count unit's charge is its histogram's curve plus its
// totals' (CountPlan.Charge includes TotalPlan.CountCharge); an average
// unit's charge is its (ε, δ) plus its total's RDP curve
// (TotalPlan.AverageCharge), so the reservations, the budget book's
// checks, the ledger transaction that records the window and the period
// total all include the totals — nothing new to record, and a restart
// republishes the recorded total with the rest of the message.
//
// Planning: the totals are one planned component with share s =
// privacy.total_share of the RDP part of the budget (what the average
// releases' (ε, δ) reservation leaves), measured at the calibration order
// λ. One σ_T serves every total. For a candidate composed RDP e at λ:
//
//	count histograms: each of their U_c units calibrated to (1−s)·e/U_c,
//	totals:           σ_T² = λ·D/(2·s·e), D = U_c·Δ2²_T + U_a,
//
// U_a the average releases per period (AverageReleases or W_h each), Δ2²_T
// the count totals' sensitivity (0 when the count histograms' totals are
// free: then D = U_a). The largest e whose composition — U_c copies of
// the count unit's charge (totals included) plus U_a copies of an average
// total's — converts to at most the RDP part's (ε, δ) is found by
// budget.Fit. Without count histograms the totals get the whole RDP part
// (s does not apply); without charged totals nothing changes. With
// privacy.rdp_epsilon each count unit's target is split (1−s, s) between
// the histogram and its totals, and the average totals (if any) are
// planned alone to fit s of the RDP part (FitUnits counts the count units
// that fit beside them).

// Upgrading. Releases recorded before the totals existed keep their
// messages (no intervals, no total; the page draws no band for them) and
// their charges. A Dirichlet or average histogram's per-window curve
// changes with the totals (the histogram's part is recalibrated to 1 − s
// and the totals' curve is added), so under max_windows_per_user its
// reservation key changes. The first unit after an upgrade in the middle
// of a period tops the held reservation up by the difference at every
// order (release's "Top-up"; nothing when the old one dominates it:
// "Cover by dominance") and covers the larger from then on — never under,
// and the period spends the pointwise maximum of the two reservations,
// which may still exhaust a budget the old reservation filled before the
// period ends: upgrade at a period's boundary (docs/upgrading.md).

// TotalPlan is the plan of the charged totals (nil in a Plan without
// any: count histograms under an additive mechanism and no average
// histograms).
type TotalPlan struct {
	// Share is privacy.total_share.
	Share float64
	// Count draws a count histogram unit's group totals (nil: the count
	// histograms' totals are free — additive mechanisms — or there are
	// none); CountCharge is its curve, included in CountPlan.Charge.
	Count       mechanism.CountNoiser
	CountCharge budget.Curve
	// Average draws an average histogram's kept-user count (nil without
	// average histograms); AverageCharge is its curve per release.
	Average       mechanism.CountNoiser
	AverageCharge budget.Curve
	// CountUnits and AverageUnits are the totals a period composes: count
	// units (with Δ2² = Sensitivity.L2Sq) and average releases (Δ2² = 1).
	CountUnits, AverageUnits int
	Sensitivity              mechanism.Sensitivity
}

// CountSigma is σ_T of the count histograms' totals (0 when free).
func (t *TotalPlan) CountSigma() float64 {
	if t == nil || t.Count == nil {
		return 0
	}
	return t.Count.Params().Sigma
}

// AverageSigma is σ_T of the average histograms' totals (0: none).
func (t *TotalPlan) AverageSigma() float64 {
	if t == nil || t.Average == nil {
		return 0
	}
	return t.Average.Params().Sigma
}

// AverageReservation is the RDP curve average histogram h's period
// reservation adds for its totals: AverageCharge composed over its
// releases (HistBounds[h].AverageReleases).
func (p *Plan) AverageReservation(h int) budget.Curve {
	if p.Totals == nil || p.Totals.Average == nil || h < 0 || h >= len(p.HistBounds) {
		return budget.Curve{}
	}
	return p.Totals.AverageCharge.Scale(float64(p.HistBounds[h].AverageReleases))
}

// countTotalsCharged reports whether cfg's count histograms carry charged
// totals: under the dirichlet mechanism (the additive ones' are free).
func countTotalsCharged(cfg *config.Config) bool {
	return cfg.Privacy.Mechanism == config.MechanismDirichlet
}

// averageTotalUnits is U_a: the average releases per period whose totals
// compose (AverageReleases with the cross-window bound, W_h without).
func averageTotalUnits(cfg *config.Config, hbounds []WindowBound) (int, error) {
	u := 0
	for i, h := range cfg.Histograms {
		if !h.IsAverage() {
			continue
		}
		hw, err := HistWindows(cfg, i)
		if err != nil {
			return 0, err
		}
		if hbounds[i].K > 0 {
			hw = hbounds[i].AverageReleases
		}
		u += hw
	}
	return u, nil
}

// totalNoise is the discrete Gaussian of one total with sensitivity l2sq
// at RDP eps (order λ).
func totalNoise(order, l2sq, eps float64) (mechanism.CountNoiser, budget.Curve, []float64, error) {
	orders, err := budget.WithOrder(budget.DefaultOrders(), order)
	if err != nil {
		return nil, budget.Curve{}, nil, err
	}
	m, err := mechanism.New(mechanism.Spec{Kind: mechanism.Gaussian, Order: order, RDPEpsilon: eps, Sensitivity: mechanism.Sensitivity{L2Sq: l2sq}})
	if err != nil {
		return nil, budget.Curve{}, nil, err
	}
	c := budget.CurveOf(m, orders)
	return m.(mechanism.CountNoiser), c, orders, c.Err()
}

// planTotals plans the count histograms (spec, units; nil spec: none) and
// the totals (tp with Share, CountUnits, AverageUnits, Sensitivity set)
// together within (eps, delta) at the calibration order, as the "Totals"
// section describes, and fills tp's mechanisms and charges.
func planTotals(spec *mechanism.Spec, units int, tp *TotalPlan, order, eps, delta float64) (*CountPlan, error) {
	d := float64(tp.CountUnits)*tp.Sensitivity.L2Sq + float64(tp.AverageUnits)
	share := tp.Share
	if spec == nil {
		share = 1 // the totals alone
	}
	target := budget.Planned(eps)
	var cp *CountPlan
	var totals TotalPlan
	try := func(e float64) (bool, error) {
		next := *tp
		var charge, composed budget.Curve
		var m mechanism.Mechanism
		if spec != nil {
			s := *spec
			s.RDPEpsilon = (1 - share) * e / float64(units)
			var err error
			if m, err = mechanism.New(s); err != nil {
				return false, err
			}
			orders, err := budget.WithOrder(budget.DefaultOrders(), s.Order)
			if err != nil {
				return false, err
			}
			charge = budget.ChargeOf(m, orders)
		}
		if d > 0 {
			per := share * e / d // the totals' RDP at λ per unit of Δ2²
			if tp.CountUnits > 0 {
				n, c, _, err := totalNoise(order, tp.Sensitivity.L2Sq, per*tp.Sensitivity.L2Sq)
				if err != nil {
					return false, err
				}
				next.Count, next.CountCharge = n, c
				charge = plus(charge, c)
			}
			if tp.AverageUnits > 0 {
				n, c, _, err := totalNoise(order, 1, per)
				if err != nil {
					return false, err
				}
				next.Average, next.AverageCharge = n, c
				composed = c.Scale(float64(tp.AverageUnits))
			}
		}
		if spec != nil {
			composed = plus(composed, charge.Scale(float64(units)))
		}
		if err := composed.Err(); err != nil {
			return false, err
		}
		got, _ := budget.ToEpsilon(composed, delta)
		if !(got <= target) {
			return false, nil
		}
		totals = next
		if spec != nil {
			cp = &CountPlan{Units: units, Mechanism: m, Charge: charge, PlannedEpsilon: got}
		} else {
			cp = &CountPlan{PlannedEpsilon: got}
		}
		return true, nil
	}
	if _, err := budget.Fit(eps, try); err != nil {
		if spec != nil { // the histograms alone may say why better
			if _, err2 := budget.PlanReleases(*spec, eps, delta, units); err2 != nil {
				return nil, fmt.Errorf("derive privacy plan: %w", err2)
			}
		}
		return nil, fmt.Errorf("derive privacy plan: no calibration of the histograms and their totals (privacy.total_share %g) fits the budget: %w", tp.Share, err)
	}
	*tp = totals
	return cp, nil
}

// newTotals is the TotalPlan of cfg before calibration (nil: no charged
// totals).
func newTotals(cfg *config.Config, sens mechanism.Sensitivity, hbounds []WindowBound, countUnits int) (*TotalPlan, error) {
	avg, err := averageTotalUnits(cfg, hbounds)
	if err != nil {
		return nil, err
	}
	tp := &TotalPlan{Share: cfg.Privacy.TotalShare, AverageUnits: avg, Sensitivity: sens}
	if countUnits > 0 && countTotalsCharged(cfg) {
		tp.CountUnits = countUnits
	}
	if tp.CountUnits == 0 && tp.AverageUnits == 0 {
		return nil, nil
	}
	if !(tp.Share > 0 && tp.Share < 1) {
		return nil, errors.New("derive privacy plan: privacy.total_share must be in (0, 1)")
	}
	return tp, nil
}

// plus is a.Add(b), or b when a is empty (the zero Curve).
func plus(a, b budget.Curve) budget.Curve {
	if errors.Is(a.Err(), budget.ErrEmptyCurve) {
		return b
	}
	return a.Add(b)
}

// AverageCharge is what one release of the average histogram ap is
// charged without the cross-window bound: its (ε, δ) and its total's RDP
// curve (TotalPlan.AverageCharge).
func (p *Plan) AverageCharge(ap *AveragePlan) budget.Charge {
	c := budget.Charge{Epsilon: ap.Epsilon, Delta: ap.Delta}
	if p.Totals != nil && p.Totals.Average != nil {
		c.RDP = p.Totals.AverageCharge
	}
	return c
}

// AverageReserveCharge is, with the cross-window bound, the average
// histogram ap's period reservation (without its key): its releases'
// (ε, δ) added up and its totals' curve composed (AverageReservation).
func (p *Plan) AverageReserveCharge(ap *AveragePlan) budget.Charge {
	c := budget.Charge{Epsilon: ap.ReserveEpsilon, Delta: ap.ReserveDelta}
	if p.Totals != nil && p.Totals.Average != nil {
		c.RDP = p.AverageReservation(ap.Index)
	}
	return c
}

// CountRDP is the count totals' charge per unit at order (0 when free).
func (t *TotalPlan) CountRDP(order float64) float64 {
	if t == nil || t.Count == nil {
		return 0
	}
	v, _ := t.CountCharge.At(order)
	return v
}

// AverageRDP is an average total's charge per release at order (0: none).
func (t *TotalPlan) AverageRDP(order float64) float64 {
	if t == nil || t.Average == nil {
		return 0
	}
	v, _ := t.AverageCharge.At(order)
	return v
}
