package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
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
	cfg, plan, code := loadPlan(*path, stderr)
	if plan == nil {
		return code
	}
	printPlan(stdout, cfg, plan)
	if ws := cfg.Warnings(); len(ws) > 0 {
		fmt.Fprintf(stdout, "\nwarnings\n")
		for _, w := range ws {
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
	fmt.Fprintf(tw, "  guarantee\t(ε=%g, δ=%g)-DP per user per %s\n", plan.Epsilon, plan.Delta, cfg.Privacy.Budget.Period.D())
	fmt.Fprintf(tw, "  δ and users\t%s\n", deltaUsers(cfg))
	printAveragePlan(tw, cfg, plan)
	if plan.Count != nil {
		printCountPlan(tw, cfg, plan)
	}
	for _, h := range cfg.Histograms {
		if h.IsAverage() {
			fmt.Fprintf(tw, "  histogram %s\taverage of %d-vectors over %d users, released every %s\n", h.Name, len(h.Bins), h.Average.Users, h.WindowSize(cfg.Window.Size).D())
			continue
		}
		fmt.Fprintf(tw, "  histogram %s\t%d bins × %d groups, released every %s\n", h.Name, len(h.Bins), len(h.GroupNames()), h.WindowSize(cfg.Window.Size).D())
	}
	tw.Flush()
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
		fmt.Fprintf(tw, "  average %s\tsimplex Dirichlet Dir(k·p), k=%g, η=%g, users=%d: (ε=%.6g, δ=%.3g)-DP per release (γ=%.4g)\n",
			a.Name, sp.K, sp.Eta, sp.Users, a.Epsilon, a.Delta, g.Gamma)
	}
	fmt.Fprintf(tw, "  average share\t%s, basic composition: ε=%.6g, δ=%.3g per period\n",
		averageComposition(plan), plan.ApproxEpsilon, plan.ApproxDelta)
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
	fmt.Fprintf(tw, "  composition\t%s\n", countComposition(cfg, plan, "count histograms"))
	fmt.Fprintf(tw, "  mechanism\t%s %s\n", cfg.Privacy.Mechanism, spec.Calibration) // laplace-posterior runs on a laplace spec
	fmt.Fprintf(tw, "  per release\t(λ=%g, ε=%.6g)-RDP\n", spec.Order, spec.RDPEpsilon)
	switch {
	case params.Alpha > 0:
		fmt.Fprintf(tw, "  parameters\tα=%.6g  r=%.6g\n", params.Alpha, params.R)
		if em, ok := cp.Mechanism.(mechanism.ErrorModel); ok {
			fmt.Fprintf(tw, "  expected error\tℓ2 ≈ %.4g at %g events per release (optimal calibration's model)\n", em.ExpectedError(), spec.ExpectedEvents)
		}
	case params.Sigma > 0:
		fmt.Fprintf(tw, "  parameters\tσ=%.6g\n", params.Sigma)
	case params.Scale > 0:
		fmt.Fprintf(tw, "  parameters\tb=%.6g\n", params.Scale)
	}
	units := cp.Units
	if cp.FitUnits > 0 && cp.FitUnits < cp.Units {
		units = cp.FitUnits
		fmt.Fprintf(tw, "  WARNING\tprivacy.rdp_epsilon fixes the calibration: the budget covers %d of the %d charges per period (%.3g%% of windows); the rest get budget_exhausted status messages\n",
			cp.FitUnits, cp.Units, 100*float64(cp.FitUnits)/float64(cp.Units))
	}
	eps, order := budget.ToEpsilon(cp.Charge.Scale(float64(units)), cp.RDPDelta)
	fmt.Fprintf(tw, "  period total\tε=%.6g at δ=%.6g (best order λ=%g) over %d charges\n", eps, cp.RDPDelta, order, units)
	if math.IsInf(eps, 1) {
		fmt.Fprintf(tw, "  WARNING\tthe planned composition has no finite guarantee\n")
	}
}

// deltaUsers says how δ compares with the number of users: the guarantee
// means something only while δ·users ≪ 1 (see config.MaxDelta).
func deltaUsers(cfg *config.Config) string {
	d, n := cfg.Privacy.Budget.Delta, cfg.Privacy.ExpectedUsers
	if n > 0 {
		return fmt.Sprintf("δ·users = %.3g for privacy.expected_users = %d (keep it ≤ %g)", d*float64(n), n, config.DeltaUsersWarn)
	}
	return fmt.Sprintf("δ·users ≤ %g up to %s users per period (set privacy.expected_users to check yours)",
		config.DeltaUsersWarn, strconv.FormatFloat(math.Round(config.DeltaUsersWarn/d), 'f', 0, 64))
}
