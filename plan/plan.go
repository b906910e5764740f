package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/mechanism"
)

// Plan is the privacy plan the stage derives from its configuration: the
// sensitivities, the per-release calibration, and what one window charges.
//
// # Sensitivity (ground rule: derived, never assumed)
//
// Bounding guarantees that in one window one user contributes at most
// m = contribution.max_events_per_user events to each histogram, in total
// over all of its groups. Let v ≥ 0 be the user's contribution to the
// concatenation of one histogram's group count vectors (‖v‖₁ ≤ m).
//
//   - add_remove (x′ = x ± v): Δ1 = m, Δ2² = max ‖v‖₂² = m², Δ∞ = m.
//   - replace (x′ = x − v + w with ‖v‖₁, ‖w‖₁ ≤ m): Δ1 ≤ 2m; since v, w ≥ 0,
//     ‖w − v‖₂² = ‖w‖₂² + ‖v‖₂² − 2⟨v, w⟩ ≤ 2m², and every coordinate
//     |w_i − v_i| ≤ max(w_i, v_i) ≤ m, so Δ2² = 2m², Δ∞ = m.
//
// Which events count is a function of each user's own events: per window
// and histogram, the user's max_groups_per_user groups and then m events
// ranked first by keyed hashes of their content (aggregate's package doc),
// never by arrival order or partition interleaving, which other users' load
// drives (and never by offsets, which other users' events shift). So v above
// is a function of the user's events alone.
//
// The per-window cap contribution.max_tracked_users = K adds displacement:
// the tracked users are the K smallest keyed user hashes among the window's
// users with an event to count, so one user's presence can keep one other
// user out (aggregate's TestCapDisplacement). Adding one element to a set
// changes its K smallest by at most one in and one out, removing one by at
// most one out and one in, and replacing one (a removal, then an addition
// that pushes out the very element the removal let in, if the new one is
// kept) also by one out and one in. Under replace the change in a window is
// therefore still x′ = x − v + w, one user's events out and one user's in,
// and the bound above stands. Under add_remove the change becomes that same
// "one out, one in", so with the cap on add_remove is charged the replace
// sensitivities; only max_tracked_users: 0 (no cap) keeps Δ1 = m, Δ2² = m².
// aggregate's TestNeighbourSensitivity checks these bounds on random
// neighbours of both relations, with and without the cap. (The cap is one
// set per window, not one per shard of the bounder: per-shard caps would let
// a replacement move two users out and two in.)
//
// The exact calibration maximizes over the changes a relation admits, not
// only over the sensitivities (mechanism/exact.go), so the spec also says
// which shape the change has: with the cap on, every add_remove change is
// of the replace shape x′ = x − v + w (v or w possibly 0), and the spec
// carries Neighbour replace. For unit contributions that is the worst case
// h₊ + h₋ (one bin emptied and one filled) instead of add_remove's
// 2·max(h₊, h₋) over the same Δ1 = 2 (two bins filled at once, which one
// user added cannot do): a smaller α for the same ε
// (TestExactAddRemoveCappedIsReplaceShaped pins both). Without the cap
// add_remove keeps its own one-sided shape.
//
// # What one window charges
//
// The three mechanisms' RDP bounds are sums over coordinates of a convex
// function of that coordinate's change: the Dirichlet bound of 000 Theorem 2
// is Σ_i ½λ(x_i − x′_i)²ψ′(α_m − (λ−1)Δ∞) (Appendix A, the line before
// "≤ ½λΔ2²ψ′"), the Gaussian's Σ_i λ(x_i − x′_i)²/(2σ²), the Laplace's
// Σ_i f(|x_i − x′_i|). The group releases of one histogram in one window are
// independent draws on disjoint coordinates of the concatenated vector, so by
// composition (000 Lemma 2) their joint RDP is bounded by the same sum over
// all coordinates, which the sensitivities above bound exactly as for a
// single release. Hence one histogram's releases in one window together cost
// one release-worth of RDP (verified numerically with the exact divergence,
// 000 eq. (19), in mechanism's group-split test; for the `exact`
// calibration, whose curve is the supremum of the exact divergence rather
// than Theorem 2's bound, the same conclusion is proven in mechanism/exact.go
// from the per-bin gamma bound, given the spec's Neighbour), and max_groups_per_user
// does not enter the charge. A Dirichlet unit is charged that curve plus the
// release grid's residual e_k(λ), k = Δ1 the coordinates one user changes
// over all the window's group releases (budget.ChargeOf,
// mechanism.GridResidualRDP: the hybrid argument is per changed Gamma
// coordinate, wherever the coordinate's group is); an average release
// (ε + d·log((1+ρ)/(1−ρ)), δ·(1+ρ)^d). A window charges one unit per histogram; a
// period composes windows_per_period × histograms units — or, with the
// cross-window bound, min(K, windows_per_period) × histograms units,
// charged as one period reservation per histogram (package doc).
//
// # Per-histogram windows
//
// A histogram with its own window (histograms[].window = r·window.size,
// dividing the period) is bounded per window of its own: one user
// contributes at most m events per window of that histogram, over all its
// groups (the bounder counts it in windows of that size), so the
// sensitivities above hold for each of its releases unchanged, and its
// windows are disjoint in time, so a user's events in different windows of
// it are bounded separately, as for base windows. It releases
// W_h = period / window_h units per period instead of W = period /
// window.size. Units are composed by adding their curves (000 Lemma 2),
// whatever their windows, so the count histograms compose Σ_h W_h units of
// the one per-unit curve, and an average histogram W_h releases' (ε_r, δ_r).
// One calibration still serves every count histogram (one mechanism, one
// curve per unit): a daily histogram next to a minute one does not get a
// larger share of the per-release budget; it costs 1/r_h of the units the
// same histogram would in base windows, which is what frees budget for
// every release.
//
// # laplace-posterior
//
// privacy.mechanism laplace-posterior is planned, calibrated and charged as
// the laplace baseline: the spec handed to budget.PlanReleases (or to
// mechanism.New with privacy.rdp_epsilon) has kind laplace and the
// sensitivities above, so the scale b, the per-release RDP curve, the
// number of units and the per-(histogram, window) charge are the
// baseline's. The calibrated mechanism is then wrapped in a
// mechanism.CountPosterior with privacy.prior_alpha: each group's release is
// the posterior Dir(α̃), α̃_i = prior_alpha + max(x̃_i, 0), computed from the
// baseline's noisy counts x̃ — a post-processing, which leaves the RDP curve
// (and so the charge) unchanged (see mechanism/streamposterior.go). The
// colleague's PosteriorSpec-based kind of the same name (002 LSHist with a
// public n) is not used by the stage: a window's n is private.
//
// # average histograms
//
// A histogram of kind average is released by the simplex Dirichlet mechanism
// (mechanism.SimplexAverage; aggregate/average.go bounds one user's effect on
// the padded average to ‖p̄ − p̄′‖₁ ≤ 2/users under both neighbour relations).
// Its guarantee is (ε_r, δ_r)-DP per release, with no finite RDP curve, so it
// is composed apart from the RDP units by basic composition, and the two
// parts add (budget/book.go states why, for interleaved adaptive releases).
// The plan reserves for the average releases of a period
// ApproxEpsilon = Σ_h W_h·ε_r(h) and ApproxDelta = Σ_h W_h·δ_r(h) (W_h
// windows of histogram h per period), and gives the count histograms' RDP accountant and calibration
// what is left: (ε − ApproxEpsilon, δ − ApproxDelta). A period's total is
// then within (ε, δ). δ_r defaults to an even split of δ (of half of it when
// count histograms share the budget).
type Plan struct {
	Neighbour string
	// WindowsPerPeriod is the number of base windows (window.size) per
	// period; a histogram with its own window has fewer (Units, AveragePlan).
	WindowsPerPeriod int
	// Epsilon and Delta are the period's total budget.
	Epsilon, Delta float64
	// Orders is the grid of RDP orders the budget book composes on (the
	// count charge's grid; DefaultOrders with privacy.order when there are
	// no count histograms, so that RDP spent under an earlier config is
	// still restored and counted).
	Orders []float64
	// Count is the plan of the count histograms; nil when every histogram
	// is an average one. Its type makes the "no count histograms" case one
	// that every caller has to face (issue #15: a caller that forgot it
	// panicked on a valid config).
	Count *CountPlan
	// Averages are the average histograms, in config order.
	Averages []AveragePlan
	// ApproxEpsilon and ApproxDelta are the period's reservation for the
	// average releases: the basic composition of all of them.
	ApproxEpsilon, ApproxDelta float64
	// Bound is the cross-window bound contribution.max_windows_per_user
	// and what it composes per period for a histogram at window.size
	// (Bound.K = 0: off, every window of the period is charged).
	Bound WindowBound
	// Totals is the plan of the charged totals (totals.go); nil when no
	// release carries one (additive mechanisms' totals are free).
	Totals *TotalPlan
	// HistBounds is, by config histogram index, that histogram's own
	// cross-window bound K_h (config.Config.HistWindowBound: its
	// histograms[].max_windows_per_user, else Bound's K at window.size)
	// and what it composes over its own W_h windows per period; all zero
	// when the bound is off. See "Views" in the package doc.
	HistBounds []WindowBound
	// Selection is the plan of the selections of unlisted groups
	// (selection.go); nil when every histogram with group_by lists its
	// groups. Its (Epsilon, Delta) is taken from the budget before the
	// count histograms' RDP part.
	Selection *SelectionPlan
}

// WindowBound is what the cross-window bound K =
// contribution.max_windows_per_user makes a period compose (see the
// package doc, "The cross-window bound", for the proof).
type WindowBound struct {
	// K is contribution.max_windows_per_user (for a histogram's own bound,
	// K_h); 0 when the bound is off (the other fields are then 0).
	K int
	// Windows is W: the windows of this size per period.
	Windows int
	// CountWindows = min(K, W): the per-window RDP curves a count
	// histogram's period reservation composes.
	CountWindows int
	// AverageReleases is min(K, W) under add_remove, min(2K, W) under
	// replace: the releases' (ε_r, δ_r) an average histogram's period
	// reservation adds up.
	AverageReleases int
}

// windowBound returns the WindowBound of k for a period of windows windows
// under the neighbour relation.
func windowBound(k, windows int, neighbour string) WindowBound {
	if k <= 0 {
		return WindowBound{}
	}
	avg := k
	if neighbour == config.NeighbourReplace {
		avg = 2 * k
	}
	return WindowBound{K: k, Windows: windows, CountWindows: min(k, windows), AverageReleases: min(avg, windows)}
}

// Charges is the number of charges made per period: one per (histogram,
// window) unit, or with the cross-window bound one period reservation per
// histogram (each over its own windows).
func (p *Plan) Charges() int {
	if p.Bound.K > 0 {
		n := len(p.Averages)
		if p.Count != nil {
			n += p.Count.UnitsPerWindow
		}
		return n
	}
	n := 0
	for _, a := range p.Averages {
		n += a.Windows
	}
	if p.Count != nil {
		n += p.Count.Units
	}
	return n
}

// CountPlan is the calibrated release of the count histograms: one
// mechanism for all of them, charged per (histogram, window) unit in RDP.
type CountPlan struct {
	Sensitivity    mechanism.Sensitivity
	UnitsPerWindow int // = number of count histograms
	// Units is the number of per-window curves (Charge) composed per
	// period: Σ over the count histograms of their windows per period
	// (WindowsPerPeriod each, fewer for a histogram with its own window), or
	// with the cross-window bound Σ_h min(K_h, W_h) over the count
	// histograms (HistBounds[h].CountWindows).
	Units int
	// FitUnits is how many units the budget covers per period, when
	// privacy.rdp_epsilon fixes the calibration; 0 when the plan spreads the
	// budget over all Units. With the cross-window bound it is a sum of
	// whole reservations (HistBounds[h].CountWindows each), in the order
	// their first units are charged (ReservationOrder).
	FitUnits  int
	Mechanism mechanism.Mechanism
	// Charge is the RDP curve of one (histogram, window) unit: what it is
	// charged without the cross-window bound; with it (replace), the curve
	// max(c_r, 2·c_a) (see WindowBound).
	Charge budget.Curve
	// Reservations is, with the cross-window bound, by config histogram
	// index, the RDP curve count histogram h's period reservation charges:
	// Charge composed min(K_h, W_h) times (HistBounds[h].CountWindows),
	// rounded up; empty for an average histogram and without the bound.
	Reservations []budget.Curve
	// PlannedEpsilon is what composing all planned RDP units converts to at
	// RDPDelta (≤ RDPEpsilon).
	PlannedEpsilon float64
	// RDPEpsilon and RDPDelta are the part of the budget the RDP units
	// compose within: (Epsilon, Delta) minus the average histograms'
	// reservation and the selections' budget (Plan.Selection).
	RDPEpsilon, RDPDelta float64
	// Views is, with histograms[].budget_share, by config index, each
	// count histogram's own calibration (Mechanism, Charge, Units = its
	// per-window curves, Share; nil for an average histogram); nil without
	// shares. Read a histogram's calibration with For. Mechanism and
	// Charge above are then the first count histogram's.
	Views []*CountPlan
	// Share is, in a view of Views, its share of the count histograms'
	// budget (config.Config.BudgetShares); 0 otherwise.
	Share float64
}

// AveragePlan is the calibrated release of one average histogram.
type AveragePlan struct {
	Index     int // in config.Histograms
	Name      string
	Mechanism *mechanism.SimplexAverage
	// Epsilon and Delta are the (ε, δ)-DP of one release (one window), as
	// charged: the mechanism's (IdealEpsilon, IdealDelta) with the release
	// grid's residual (mechanism.GridResidualDP: ε + Bins·log((1+ρ)/(1−ρ)),
	// δ·(1+ρ)^Bins).
	Epsilon, Delta float64
	// IdealEpsilon and IdealDelta are the simplex Dirichlet's own (ε, δ)
	// (Mechanism.DP), without the residual.
	IdealEpsilon, IdealDelta float64
	// ReserveEpsilon and ReserveDelta are, with the cross-window bound, the
	// histogram's period reservation: its HistBounds[Index].AverageReleases
	// releases' (ε, δ), added up rounded up (budget.AddUp); 0 without the
	// bound.
	ReserveEpsilon, ReserveDelta float64
	// Windows is the number of the histogram's windows (releases) per
	// period.
	Windows int
}

// Average returns the plan of the average histogram whose config index is
// hist, or nil if hist is not an average histogram.
func (p *Plan) Average(hist int) *AveragePlan {
	for i := range p.Averages {
		if p.Averages[i].Index == hist {
			return &p.Averages[i]
		}
	}
	return nil
}

// DeriveSensitivity returns the sensitivities of one histogram's count
// vector (all groups concatenated) under the neighbour relation, when one
// user contributes at most maxEvents events per window to it and, with
// capped, the bounder tracks at most a fixed number of users per window.
func DeriveSensitivity(neighbour string, maxEvents int, capped bool) (mechanism.Sensitivity, error) {
	if maxEvents < 1 {
		return mechanism.Sensitivity{}, fmt.Errorf("max_events_per_user must be ≥ 1, got %d", maxEvents)
	}
	m := float64(maxEvents)
	switch neighbour {
	case "add_remove":
		if capped { // displacement: one user out, one other user in
			return mechanism.Sensitivity{L1: 2 * m, L2Sq: 2 * m * m, LInf: m}, nil
		}
		return mechanism.Sensitivity{L1: m, L2Sq: m * m, LInf: m}, nil
	case "replace":
		return mechanism.Sensitivity{L1: 2 * m, L2Sq: 2 * m * m, LInf: m}, nil
	default:
		return mechanism.Sensitivity{}, fmt.Errorf("unknown neighbour relation %q (want replace or add_remove)", neighbour)
	}
}

// ChangeShape is the relation whose admissible changes of a window's count
// vector cover those of neighbour given the bounder: with the tracked-user
// cap (capped) an add_remove neighbour moves one user out and one in, the
// replace shape (see Plan). The exact calibration maximizes over it.
func ChangeShape(neighbour string, capped bool) mechanism.Neighbour {
	if neighbour == config.NeighbourAddRemove && capped {
		return mechanism.Replace
	}
	return mechanism.Neighbour(neighbour)
}

// DerivePlan derives the privacy plan of a validated config.
func DerivePlan(cfg *config.Config) (*Plan, error) {
	if cfg.Contribution.MaxWindowsPerUser > 0 && cfg.Contribution.MaxTrackedUsers > 0 {
		// config validation refuses it; the accounting below assumes it.
		return nil, errors.New("derive privacy plan: contribution.max_windows_per_user cannot be combined with contribution.max_tracked_users")
	}
	sens, err := DeriveSensitivity(cfg.Privacy.Neighbour, sensitivityEvents(cfg), cfg.Contribution.MaxTrackedUsers > 0) // distcap.go
	if err != nil {
		return nil, fmt.Errorf("derive privacy plan: %w", err)
	}
	size := cfg.Window.Size.D()
	period := cfg.Privacy.Budget.Period.D()
	if size <= 0 || period < size || period%size != 0 {
		return nil, fmt.Errorf("derive privacy plan: privacy.budget.period (%s) must be a whole multiple of window.size (%s)", period, size)
	}
	windows := int(period / size)
	bound := windowBound(cfg.Contribution.MaxWindowsPerUser, windows, cfg.Privacy.Neighbour)
	hbounds := make([]WindowBound, len(cfg.Histograms))
	counts, units := 0, 0
	hunits := make([]int, len(cfg.Histograms)) // per-window curves per period, by config index
	for i, h := range cfg.Histograms {
		hw, err := HistWindows(cfg, i)
		if err != nil {
			return nil, fmt.Errorf("derive privacy plan: %w", err)
		}
		if bound.K > 0 {
			kh := cfg.HistWindowBound(i)
			if kh <= 0 { // config validation refuses it
				return nil, fmt.Errorf("derive privacy plan: histograms[%d].max_windows_per_user: required for a histogram with its own window under contribution.max_windows_per_user", i)
			}
			hbounds[i] = windowBound(kh, hw, cfg.Privacy.Neighbour)
		}
		if !h.IsAverage() {
			counts++
			if bound.K > 0 {
				hw = hbounds[i].CountWindows // Σ_h min(K_h, W_h): see "Views"
			}
			units += hw
			hunits[i] = hw
		}
	}
	avgs, aEps, aDelta, err := planAverages(cfg, windows, hbounds, len(cfg.Histograms)-counts)
	if err != nil {
		return nil, fmt.Errorf("derive privacy plan: %w", err)
	}
	rdpEps, rdpDelta := cfg.Privacy.Budget.Epsilon-aEps, cfg.Privacy.Budget.Delta-aDelta
	sel, err := planSelection(cfg, hbounds, rdpEps, rdpDelta) // selection.go
	if err != nil {
		return nil, fmt.Errorf("derive privacy plan: %w", err)
	}
	if rdpEps, rdpDelta, err = selectionLeft(sel, rdpEps, rdpDelta); err != nil {
		return nil, fmt.Errorf("derive privacy plan: %w", err)
	}
	tp, err := newTotals(cfg, sens, hbounds, units)
	if err != nil {
		return nil, fmt.Errorf("derive privacy plan: %w", err)
	}
	plan := &Plan{
		Neighbour:        cfg.Privacy.Neighbour,
		WindowsPerPeriod: windows,
		Epsilon:          cfg.Privacy.Budget.Epsilon,
		Delta:            cfg.Privacy.Budget.Delta,
		Averages:         avgs,
		ApproxEpsilon:    aEps,
		ApproxDelta:      aDelta,
		Bound:            bound,
		HistBounds:       hbounds,
		Selection:        sel,
	}
	if counts == 0 {
		if plan.Orders, err = budget.WithOrder(budget.DefaultOrders(), cfg.Privacy.Order); err != nil {
			return nil, fmt.Errorf("derive privacy plan: %w", err)
		}
		if tp != nil { // the average histograms' totals, alone in the RDP part
			if _, err := planTotals(nil, 0, tp, cfg.Privacy.Order, rdpEps, rdpDelta); err != nil {
				return nil, err
			}
			plan.Totals = tp
		}
		return plan, nil
	}
	spec := mechanism.Spec{
		Kind:        mechanism.Kind(cfg.Privacy.Mechanism),
		Order:       cfg.Privacy.Order,
		Sensitivity: sens,
		// The exact calibration maximizes over the pairs this relation
		// admits (mechanism/exact.go); the others bound every pair.
		Neighbour: ChangeShape(cfg.Privacy.Neighbour, cfg.Contribution.MaxTrackedUsers > 0),
	}
	if bound.K > 0 && cfg.Privacy.Neighbour == config.NeighbourReplace {
		// The per-window curve a K-window period composes under replace is
		// max(c_r, 2·c_a) (see WindowBound): the curve of the same
		// mechanism over every change within the replace sensitivities,
		// add/remove-shaped ones included — the any-pair relation.
		spec.Neighbour = mechanism.AnyNeighbour
	}
	if spec.Kind == mechanism.Dirichlet {
		spec.Calibration = mechanism.Calibration(cfg.Privacy.Calibration)
		if spec.Calibration == mechanism.Optimal {
			// One calibration serves every count histogram (one curve per
			// unit); its error model uses the largest bin count among them.
			spec.ExpectedEvents = cfg.Privacy.ExpectedEventsPerRelease
			for _, h := range cfg.Histograms {
				if !h.IsAverage() {
					spec.Bins = max(spec.Bins, len(h.Bins))
				}
			}
		}
	}
	if cfg.Privacy.Mechanism == config.MechanismLaplacePosterior {
		spec.Kind = mechanism.Laplace // the noise; the posterior is post-processing (see Plan)
	}
	var cp *CountPlan
	switch shares := cfg.BudgetShares(hunits); {
	case shares != nil && cfg.Privacy.RDPEpsilon == 0: // validation refuses both
		if cp, err = viewsPlan(spec, shares, hunits, counts, tp, rdpEps, rdpDelta); err != nil {
			return nil, err
		}
		for _, v := range cp.Views {
			if v == nil {
				continue
			}
			if v.Mechanism, err = stageMechanism(cfg, v.Mechanism); err != nil {
				return nil, err
			}
			v.RDPEpsilon, v.RDPDelta = rdpEps, rdpDelta
		}
	case cfg.Privacy.RDPEpsilon > 0:
		if cp, err = explicitPlan(cfg, spec, counts, units, hbounds, tp, rdpEps, rdpDelta); err != nil {
			return nil, err
		}
	case tp != nil:
		if cp, err = planTotals(&spec, units, tp, spec.Order, rdpEps, rdpDelta); err != nil {
			return nil, err
		}
		cp.Sensitivity, cp.UnitsPerWindow = sens, counts
	default:
		p, err := budget.PlanReleases(spec, rdpEps, rdpDelta, units)
		if err != nil {
			return nil, fmt.Errorf("derive privacy plan: %w", err)
		}
		cp = &CountPlan{
			Sensitivity:    sens,
			UnitsPerWindow: counts,
			Units:          units,
			Mechanism:      p.Mechanism,
			Charge:         p.PerRelease,
			PlannedEpsilon: p.Epsilon,
		}
	}
	if cp.Views != nil {
		cp.Mechanism = cp.For(slices.IndexFunc(cp.Views, func(v *CountPlan) bool { return v != nil })).Mechanism
	} else if cp.Mechanism, err = stageMechanism(cfg, cp.Mechanism); err != nil {
		return nil, err
	}
	plan.Totals = tp
	cp.RDPEpsilon, cp.RDPDelta = rdpEps, rdpDelta
	if bound.K > 0 {
		cp.Reservations = make([]budget.Curve, len(cfg.Histograms))
		for i, h := range cfg.Histograms {
			if h.IsAverage() {
				continue
			}
			cp.Reservations[i] = cp.For(i).Charge.Scale(float64(hbounds[i].CountWindows))
			if err := cp.Reservations[i].Err(); err != nil {
				return nil, fmt.Errorf("derive privacy plan: histograms[%d]: %w", i, err)
			}
		}
	}
	plan.Count = cp
	plan.Orders = cp.Charge.Orders()
	return plan, nil
}

// HistWindows is the number of windows per budget period of the histogram
// of config index i: period / its window (histograms[].window, or
// window.size).
func HistWindows(cfg *config.Config, i int) (int, error) {
	h := cfg.Histograms[i]
	size, period := h.WindowSize(cfg.Window.Size).D(), cfg.Privacy.Budget.Period.D()
	base := cfg.Window.Size.D()
	if size <= 0 || base <= 0 || size%base != 0 || period < size || period%size != 0 {
		return 0, fmt.Errorf("histograms[%d].window (%s) must be a whole multiple of window.size (%s) dividing privacy.budget.period (%s)", i, size, base, period)
	}
	return int(period / size), nil
}

// planAverages calibrates the n average histograms and returns the period's
// reservation for them. The count histograms and the totals share the
// rest of the budget (they need some of it left: both parts strictly
// positive).
func planAverages(cfg *config.Config, windows int, hbounds []WindowBound, n int) (plans []AveragePlan, eps, delta float64, err error) {
	if n == 0 {
		return nil, 0, 0, nil
	}
	budgetEps, budgetDelta := cfg.Privacy.Budget.Epsilon, cfg.Privacy.Budget.Delta
	// Planned: the book's checks are exact, and W·n charges of share/(W·n)
	// are summed one at a time (rounded up). With the cross-window bound a
	// period composes AverageReleases releases of each histogram (its own
	// bound over its own windows), not W_h.
	// The averages always share the budget: with the count histograms, if
	// any, and with their own totals (totals.go), so half of δ by default,
	// and both parts must be strictly positive.
	share := budget.Planned(budgetDelta) / 2
	bounded := false
	releases := 0 // average releases per period
	for i, h := range cfg.Histograms {
		if !h.IsAverage() {
			continue
		}
		hw, err := HistWindows(cfg, i)
		if err != nil {
			return nil, 0, 0, err
		}
		if hb := hbounds[i]; hb.K > 0 {
			bounded = true
			hw = hb.AverageReleases
		}
		releases += hw
	}
	defDelta := share / float64(releases)
	for i, h := range cfg.Histograms {
		if !h.IsAverage() {
			continue
		}
		hw, _ := HistWindows(cfg, i)
		path := fmt.Sprintf("histograms[%d].average", i)
		d := h.Average.Delta
		if d == 0 {
			// The default is the δ charged: the residual multiplies the
			// mechanism's δ by (1+ρ)^d, so it is calibrated to the share
			// divided by that factor.
			d = defDelta / mechanism.GridResidualDeltaFactor(len(h.Bins))
		}
		m, err := mechanism.NewSimplexAverage(mechanism.AverageSpec{
			Bins: len(h.Bins), Users: h.Average.Users, Eta: h.Average.Eta, K: h.Average.K, TargetDelta: d,
		})
		if err != nil {
			return nil, 0, 0, fmt.Errorf("%s (%s): %w", path, h.Name, err)
		}
		ie, idr := m.DP()
		// Charged: the ideal mechanism's (ε, δ) with the release grid's
		// residual (mechanism.GridResidualDP; every coordinate of the padded
		// mean may change between neighbours).
		e, dr := mechanism.GridResidualDP(ie, idr, len(h.Bins))
		if math.IsInf(e, 1) || !(dr < 1) {
			return nil, 0, 0, fmt.Errorf("%s (%s): the release grid's residual over %d bins leaves no guarantee", path, h.Name, len(h.Bins))
		}
		plans = append(plans, AveragePlan{Index: i, Name: h.Name, Mechanism: m, Epsilon: e, Delta: dr, IdealEpsilon: ie, IdealDelta: idr, Windows: hw})
	}
	// The reservation is the sum the budget book will hold after every
	// planned average charge of a period: the same additions, in the same
	// order (base window by base window, the histograms whose windows end
	// there in config order), each rounded up (budget.AddUp) — not
	// W_h·ε_r, which can be below it by rounding. With the cross-window
	// bound each histogram charges one period reservation (its own
	// AverageReleases releases added up); the reservations are added in
	// config order — a sum of values each rounded up, which the book's
	// exact check of the same values in another order bounds to within
	// rounding, far inside Planned's margin.
	if bounded {
		for i := range plans {
			p := &plans[i]
			for j := 0; j < hbounds[p.Index].AverageReleases; j++ {
				p.ReserveEpsilon = budget.AddUp(p.ReserveEpsilon, p.Epsilon)
				p.ReserveDelta = budget.AddUp(p.ReserveDelta, p.Delta)
			}
			eps = budget.AddUp(eps, p.ReserveEpsilon)
			delta = budget.AddUp(delta, p.ReserveDelta)
		}
	} else {
		for w := 1; w <= windows; w++ {
			for _, p := range plans {
				if w%(windows/p.Windows) == 0 {
					eps = budget.AddUp(eps, p.Epsilon)
					delta = budget.AddUp(delta, p.Delta)
				}
			}
		}
	}
	fix := "raise average.users, lower average.k, lengthen window.size or raise privacy.budget.epsilon"
	if eps > budget.Planned(budgetEps) || eps >= budgetEps {
		return nil, 0, 0, fmt.Errorf("the average histograms' releases compose to ε = %.6g per period (%s), which leaves nothing of privacy.budget.epsilon = %g for the rest: %s",
			eps, averageEpsilons(plans), budgetEps, fix)
	}
	if delta > budget.Planned(budgetDelta) || delta >= budgetDelta {
		return nil, 0, 0, fmt.Errorf("the average histograms' releases compose to δ = %.6g per period, which leaves nothing of privacy.budget.delta = %g for the rest: lower average.delta", delta, budgetDelta)
	}
	return plans, eps, delta, nil
}

func averageEpsilons(plans []AveragePlan) string {
	s := ""
	for i, p := range plans {
		if i > 0 {
			s += " + "
		}
		s += fmt.Sprintf("%d windows × ε_r %.6g (%s)", p.Windows, p.Epsilon, p.Name)
	}
	return s
}

// stageMechanism returns the mechanism the stage releases with, given the
// calibrated noise mechanism m: m itself, or for laplace-posterior m wrapped
// in a mechanism.CountPosterior (same RDP curve, so the charge computed from
// m stays valid).
func stageMechanism(cfg *config.Config, m mechanism.Mechanism) (mechanism.Mechanism, error) {
	if cfg.Privacy.Mechanism != config.MechanismLaplacePosterior {
		return m, nil
	}
	pm, err := mechanism.NewCountPosterior(m, cfg.Privacy.PriorAlpha)
	if err != nil {
		return nil, fmt.Errorf("derive privacy plan: privacy.prior_alpha: %w", err)
	}
	return pm, nil
}

// explicitPlan calibrates every release to privacy.rdp_epsilon. The budget is
// then enforced release by release: the accountant refuses the first unit
// that would take the period past (ε, δ), and the stage publishes a
// budget_exhausted status instead. FitUnits says how many units fit (with
// the cross-window bound: how many whole reservations, in units).
func explicitPlan(cfg *config.Config, spec mechanism.Spec, counts, units int, hbounds []WindowBound, tp *TotalPlan, eps, delta float64) (*CountPlan, error) {
	spec.RDPEpsilon = cfg.Privacy.RDPEpsilon
	if tp != nil && tp.CountUnits > 0 {
		spec.RDPEpsilon *= 1 - tp.Share // the rest to the unit's totals
	}
	m, err := mechanism.New(spec)
	if err != nil {
		return nil, fmt.Errorf("derive privacy plan: privacy.rdp_epsilon: %w", err)
	}
	orders, err := budget.WithOrder(budget.DefaultOrders(), spec.Order)
	if err != nil {
		return nil, fmt.Errorf("derive privacy plan: %w", err)
	}
	charge := budget.ChargeOf(m, orders) // the curve plus the grid residual of a rounded (Dirichlet) mechanism
	if tp != nil && tp.CountUnits > 0 {
		n, c, _, err := totalNoise(spec.Order, tp.Sensitivity.L2Sq, tp.Share*cfg.Privacy.RDPEpsilon)
		if err != nil {
			return nil, fmt.Errorf("derive privacy plan: privacy.total_share: %w", err)
		}
		tp.Count, tp.CountCharge = n, c
		charge = charge.Add(c)
	}
	if tp != nil && tp.AverageUnits > 0 {
		// The average histograms' totals, planned alone to fit total_share
		// of the RDP part.
		alone := &TotalPlan{Share: 1, AverageUnits: tp.AverageUnits, Sensitivity: tp.Sensitivity}
		if _, err := planTotals(nil, 0, alone, spec.Order, tp.Share*eps, delta); err != nil {
			return nil, err
		}
		tp.Average, tp.AverageCharge = alone.Average, alone.AverageCharge
	}
	if err := charge.Err(); err != nil {
		return nil, fmt.Errorf("derive privacy plan: %w", err)
	}
	// FitUnits is what the book will accept one charge at a time; its
	// checks are exact, so count with the same rounding (Add, rounded up).
	// With the cross-window bound the book is charged whole reservations,
	// each count histogram's own, in the order their first units come.
	var steps []int
	bounded := len(hbounds) > 0 && hbounds[0].K > 0 // the bound is on for every histogram or none
	if bounded {
		for _, h := range ReservationOrder(cfg) {
			if !cfg.Histograms[h].IsAverage() {
				steps = append(steps, hbounds[h].CountWindows)
			}
		}
	} else {
		steps = slices.Repeat([]int{1}, units)
	}
	fit := 0
	total, _ := budget.ZeroCurve(orders)
	if tp != nil && tp.Average != nil {
		// The average histograms' totals are in the same RDP part: count
		// the units that fit beside them.
		total = total.Add(tp.AverageCharge.Scale(float64(tp.AverageUnits)))
	}
	for _, step := range steps {
		total = total.Add(charge.Scale(float64(step)))
		e, _ := budget.ToEpsilon(total, delta)
		if !(e <= eps) {
			break
		}
		fit += step
	}
	if fit == 0 {
		what := "a single release"
		if bounded {
			what = fmt.Sprintf("a single histogram's period reservation (%d windows)", steps[0])
		}
		return nil, fmt.Errorf("derive privacy plan: privacy.rdp_epsilon=%g: %s already exceeds the period budget left to count histograms (ε=%g, δ=%g); lower privacy.rdp_epsilon or raise privacy.budget.epsilon", spec.RDPEpsilon, what, eps, delta)
	}
	planned, _ := budget.ToEpsilon(charge.Scale(float64(fit)), delta)
	return &CountPlan{
		Sensitivity:    spec.Sensitivity,
		UnitsPerWindow: counts,
		Units:          units,
		FitUnits:       fit,
		Mechanism:      m,
		Charge:         charge,
		PlannedEpsilon: planned,
	}, nil
}

// ReservationOrder is the config histogram indices in the order their
// period reservations are first charged in a period with the cross-window
// bound: a histogram's first unit closes at the end of its first window, so
// by increasing window size, then config order (Releaser.Record records the
// histograms closing at one boundary in config order). With every
// histogram's reservation in the book the period's charge is the same in
// any order; the order only decides which one a too-small budget refuses.
func ReservationOrder(cfg *config.Config) []int {
	out := make([]int, len(cfg.Histograms))
	for i := range out {
		out[i] = i
	}
	slices.SortStableFunc(out, func(a, b int) int {
		return cmpDur(cfg.Histograms[a].WindowSize(cfg.Window.Size), cfg.Histograms[b].WindowSize(cfg.Window.Size))
	})
	return out
}

func cmpDur(a, b config.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ReservationOf is the RDP curve count histogram h's period reservation
// charges (Reservations[h]); empty without the cross-window bound.
func (cp *CountPlan) ReservationOf(h int) budget.Curve {
	if h < 0 || h >= len(cp.Reservations) {
		return budget.Curve{}
	}
	return cp.Reservations[h]
}
