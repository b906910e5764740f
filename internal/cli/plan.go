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

const planUsage = `usage: stage plan --config FILE [--events N[,N...]] [--out DIR] [--reps N] [--seed S]

Answers "will my releases be useful, and what would make them so?" for a
real config: derives the stage's privacy plan (as stage run does), prints the
per-release calibration, and estimates the error of one release of each
histogram's group when its window holds N events, for each N given:
  ℓ2               mean ‖y − x/N‖₂ between the release y and the window's exact
                   normalized histogram x/N (95% confidence interval)
  KL               mean D_KL(x/N ‖ y) (Gaussian/Laplace: +Inf when y has a zero
                   where x/N does not; the share of such releases is shown)
  sampling ℓ2      mean ‖x/N − p‖₂, the error of the exact histogram itself as an
                   estimate of the true distribution p (no privacy)
  "uniform" ℓ2     mean ‖u − x/N‖₂ of the answer "uniform" (u = 1/d per bin),
                   a release that ignores the data
All by Monte-Carlo over x ~ Multinomial(N, p) and the mechanism's own draws,
for two true distributions over the declared bins: flat (p_i = 1/d) and
skewed (Zipf, p_i ∝ 1/i). The verdict compares ℓ2 with the distance of a
typical histogram from "uniform" (over the flat prior on histograms: 0.365
for 5 bins; the figure stage validate prints): "useful" up to 20% of it,
"rough" up to 50%, "near-uniform" beyond; when a row is not useful it says
from how many events per release this calibration is (the plan's error
model), and which other mechanism would be useful at this N.

With privacy.expected_windows_per_user it also predicts, through a budget
period, the share of each window's active users the window bound still
counts and each window's error, for the config and for the best K and
mechanism at each candidate window size (plan/activity.go), and recommends
the finest useful one.

Flags:
  --config FILE   the stage's YAML config (required)
  --events LIST   comma-separated events per window and group, e.g. 100,1000,10000
                  (default: the config's privacy.expected_events_per_release,
                  or 1000 when it has none)
  --out DIR       write plan.csv and plan.png (and with the activity figure
                  activity.csv and activity.png) into DIR; without it nothing
                  is written
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
	out := fs.String("out", "", "")
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
	outSet := false
	fs.Visit(func(f *flag.Flag) { outSet = outSet || f.Name == "out" })
	if outSet && *out == "" {
		fmt.Fprintln(stderr, "stage plan: --out must not be empty (leave it out to write no files)")
		return 2
	}
	eventsSet := strings.TrimSpace(*events) != ""
	var ns []int
	if eventsSet {
		var err error
		if ns, err = parseEvents(*events); err != nil {
			fmt.Fprintf(stderr, "stage plan: %v\n", err)
			return 2
		}
	}
	if *reps < 100 {
		fmt.Fprintf(stderr, "stage plan: --reps must be an integer ≥ 100, got %d\n", *reps)
		return 2
	}
	cfg, pl, code := loadPlan(*path, stderr)
	if pl == nil {
		return code
	}
	if pl.Count == nil {
		fmt.Fprintf(stderr, "stage plan: %s has only average histograms; `stage validate` prints their guarantee (stage plan draws the count histograms' errors)\n", *path)
		return 2
	}
	if !eventsSet {
		n, assumed := cfg.Privacy.ExpectedEventsPerRelease, false
		if !(n > 0) {
			n, assumed = plan.DefaultPlanningEvents, true
		}
		ns = []int{max(1, int(math.Round(min(n, 1e9))))}
		if assumed {
			fmt.Fprintf(stdout, "events per release: %d (assumed: the config has no privacy.expected_events_per_release; give --events or set it)\n\n", ns[0])
		} else {
			fmt.Fprintf(stdout, "events per release: %d (privacy.expected_events_per_release; --events gives others)\n\n", ns[0])
		}
	}
	printReleasePlan(stdout, cfg, pl)
	alts := printCalibrations(stdout, cfg, ns)

	var rows []planRow
	for i, h := range cfg.Histograms {
		if h.IsAverage() {
			fmt.Fprintf(stdout, "\nhistogram %q: average (simplex Dirichlet): see stage validate for its guarantee; not drawn here\n", h.Name)
			continue
		}
		d := len(h.Bins)
		m := pl.Count.For(i).Mechanism // the view's own calibration with budget shares
		hns, basis := ns, ""
		if !eventsSet { // each view at its own events (plan.ViewEvents), not the per-window.size figure
			n, how, _ := plan.ViewEvents(cfg, pl, i)
			hns, basis = []int{max(1, int(math.Round(min(n, 1e9))))}, how
		}
		pts, err := eval.PlanErrors(m, d, hns, *reps, *seed, runtime.NumCPU())
		if err != nil {
			fmt.Fprintf(stderr, "stage plan: histogram %s: %v\n", h.Name, err)
			return 1
		}
		groups := fmt.Sprintf("%d group(s)", max(len(h.Groups), 1))
		if h.Selects() {
			groups = fmt.Sprintf("the groups of %s selected per window", h.GroupBy)
		}
		if basis != "" {
			basis = fmt.Sprintf("; N = %d events per release: %s", hns[0], basis)
		}
		fmt.Fprintf(stdout, "\nhistogram %q: %d bins, %s — one release per group per window of %s%s; \"uniform\" scores %.3g on the flat prior%s\n",
			h.Name, d, groups, h.WindowSize(cfg.Window.Size).D(), viewShare(pl, i), plan.UniformL2(d), basis)
		var hrows []planRow
		for _, p := range pts {
			hrows = append(hrows, planRow{hist: h.Name, d: d, p: p, verdict: rowVerdict(m, d, p, alts, cfg)})
		}
		printPlanErrors(stdout, hrows)
		rows = append(rows, hrows...)
	}
	rec, hasActivity := plan.Recommend(cfg, pl, true)
	if hasActivity {
		printRecommendation(stdout, rec)
	}
	if !outSet {
		files := "plan.csv and plan.png"
		if hasActivity {
			files = "plan.csv, plan.png, activity.csv and activity.png"
		}
		fmt.Fprintf(stdout, "\n(no files written: --out DIR writes %s)\n", files)
		return 0
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(stderr, "stage plan: %v\n", err)
		return 1
	}
	cs := pl.Count.Mechanism.Spec()
	title := fmt.Sprintf("%s %s, (λ=%g, ε=%.3g)-RDP per release", cs.Kind, cs.Calibration, cs.Order, cs.RDPEpsilon)
	if k := pl.Bound.K; k > 0 {
		title += fmt.Sprintf(", max_windows_per_user=%d", k)
	}
	type file struct {
		name string
		fn   func(string) error
	}
	files := []file{
		{"plan.csv", func(p string) error { return writePlanCSV(p, rows) }},
		{"plan.png", func(p string) error { return eval.PlotPlan(p, title, planSeries(rows)) }},
	}
	if hasActivity {
		files = append(files,
			file{"activity.csv", func(p string) error { return writeActivityCSV(p, rec) }},
			file{"activity.png", func(p string) error { return plotActivity(p, cfg, rec) }})
	}
	var names []string
	for _, f := range files {
		p := filepath.Join(*out, f.name)
		if err := f.fn(p); err != nil {
			fmt.Fprintf(stderr, "stage plan: %s: %v\n", f.name, err)
			return 1
		}
		names = append(names, p)
	}
	fmt.Fprintf(stdout, "\nwrote %s\n", strings.Join(names, ", "))
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
	fmt.Fprintf(tw, "guarantee\t%s\n", guaranteeLine(cfg, plan))
	fmt.Fprintf(tw, "composition\t%s\n", compositionLine(cfg, plan, "histograms"))
	fmt.Fprintf(tw, "neighbour\t%s, max %d event(s) per user per window  (Δ1=%g Δ2²=%g Δ∞=%g)\n", plan.Neighbour,
		cfg.Contribution.MaxEventsPerUser, cp.Sensitivity.L1, cp.Sensitivity.L2Sq, cp.Sensitivity.LInf)
	fmt.Fprintf(tw, "mechanism\t%s\n", mech)
	if cp.Views != nil {
		printViewCalibrations(tw, "", cfg, plan)
	} else {
		fmt.Fprintf(tw, "per release\t%s\n", perReleaseLine(plan, cp))
	}
	switch {
	case cp.Views != nil:
		// each view's parameters are on its line above
	case spec.Kind == mechanism.Dirichlet:
		fmt.Fprintf(tw, "parameters\tα=%.6g r=%.6g (release Dir(r·x + α))\n", params.Alpha, params.R)
		if spec.Calibration == mechanism.Exact {
			if ok, why := mechanism.ExactCovers(spec); !ok {
				fmt.Fprintf(tw, "note\t%s\n", why)
			}
		}
	case spec.Kind == mechanism.Gaussian:
		fmt.Fprintf(tw, "parameters\tσ=%.6g per count\n", params.Sigma)
	case spec.Kind == mechanism.Laplace:
		fmt.Fprintf(tw, "parameters\tb=%.6g per count\n", params.Scale)
	}
	if line := gridResidualLine(plan, cp.Units); line != "" {
		fmt.Fprintf(tw, "grid residual\t%s\n", line)
	}
	printTotals(tw, "", cfg, plan)
	printSelection(tw, "", cfg, plan)
	printUtilities(tw, "", cfg, plan)
	fmt.Fprintf(tw, "\t(root-mean-square ℓ2 distance of a release from the true histogram, over a flat prior on the histogram; plan/utility.go)\n")
	tw.Flush()
}

func printPlanErrors(w io.Writer, rows []planRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "truth\tN\tℓ2 (95%% CI)\tKL\tsampling ℓ2\t\"uniform\" ℓ2\t\tverdict\n")
	for _, r := range rows {
		p := r.p
		klv := fmt.Sprintf("%.3g", p.KL.Mean())
		if f := p.KL.InfFraction(); f > 0 {
			klv = fmt.Sprintf("%s (+Inf %.0f%%)", klv, 100*f)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3g ± %.2g\t%s\t%.3g\t%.3g\t\t%s\n", p.Truth, p.N, p.L2.Mean(), p.L2.HalfWidth(), klv,
			p.Sampling.Mean(), p.UniformL2.Mean(), r.verdict)
	}
	tw.Flush()
}

// rowVerdict answers "will this be useful, and what would make it so" for
// one row: plan.Verdict of the row's ℓ2 against the flat prior's
// distance from "uniform" (the figure stage validate uses, so both say the
// same), and when it is not useful, the events per release from which this
// calibration is (plan.EventsForRatio, the error model) and the best other
// mechanism that is useful at this N (alts, from the calibrations table).
//
// (The verdict used to compare ℓ2 with the sampling error: since that falls
// as 1/√N while a calibrated release's error falls as 1/N only once N is
// large, and a Dirichlet release of a small window collapses to its prior
// — uniform, which is the flat truth itself — the ratio was not monotone
// in N: "marginal" at N = 100 but "too small" at 1,000, and "too small" at
// N = 15,000 where ℓ2 is 0.02.)
func rowVerdict(m mechanism.Mechanism, d int, p eval.PlanPoint, alts []altErrors, cfg *config.Config) string {
	ratio := p.L2.Mean() / plan.UniformL2(d)
	v := fmt.Sprintf("%s (%.0f%%)", plan.Verdict(ratio), 100*ratio)
	if ratio <= plan.UsefulRatio {
		return v
	}
	if n := plan.EventsForRatio(m, d, plan.UsefulRatio); !math.IsInf(n, 1) && n > float64(p.N) {
		v += fmt.Sprintf(": useful from N ≈ %s", humanCount(n))
	}
	best, bestL2 := "", plan.UsefulRatio*plan.UniformL2(d)
	for _, a := range alts {
		if m, ok := a.mech[p.N]; ok && a.name != currentMechanism(cfg) {
			if l2 := plan.ExpectedL2(m, d, float64(p.N)); l2 <= bestL2 {
				best, bestL2 = a.name, l2
			}
		}
	}
	if best != "" {
		v += fmt.Sprintf("; %s would be useful at this N (ℓ2 ≈ %.2g)", best, bestL2)
	}
	return v
}

// currentMechanism names the config's mechanism as comparedMechanisms do.
func currentMechanism(cfg *config.Config) string {
	if cfg.Privacy.Mechanism == config.MechanismDirichlet {
		return "dirichlet " + cfg.Privacy.Calibration
	}
	return cfg.Privacy.Mechanism
}

// humanCount writes n with thousands separators: 15000 → 15,000.
func humanCount(n float64) string {
	s := strconv.FormatFloat(math.Round(n), 'f', 0, 64)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

type planRow struct {
	hist    string
	d       int
	p       eval.PlanPoint
	verdict string
}

func writePlanCSV(path string, rows []planRow) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	fmt.Fprintln(f, "histogram,d,truth,n,reps,mean_l2,ci95_lo,ci95_hi,mean_kl,kl_inf_fraction,mean_sampling_l2,mean_uniform_answer_l2,mean_uniform_answer_kl,ratio_to_prior_uniform_l2,verdict")
	for _, r := range rows {
		p := r.p
		fmt.Fprintf(f, "%s,%d,%s,%d,%d,%.6g,%.6g,%.6g,%.6g,%.4g,%.6g,%.6g,%.6g,%.4g,%q\n", r.hist, r.d, p.Truth, p.N, p.L2.N,
			p.L2.Mean(), p.L2.Lo(), p.L2.Hi(), p.KL.Mean(), p.KL.InfFraction(), p.Sampling.Mean(), p.UniformL2.Mean(),
			p.UniformKL.Mean(), p.L2.Mean()/plan.UniformL2(r.d), r.verdict)
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

// altErrors is one row of printCalibrations: a mechanism calibrated at
// the config's budget for each N (optimal: at that N).
type altErrors struct {
	name string
	mech map[int]mechanism.Mechanism
}

// printCalibrations compares, at the config's budget, composition and
// contribution bounds, the expected ℓ2 error of one release of the first
// count histogram (plan.ExpectedL2) under every mechanism and Dirichlet
// calibration, at each N of --events (optimal calibrated at that N), and
// returns the table.
func printCalibrations(w io.Writer, cfg *config.Config, ns []int) []altErrors {
	hist := -1
	for i, h := range cfg.Histograms {
		if !h.IsAverage() {
			hist = i
			break
		}
	}
	if hist < 0 {
		return nil
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
	var alts []altErrors
	for _, m := range comparedMechanisms {
		fmt.Fprintf(tw, "%s\t", m.name)
		a := altErrors{name: m.name, mech: map[int]mechanism.Mechanism{}}
		for _, n := range ns {
			c := *cfg
			c.Privacy.Mechanism, c.Privacy.Calibration = m.mechanism, m.calibration
			c.Privacy.ExpectedEventsPerRelease = float64(n)
			c.Privacy.PriorAlpha = 0
			cell := "—"
			if p, err := plan.DerivePlan(&c); err == nil && p.Count != nil {
				a.mech[n] = p.Count.Mechanism
				cell = fmt.Sprintf("%.3g", plan.ExpectedL2(p.Count.Mechanism, d, float64(n)))
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		alts = append(alts, a)
		fmt.Fprintln(tw)
	}
	tw.Flush()
	return alts
}
