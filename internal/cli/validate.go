package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
)

// Validate implements `stage validate --config FILE`: it checks the file
// (every problem reported with its YAML path) and prints the derived privacy
// plan without connecting to anything.
func Validate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "path to the stage's YAML config (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "stage validate: --config is required")
		return 2
	}
	cfg, pl, code := loadPlan(*path, stderr)
	if pl == nil {
		return code
	}
	// The schema files of avro and protobuf are compiled against the
	// configured fields, as the stage will at start (nothing is fetched).
	// A path through a list or map in a local schema is refused; a field a
	// schema does not have is a warning (its records would miss it).
	var schemaWarnings []string
	if cfg.Events.Format != config.FormatJSON && len(cfg.Events.SchemaFiles) > 0 {
		dec, err := decode.New(cfg, siphash.Key{})
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", *path, err)
			return 2
		}
		bad := false
		for i, n := range dec.SchemaFileNotes() {
			if len(n.ThroughList) > 0 {
				fmt.Fprintf(stderr, "%s: events.schema_files[%d] (id %d): %s goes through a list, a map or a scalar of the schema: a path can only name fields of nested records\n",
					*path, i, n.ID, strings.Join(n.ThroughList, ", "))
				bad = true
			}
			if len(n.Unresolved) > 0 {
				schemaWarnings = append(schemaWarnings, fmt.Sprintf("events.schema_files[%d]: schema id %d has no field %s: its records will miss it", i, n.ID, strings.Join(n.Unresolved, ", ")))
			}
		}
		if bad {
			return 2
		}
	}
	printPlan(stdout, cfg, pl)
	ws := append(cfg.Warnings(), plan.Warnings(cfg, pl)...)
	if len(ws)+len(schemaWarnings) > 0 {
		fmt.Fprintf(stdout, "\nwarnings\n")
		for _, w := range ws {
			fmt.Fprintf(stdout, "  %s\n", w)
		}
		for _, w := range schemaWarnings {
			fmt.Fprintf(stdout, "  %s\n", w)
		}
	}
	return 0
}

// loadPlan loads and validates path and derives its privacy plan, printing
// what is wrong on failure (exit code 2).
func loadPlan(path string, stderr io.Writer) (*config.Config, *plan.Plan, int) {
	cfg, code := loadConfig(path, stderr)
	if cfg == nil {
		return nil, nil, code
	}
	plan, err := plan.DerivePlan(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return nil, nil, 2
	}
	return cfg, plan, 0
}

// loadConfig loads and validates path, printing every problem with its YAML
// path on failure (exit code 2).
func loadConfig(path string, stderr io.Writer) (*config.Config, int) {
	cfg, err := config.Load(path)
	if err != nil {
		var ve *config.ValidationError
		if errors.As(err, &ve) {
			fmt.Fprintf(stderr, "%s: %d problem(s):\n", path, len(ve.Problems))
			for _, p := range ve.Problems {
				fmt.Fprintf(stderr, "  %s\n", p.String())
			}
			return nil, 2
		}
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return nil, 2
	}
	return cfg, 0
}

func printPlan(w io.Writer, cfg *config.Config, plan *plan.Plan) {
	fmt.Fprintf(w, "config OK\n\nprivacy plan\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  guarantee\t%s\n", guaranteeLine(cfg, plan))
	fmt.Fprintf(tw, "  δ and users\t%s\n", deltaUsers(cfg))
	printAveragePlan(tw, cfg, plan)
	if plan.Count != nil {
		printCountPlan(tw, cfg, plan)
	}
	printTotals(tw, "  ", cfg, plan)
	printSelection(tw, "  ", cfg, plan)
	for i, h := range cfg.Histograms {
		if h.IsAverage() {
			fmt.Fprintf(tw, "  histogram %s\taverage of %d-vectors over %d users, released every %s%s\n", h.Name, len(h.Bins), h.Average.Users, h.WindowSize(cfg.Window.Size).D(), viewShare(plan, i))
			continue
		}
		if h.Selects() {
			fmt.Fprintf(tw, "  histogram %s\t%d bins × the groups of %s selected per window, released every %s%s\n", h.Name, len(h.Bins), h.GroupBy, h.WindowSize(cfg.Window.Size).D(), viewShare(plan, i))
			continue
		}
		fmt.Fprintf(tw, "  histogram %s\t%d bins × %d groups, released every %s%s\n", h.Name, len(h.Bins), len(h.GroupNames()), h.WindowSize(cfg.Window.Size).D(), viewShare(plan, i))
	}
	tw.Flush()
}

// viewShare says, with the cross-window bound, what histogram i's view
// costs of the period budget: its own bound K_h over its W_h windows, and
// its period reservation — for a count histogram K′_h of the plan's
// Σ_h K′_h per-window curves (its share of the count histograms' RDP
// budget, and what the reservation alone converts to), for an average
// histogram its releases' (ε, δ) — ("" without the bound).
func viewShare(p *plan.Plan, i int) string {
	if p.Bound.K == 0 || i >= len(p.HistBounds) {
		return ""
	}
	b := p.HistBounds[i]
	if a := p.Average(i); a != nil {
		return fmt.Sprintf("; a user counts in at most %d of its %d windows a period: reservation of %d releases, ε=%.6g, δ=%.3g",
			b.K, b.Windows, b.AverageReleases, a.ReserveEpsilon, a.ReserveDelta)
	}
	cp := p.Count
	alone, _ := budget.ToEpsilon(cp.ReservationOf(i), cp.RDPDelta)
	return fmt.Sprintf("; a user counts in at most %d of its %d windows a period: reservation of %d per-window curves = %.3g%% of the count histograms' period budget (alone ε=%.6g at δ=%.3g)",
		b.K, b.Windows, b.CountWindows, 100*cp.ShareOf(i, b.CountWindows), alone, cp.RDPDelta)
}

// printAveragePlan prints the average histograms' (ε, δ) releases and their
// share of the budget.
func printAveragePlan(tw io.Writer, cfg *config.Config, plan *plan.Plan) {
	if len(plan.Averages) == 0 {
		return
	}
	for _, a := range plan.Averages {
		g := a.Mechanism.Guarantee()
		sp := a.Mechanism.Spec()
		fmt.Fprintf(tw, "  average %s\tsimplex Dirichlet Dir(k·p), k=%g, η=%g, users=%d: (ε=%.6g, δ=%.3g)-DP per release (γ=%.4g), grid residual included (ideal ε=%.6g, δ=%.3g; + %d·log((1+ρ)/(1−ρ)), ×(1+ρ)^%d, ρ=%g)\n",
			a.Name, sp.K, sp.Eta, sp.Users, a.Epsilon, a.Delta, g.Gamma, a.IdealEpsilon, a.IdealDelta, sp.Bins, sp.Bins, mechanism.ReleaseGridRho)
	}
	if b := plan.Bound; b.K > 0 && averageViewsDiffer(plan) {
		fmt.Fprintf(tw, "  average share\teach average histogram's own releases (its max_windows_per_user of its windows%s; see its line), basic composition: ε=%.6g, δ=%.3g per period, one reservation per histogram\n",
			replaceTwice(plan), plan.ApproxEpsilon, plan.ApproxDelta)
	} else if b.K > 0 {
		fmt.Fprintf(tw, "  average share\t%d releases (max_windows_per_user=%d of %d windows%s) × %d average histograms, basic composition: ε=%.6g, δ=%.3g per period, one reservation per histogram\n",
			b.AverageReleases, b.K, plan.WindowsPerPeriod, replaceTwice(plan), len(plan.Averages), plan.ApproxEpsilon, plan.ApproxDelta)
	} else {
		fmt.Fprintf(tw, "  average share\t%s, basic composition: ε=%.6g, δ=%.3g per period\n",
			averageComposition(plan), plan.ApproxEpsilon, plan.ApproxDelta)
	}
	if plan.Count != nil {
		fmt.Fprintf(tw, "  count share\tthe rest: ε=%.6g, δ=%.3g for the count histograms (RDP), the two parts added\n", plan.Count.RDPEpsilon, plan.Count.RDPDelta)
	}
}

func printCountPlan(tw io.Writer, cfg *config.Config, plan *plan.Plan) {
	cp := plan.Count
	spec := cp.Mechanism.Spec()
	params := cp.Mechanism.Params()
	fmt.Fprintf(tw, "  neighbour\t%s (max %d events per user per window per histogram)\n", plan.Neighbour, cfg.Contribution.MaxEventsPerUser)
	fmt.Fprintf(tw, "  sensitivity\tΔ1=%g  Δ2²=%g  Δ∞=%g\n", cp.Sensitivity.L1, cp.Sensitivity.L2Sq, cp.Sensitivity.LInf)
	fmt.Fprintf(tw, "  composition\t%s\n", compositionLine(cfg, plan, "count histograms"))
	fmt.Fprintf(tw, "  mechanism\t%s %s\n", cfg.Privacy.Mechanism, spec.Calibration) // laplace-posterior runs on a laplace spec
	if cp.Views != nil {
		printViewCalibrations(tw, "  ", cfg, plan)
	} else {
		fmt.Fprintf(tw, "  per release\t%s\n", perReleaseLine(plan, cp))
		fmt.Fprintf(tw, "  parameters\t%s\n", paramsText(params))
	}
	printUtilities(tw, "  ", cfg, plan)
	printActivity(tw, "  ", cfg, plan)
	units := cp.Units
	if cp.FitUnits > 0 && cp.FitUnits < cp.Units {
		units = cp.FitUnits
		if plan.Bound.K > 0 {
			fmt.Fprintf(tw, "  WARNING\tprivacy.rdp_epsilon fixes the calibration: the budget covers the period reservations of %d of the %d count histograms; the others get budget_exhausted status messages for the whole period\n",
				fittingReservations(cfg, plan), cp.UnitsPerWindow)
		} else {
			fmt.Fprintf(tw, "  WARNING\tprivacy.rdp_epsilon fixes the calibration: the budget covers %d of the %d charges per period (%.3g%% of windows); the rest get budget_exhausted status messages\n",
				cp.FitUnits, cp.Units, 100*float64(cp.FitUnits)/float64(cp.Units))
		}
	}
	composed := cp.Charge.Scale(float64(units))
	if units == cp.Units {
		composed = cp.Composed() // every view's own curves with budget shares
	}
	eps, order := budget.ToEpsilon(composed, cp.RDPDelta)
	if line := gridResidualLine(plan, units); line != "" {
		fmt.Fprintf(tw, "  grid residual\t%s\n", line)
	}
	fmt.Fprintf(tw, "  period total\tε=%.6g at δ=%.6g (best order λ=%g) over %d %s\n", eps, cp.RDPDelta, order, units, unitWord(plan))
	if math.IsInf(eps, 1) {
		fmt.Fprintf(tw, "  WARNING\tthe planned composition has no finite guarantee\n")
	}
}

// gridResidualLine describes the release grid's residual charged with
// every count release of a floating-point (Dirichlet) mechanism (issue #21
// item 1; mechanism.GridResidualRDP), and what units of the charge compose
// to without it; "" for the exact integer samplers.
func gridResidualLine(plan *plan.Plan, units int) string {
	cp := plan.Count
	spec := cp.Mechanism.Spec()
	if !mechanism.Rounded(spec.Kind) {
		return ""
	}
	k := mechanism.GridCoordinates(spec.Sensitivity)
	idealOf := func(v *countPlan, n int) budget.Curve {
		ideal := budget.CurveOf(v.Mechanism, v.Charge.Orders())
		if t := plan.Totals; t != nil && t.Count != nil {
			ideal = ideal.Add(t.CountCharge) // the units' totals: exact samplers, no residual
		}
		return ideal.Scale(float64(n))
	}
	composed := idealOf(cp, units)
	if cp.Views != nil { // budget shares: every view's own calibration over its own curves
		composed, _ = budget.ZeroCurve(cp.Charge.Orders())
		for _, v := range cp.Views {
			if v != nil {
				composed = composed.Add(idealOf(v, v.Units))
			}
		}
	}
	idealEps, _ := budget.ToEpsilon(composed, cp.RDPDelta)
	return fmt.Sprintf("e(λ) = k·[λ·log(1+ρ) − (λ−1)·log(1−ρ)]/(λ−1), k=%g changed coordinates, ρ=%g: %.6g per release at λ=%g, charged with every release (included below; without it the same calibration composes to ε=%.6g)",
		k, mechanism.ReleaseGridRho, mechanism.GridResidualRDP(spec.Order, k), spec.Order, idealEps)
}

// compositionLine says what a period composes of the count (or all)
// histograms: every window's unit, or with the cross-window bound
// min(K, windows) windows' curves charged as one reservation per histogram.
func compositionLine(cfg *config.Config, plan *plan.Plan, what string) string {
	cp := plan.Count
	b := plan.Bound
	if b.K == 0 {
		return countComposition(cfg, plan, what)
	}
	if views := viewComposition(cfg, plan); views != "" {
		return fmt.Sprintf("%s = %d per-window curves per period (each histogram its own max_windows_per_user of its own windows), charged as one period reservation per histogram",
			views, cp.Units)
	}
	return fmt.Sprintf("%d windows (max_windows_per_user=%d of %d) × %d %s = %d per-window curves per period, charged as one period reservation per histogram",
		b.CountWindows, b.K, plan.WindowsPerPeriod, cp.UnitsPerWindow, what, cp.Units)
}

// viewComposition is, with the cross-window bound and some count histogram
// under a bound or window other than the base one's, the sum of the count
// histograms' min(K_h, W_h) ("pages 2 of 1440 (1m) + hourly 24 of 24
// (1h)"); "" otherwise.
func viewComposition(cfg *config.Config, p *plan.Plan) string {
	s, differ := "", false
	for i, h := range cfg.Histograms {
		if h.IsAverage() || i >= len(p.HistBounds) {
			continue
		}
		b := p.HistBounds[i]
		if b != p.Bound {
			differ = true
		}
		if s != "" {
			s += " + "
		}
		s += fmt.Sprintf("%s %d of %d (%s)", h.Name, b.CountWindows, b.Windows, h.WindowSize(cfg.Window.Size).D())
	}
	if !differ {
		return ""
	}
	return s
}

// perReleaseLine states what one count release (one histogram's window)
// is charged at the calibration order: the charged value (the budget
// book's, budget.ChargeOf: the mechanism's curve rounded up, plus the
// release grid's residual for the floating-point mechanisms), printed
// rounded up, and what it is made of — not the calibration's ideal target
// (issue 28 item 5).
func perReleaseLine(p *plan.Plan, cp *plan.CountPlan) string {
	spec := cp.Mechanism.Spec()
	charged, ok := cp.Charge.At(spec.Order)
	if !ok { // the plans put the calibration order on the grid
		charged = budget.ChargeOf(cp.Mechanism, []float64{spec.Order}).Epsilons()[0]
	}
	parts := fmt.Sprintf("the mechanism's ε=%.6g", cp.Mechanism.RDP(spec.Order))
	if mechanism.Rounded(spec.Kind) {
		parts += fmt.Sprintf(" + the release grid's residual %.6g", mechanism.GridResidualRDP(spec.Order, mechanism.GridCoordinates(spec.Sensitivity)))
	}
	charge := " charged"
	if note := perReleaseNote(p); note != "" {
		charge = note
	}
	return fmt.Sprintf("(λ=%g, ε=%s)-RDP%s: %s, rounded up (calibrated to ε=%.6g)", spec.Order, fmtUpDigits(charged, 6), charge, parts, spec.RDPEpsilon)
}

// perReleaseNote says, with the cross-window bound under replace, that the
// per-release curve is max(c_r, 2·c_a) (plan's package doc).
func perReleaseNote(plan *plan.Plan) string {
	if plan.Bound.K > 0 && plan.Neighbour == config.NeighbourReplace {
		return " charged per window (max of the replace curve and twice the add_remove curve)"
	}
	return ""
}

// unitWord names what "period total" composed.
func unitWord(plan *plan.Plan) string {
	if plan.Bound.K > 0 {
		return "per-window curves"
	}
	return "charges"
}

// replaceTwice notes that under replace an average histogram's period
// composes up to 2K releases.
func replaceTwice(plan *plan.Plan) string {
	if plan.Neighbour == config.NeighbourReplace {
		return ", ×2 under replace"
	}
	return ""
}

// guaranteeLine states the period's guarantee with the total δ: the
// budget's δ plus the user-hash collision term 2n·2⁻⁶⁴ (config.Config.
// CollisionDelta), as a number with privacy.expected_users, else as a
// formula in n (issue 28 item 5).
func guaranteeLine(cfg *config.Config, p *plan.Plan) string {
	period := cfg.Privacy.Budget.Period.D()
	if !cfg.StatesTotalDelta() {
		return fmt.Sprintf("(ε=%g, δ=%g + 2n·2⁻⁶⁴)-DP per user per %s, n the users of a period (collisions of the 64-bit user hashes; set privacy.expected_users to state the total)",
			p.Epsilon, p.Delta, period)
	}
	return fmt.Sprintf("(ε=%g, δ=%s)-DP per user per %s (δ = %g of the budget + %s for user-hash collisions among privacy.expected_users = %d)",
		p.Epsilon, fmtUp(cfg.TotalDeltaOf(p.Delta)), period, p.Delta, fmtUp(cfg.CollisionDelta()), cfg.Privacy.ExpectedUsers)
}

// fmtUp formats v ≥ 0 so that the printed number is never below v (a
// stated δ must be an upper bound; %.3g rounds to nearest): the shortest
// of 3 to 6 significant digits that does not round down, else 6 digits
// rounded up.
func fmtUp(v float64) string { return fmtUpDigits(v, 3) }

// fmtUpDigits is fmtUp with lo to lo+3 significant digits.
func fmtUpDigits(v float64, lo int) string {
	if !(v > 0) || math.IsInf(v, 1) {
		return strconv.FormatFloat(v, 'g', lo, 64)
	}
	hi := lo + 3
	for digits := lo; digits <= hi; digits++ {
		s := strconv.FormatFloat(v, 'g', digits, 64)
		if r, err := strconv.ParseFloat(s, 64); err == nil && r >= v {
			return s
		}
	}
	scale := math.Pow(10, math.Floor(math.Log10(v))-float64(hi-1))
	for c := math.Floor(v / scale); ; c++ {
		s := strconv.FormatFloat(c*scale, 'g', hi, 64)
		if r, _ := strconv.ParseFloat(s, 64); r >= v {
			return s
		}
	}
}

// deltaUsers says how δ compares with the number of users: the guarantee
// means something only while δ·users ≪ 1 (see config.MaxDelta).
func deltaUsers(cfg *config.Config) string {
	d, n := cfg.Privacy.Budget.Delta, cfg.Privacy.ExpectedUsers
	if n > 0 {
		total := cfg.TotalDelta()
		return fmt.Sprintf("total δ = %s (δ = %g + user-hash collisions 2n·2⁻⁶⁴ = %s); δ·users = %.3g for privacy.expected_users = %d (keep it ≤ %g)",
			fmtUp(total), d, fmtUp(cfg.CollisionDelta()), total*float64(n), n, config.DeltaUsersWarn)
	}
	return fmt.Sprintf("δ·users ≤ %g up to %s users per period (set privacy.expected_users to check yours; the total δ adds 2n·2⁻⁶⁴ for user-hash collisions among n users)",
		config.DeltaUsersWarn, strconv.FormatFloat(math.Round(config.DeltaUsersWarn/d), 'f', 0, 64))
}

// printUtilities prints each count histogram's expected release error at
// the planning figure (plan.Utilities) beside the error of answering
// "uniform", with plan.Verdict's word for it (the one `stage plan`'s
// verdict column uses).
func printUtilities(tw io.Writer, indent string, cfg *config.Config, p *plan.Plan) {
	for _, u := range plan.Utilities(cfg, p) {
		fmt.Fprintf(tw, "%sexpected error\t%s: ℓ2 ≈ %.3g%s at %s; \"uniform\" scores %.3g (%.0f%%: %s)\n",
			indent, u.Histogram, u.L2, u.Over(), u.At(), u.UniformL2, 100*u.Ratio(), plan.Verdict(u.Ratio()))
	}
}

// printActivity prints, with privacy.expected_windows_per_user, what the
// plan predicts through a period for users at that figure
// (plan.PredictActivity): when windows count fewer than half, and fewer
// than plan.BlindShare, of their active users, and the error of the
// period's first and last windows and its mean.
func printActivity(tw io.Writer, indent string, cfg *config.Config, p *plan.Plan) {
	views, ok := plan.PredictViews(cfg, p)
	if !ok {
		return
	}
	for _, a := range views {
		fmt.Fprintf(tw, "%sactivity	%s\n", indent, activityLine(a))
	}
}

// activityLine describes an activity prediction in one line.
func activityLine(a plan.Activity) string {
	period := plan.ShortDuration(time.Duration(a.Windows) * a.Window)
	s := fmt.Sprintf("%s (%s windows): a user at the %dth percentile is active in %.4g of its %d windows of a period (p = %.3g per window", a.Histogram, plan.ShortDuration(a.Window), config.ActivityPercentile, a.PerUser, a.Windows, a.P)
	if a.Scale > 1 {
		s += fmt.Sprintf(" = 1 − (1 − %.3g)^%d: active in any of its %d windows of window.size", a.BasePerUser/float64(a.BaseWindows), a.Scale, a.Scale)
	}
	s += fmt.Sprintf("; %.3g%% of the count budget)", 100*a.ReservedShare)
	switch {
	case a.K == 0:
		s += "; no window bound: every window counts all of its users"
	case a.K >= a.Windows:
		s += fmt.Sprintf("; with K = %d of its %d windows every window counts every active user all %s", a.K, a.Windows, period)
	case a.Blind():
		s += fmt.Sprintf("; with K = %d windows count fewer than half of their active users after %s and go blind (fewer than %.0f%%) after %s of each %s", a.K, plan.ShortDuration(a.HalfAfter()), 100*plan.BlindShare, plan.ShortDuration(a.BlindAfter()), period)
	case a.HalfFrom < a.Windows:
		s += fmt.Sprintf("; with K = %d windows count fewer than half of their active users after %s of each %s (never fewer than %.0f%%)", a.K, plan.ShortDuration(a.HalfAfter()), period, 100*plan.BlindShare)
	default:
		s += fmt.Sprintf("; with K = %d every window counts at least half of its active users", a.K)
	}
	assumed := ""
	if a.Assumed {
		assumed = ", assumed"
	}
	return s + fmt.Sprintf("; predicted ℓ2: %.3g in the first window, %.3g in the last, mean %.3g over the period (%s; at %.4g events per release before the bound%s)",
		a.L2[0], a.L2[len(a.L2)-1], a.MeanL2, plan.Verdict(a.MeanRatio()), a.Events, assumed)
}

// fittingReservations is how many count histograms' period reservations
// the budget covers when privacy.rdp_epsilon fixes the calibration
// (plan.CountPlan.FitUnits: whole reservations, in plan.ReservationOrder).
func fittingReservations(cfg *config.Config, p *plan.Plan) int {
	n, units := 0, 0
	for _, h := range plan.ReservationOrder(cfg) {
		if cfg.Histograms[h].IsAverage() {
			continue
		}
		if units += p.HistBounds[h].CountWindows; units > p.Count.FitUnits {
			break
		}
		n++
	}
	return n
}

// averageViewsDiffer reports whether some average histogram has a bound or
// window other than the base one's (plan.Plan.HistBounds).
func averageViewsDiffer(p *plan.Plan) bool {
	for _, a := range p.Averages {
		if a.Index < len(p.HistBounds) && p.HistBounds[a.Index] != p.Bound {
			return true
		}
	}
	return false
}
