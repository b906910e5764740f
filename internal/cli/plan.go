package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/eval"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
)

const planUsage = `usage: stage plan --config FILE --events N[,N...] [--out DIR] [--reps N] [--seed S]

Answers "is my window big enough for this ε?" for a real config: derives the
stage's privacy plan (as stage run does), prints the per-release calibration,
and estimates the error of one release of each histogram's group when its
window holds N events, for each N given:
  ℓ2        mean ‖y − x/N‖₂ between the release y and the window's exact
            normalized histogram x/N (95% confidence interval)
  KL        mean D_KL(x/N ‖ y) (Gaussian/Laplace: +Inf when y has a zero where x/N
            does not; the share of such releases is shown)
  sampling  mean ‖x/N − p‖₂, the error of the exact histogram itself as an
            estimate of the true distribution p (no privacy)
  uniform   mean ‖u − x/N‖₂ of a release that ignores the data
All by Monte-Carlo over x ~ Multinomial(N, p) and the mechanism's own draws,
for two ground truths over the declared bins: uniform, and skewed (Zipf,
p_i ∝ 1/i). Verdict per row: "ok" when the privacy error is at most the
sampling error, "marginal" up to 3×, "too small" beyond (and "useless" when
no better than the uniform release). Writes plan.csv and plan.png into --out.

Flags:
  --config FILE   the stage's YAML config (required)
  --events LIST   comma-separated events per window and group, e.g. 100,1000,10000 (required)
  --out DIR       where plan.csv and plan.png go (default ./plan-out)
  --reps N        Monte-Carlo repetitions per point (default 500)
  --seed S        simulation seed (default 1)
`

// Plan implements `stage plan`. Exit codes: 0 success, 1 failure, 2 bad
// flags or configuration.
func Plan(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("config", "", "")
	events := fs.String("events", "", "")
	out := fs.String("out", "plan-out", "")
	reps := fs.Int("reps", 500, "")
	seed := fs.Uint64("seed", 1, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, planUsage)
			return 0
		}
		fmt.Fprintf(stderr, "stage plan: %v (see stage plan -h)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "stage plan: unexpected argument %q (see stage plan -h)\n", fs.Arg(0))
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "stage plan: --config is required (see stage plan -h)")
		return 2
	}
	ns, err := parseEvents(*events)
	if err != nil {
		fmt.Fprintf(stderr, "stage plan: %v\n", err)
		return 2
	}
	if *reps < 100 {
		fmt.Fprintf(stderr, "stage plan: --reps must be an integer ≥ 100, got %d\n", *reps)
		return 2
	}
	if *out == "" {
		fmt.Fprintln(stderr, "stage plan: --out must not be empty")
		return 2
	}
	cfg, plan, code := loadPlan(*path, stderr)
	if plan == nil {
		return code
	}
	if plan.Count == nil {
		fmt.Fprintf(stderr, "stage plan: %s has only average histograms; `stage validate` prints their guarantee (stage plan draws the count histograms' errors)\n", *path)
		return 2
	}
	printReleasePlan(stdout, cfg, plan)
	printCalibrations(stdout, cfg, ns)

	var rows []planRow
	for i, h := range cfg.Histograms {
		if h.IsAverage() {
			fmt.Fprintf(stdout, "\nhistogram %q: average (simplex Dirichlet): see stage validate for its guarantee; not drawn here\n", h.Name)
			continue
		}
		d := len(h.Bins)
		pts, err := eval.PlanErrors(plan.Count.Mechanism, d, ns, *reps, *seed, runtime.NumCPU())
		if err != nil {
			fmt.Fprintf(stderr, "stage plan: histogram %s: %v\n", h.Name, err)
			return 1
		}
		groups := len(h.Groups)
		if groups == 0 {
			groups = 1
		}
		fmt.Fprintf(stdout, "\nhistogram %q: %d bins, %d group(s) — one release per group per window of %s%s\n", h.Name, d, groups, h.WindowSize(cfg.Window.Size).D(), viewShare(plan, i))
		printPlanErrors(stdout, pts)
		for _, p := range pts {
			rows = append(rows, planRow{h.Name, d, p})
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(stderr, "stage plan: %v\n", err)
		return 1
	}
	cs := plan.Count.Mechanism.Spec()
	title := fmt.Sprintf("%s %s, (λ=%g, ε=%.3g)-RDP per release", cs.Kind, cs.Calibration, cs.Order, cs.RDPEpsilon)
	if k := plan.Bound.K; k > 0 {
		title += fmt.Sprintf(", max_windows_per_user=%d", k)
	}
	for _, f := range []struct {
		name string
		fn   func(string) error
	}{
		{"plan.csv", func(p string) error { return writePlanCSV(p, rows) }},
		{"plan.png", func(p string) error { return eval.PlotPlan(p, title, planSeries(rows)) }},
	} {
		if err := f.fn(filepath.Join(*out, f.name)); err != nil {
			fmt.Fprintf(stderr, "stage plan: %s: %v\n", f.name, err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "\nwrote %s and %s\n", filepath.Join(*out, "plan.csv"), filepath.Join(*out, "plan.png"))
	return 0
}

// parseEvents parses "100,1000,10000" into sorted distinct N ≥ 1.
func parseEvents(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("--events is required: comma-separated event counts per window, e.g. 100,1000,10000")
	}
	seen := map[int]bool{}
	var ns []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1e9 {
			return nil, fmt.Errorf("--events must be integers between 1 and 1e9, got %q", strings.TrimSpace(f))
		}
		if !seen[n] {
			seen[n] = true
			ns = append(ns, n)
		}
	}
	sort.Ints(ns)
	return ns, nil
}

func printReleasePlan(w io.Writer, cfg *config.Config, plan *plan.Plan) {
	cp := plan.Count // the caller checked it is there
	m := cp.Mechanism
	spec, params := m.Spec(), m.Params()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	mech := cfg.Privacy.Mechanism // laplace-posterior runs on a laplace spec
	if spec.Calibration != "" {
		mech += " (" + string(spec.Calibration) + ")"
	}
	fmt.Fprintf(tw, "guarantee\t(ε=%g, δ=%g)-DP per user per %s\n", plan.Epsilon, plan.Delta, cfg.Privacy.Budget.Period.D())
	fmt.Fprintf(tw, "composition\t%s\n", compositionLine(cfg, plan, "histograms"))
	fmt.Fprintf(tw, "neighbour\t%s, max %d event(s) per user per window  (Δ1=%g Δ2²=%g Δ∞=%g)\n", plan.Neighbour,
		cfg.Contribution.MaxEventsPerUser, cp.Sensitivity.L1, cp.Sensitivity.L2Sq, cp.Sensitivity.LInf)
	fmt.Fprintf(tw, "mechanism\t%s\n", mech)
	fmt.Fprintf(tw, "per release\t(λ=%g, ε=%.6g)-RDP%s\n", spec.Order, spec.RDPEpsilon, perReleaseNote(plan))
	switch spec.Kind {
	case mechanism.Dirichlet:
		fmt.Fprintf(tw, "parameters\tα=%.6g r=%.6g (release Dir(r·x + α))\n", params.Alpha, params.R)
		if spec.Calibration == mechanism.Exact {
			if ok, why := mechanism.ExactCovers(spec); !ok {
				fmt.Fprintf(tw, "note\t%s\n", why)
			}
		}
	case mechanism.Gaussian:
		fmt.Fprintf(tw, "parameters\tσ=%.6g per count\n", params.Sigma)
	case mechanism.Laplace:
		fmt.Fprintf(tw, "parameters\tb=%.6g per count\n", params.Scale)
	}
	if line := gridResidualLine(cp, cp.Units); line != "" {
		fmt.Fprintf(tw, "grid residual\t%s\n", line)
	}
	printUtilities(tw, "", cfg, plan)
	fmt.Fprintf(tw, "\t(root-mean-square ℓ2 distance of a release from the true histogram, over a flat prior on the histogram; plan/utility.go)\n")
	tw.Flush()
}

func printPlanErrors(w io.Writer, pts []eval.PlanPoint) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "truth\tN\tℓ2 (95%% CI)\tKL\tsampling ℓ2\tuniform ℓ2\tverdict\t\n")
	for _, p := range pts {
		klv := fmt.Sprintf("%.3g", p.KL.Mean())
		if f := p.KL.InfFraction(); f > 0 {
			klv = fmt.Sprintf("%s (+Inf %.0f%%)", klv, 100*f)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3g ± %.2g\t%s\t%.3g\t%.3g\t%s\t\n", p.Truth, p.N, p.L2.Mean(), p.L2.HalfWidth(), klv,
			p.Sampling.Mean(), p.UniformL2.Mean(), verdict(p))
	}
	tw.Flush()
}

// verdict compares the privacy error with the sampling error (see
// planUsage).
func verdict(p eval.PlanPoint) string {
	r := p.L2.Mean() / p.Sampling.Mean()
	switch {
	case p.Truth != "uniform" && p.L2.Mean() >= p.UniformL2.Mean():
		return "useless"
	case r <= 1:
		return "ok"
	case r <= 3:
		return fmt.Sprintf("marginal (%.1f× sampling)", r)
	default:
		return fmt.Sprintf("too small (%.1f× sampling)", r)
	}
}

type planRow struct {
	hist string
	d    int
	p    eval.PlanPoint
}

func writePlanCSV(path string, rows []planRow) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	fmt.Fprintln(f, "histogram,d,truth,n,reps,mean_l2,ci95_lo,ci95_hi,mean_kl,kl_inf_fraction,mean_sampling_l2,mean_uniform_l2,mean_uniform_kl,verdict")
	for _, r := range rows {
		p := r.p
		fmt.Fprintf(f, "%s,%d,%s,%d,%d,%.6g,%.6g,%.6g,%.6g,%.4g,%.6g,%.6g,%.6g,%q\n", r.hist, r.d, p.Truth, p.N, p.L2.N,
			p.L2.Mean(), p.L2.Lo(), p.L2.Hi(), p.KL.Mean(), p.KL.InfFraction(), p.Sampling.Mean(), p.UniformL2.Mean(),
			p.UniformKL.Mean(), verdict(p))
	}
	return f.Close()
}

// planSeries turns the rows into the plot's lines: private ℓ2 and sampling
// ℓ2 per (histogram, truth).
func planSeries(rows []planRow) []eval.PlanLine {
	idx := map[string]int{}
	var lines []eval.PlanLine
	add := func(name string, kind string, n int, y float64) {
		i, ok := idx[name]
		if !ok {
			i = len(lines)
			idx[name] = i
			lines = append(lines, eval.PlanLine{Name: name, Sampling: kind == "sampling"})
		}
		if !math.IsNaN(y) {
			lines[i].N = append(lines[i].N, float64(n))
			lines[i].L2 = append(lines[i].L2, y)
		}
	}
	for _, r := range rows {
		add(fmt.Sprintf("%s (d=%d), %s truth", r.hist, r.d, r.p.Truth), "private", r.p.N, r.p.L2.Mean())
	}
	for _, r := range rows {
		add(fmt.Sprintf("sampling error, %s, %s", r.hist, r.p.Truth), "sampling", r.p.N, r.p.Sampling.Mean())
	}
	return lines
}

// comparedMechanisms are the settings printCalibrations compares.
var comparedMechanisms = []struct{ name, mechanism, calibration string }{
	{"dirichlet concentrated", config.MechanismDirichlet, config.CalibrationConcentrated},
	{"dirichlet exact", config.MechanismDirichlet, config.CalibrationExact},
	{"dirichlet diffuse", config.MechanismDirichlet, config.CalibrationDiffuse},
	{"dirichlet optimal", config.MechanismDirichlet, config.CalibrationOptimal},
	{"gaussian", config.MechanismGaussian, ""},
	{"laplace", config.MechanismLaplace, ""},
}

// printCalibrations compares, at the config's budget, composition and
// contribution bounds, the expected ℓ2 error of one release of the first
// count histogram (plan.ExpectedL2) under every mechanism and Dirichlet
// calibration, at each N of --events (optimal calibrated at that N).
func printCalibrations(w io.Writer, cfg *config.Config, ns []int) {
	hist := -1
	for i, h := range cfg.Histograms {
		if !h.IsAverage() {
			hist = i
			break
		}
	}
	if hist < 0 {
		return
	}
	d := len(cfg.Histograms[hist].Bins)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\ncalibrations compared at this budget: expected ℓ2 of one release of %q (%d bins; flat prior; \"uniform\" scores %.3g)\n",
		cfg.Histograms[hist].Name, d, plan.UniformL2(d))
	fmt.Fprint(tw, "mechanism\t")
	for _, n := range ns {
		fmt.Fprintf(tw, "N=%d\t", n)
	}
	fmt.Fprintln(tw)
	for _, m := range comparedMechanisms {
		fmt.Fprintf(tw, "%s\t", m.name)
		for _, n := range ns {
			c := *cfg
			c.Privacy.Mechanism, c.Privacy.Calibration = m.mechanism, m.calibration
			c.Privacy.ExpectedEventsPerRelease = float64(n)
			c.Privacy.PriorAlpha = 0
			cell := "—"
			if p, err := plan.DerivePlan(&c); err == nil && p.Count != nil {
				cell = fmt.Sprintf("%.3g", plan.ExpectedL2(p.Count.Mechanism, d, float64(n)))
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
