package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/eval"
	"github.com/dpstage/stage/plan"
)

// printRecommendation prints the activity prediction of `stage plan`: the
// config's, and the best K and mechanism per candidate window size
// (plan.Recommend), with the recommendation.
func printRecommendation(w io.Writer, rec plan.Recommendation) {
	cur := rec.Current
	assumed := ""
	if cur.Assumed {
		assumed = " (assumed: set privacy.expected_events_per_release)"
	}
	events := cur.Events * cur.BasePerUser / float64(cur.BaseWindows) / cur.P // N: the events of a release at window.size
	fmt.Fprintf(w, "\nactivity (privacy.expected_windows_per_user = %g, the %dth percentile of a user's active windows of window.size per period; %.4g events per release at window.size before the window bound%s)\n",
		cur.BasePerUser, config.ActivityPercentile, events, assumed)
	for _, v := range rec.Views {
		fmt.Fprintf(w, "this config: %s\n", activityLine(v))
	}
	fmt.Fprintf(w, "\npredicted through the period for users at the figure: the config's views, the best K and mechanism at each window size, then the views recommended in one budget (model: plan/activity.go)\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "configuration\tper-release ε\tcounted at the end\tℓ2 first\tℓ2 middle\tℓ2 last\tmean ℓ2\tblind after\t\tverdict\n")
	row := func(name string, a plan.Activity) {
		blind := "never"
		if a.Blind() {
			blind = plan.ShortDuration(a.BlindAfter())
		}
		fmt.Fprintf(tw, "%s\t%.3g\t%s\t%.3g\t%.3g\t%.3g\t%.3g\t%s\t\t%s (%.0f%%)\n", name, a.PerReleaseEpsilon, sharePct(a.Share[len(a.Share)-1]),
			a.L2[0], a.L2[len(a.L2)/2], a.L2[len(a.L2)-1], a.MeanL2, blind, plan.Verdict(a.MeanRatio()), 100*a.MeanRatio())
	}
	for _, v := range rec.Views {
		row("this config: "+viewName(v), v)
	}
	for _, b := range rec.Best {
		row(candidateName(b), b)
	}
	if mv := rec.Multi; mv != nil {
		for _, v := range mv.Views {
			row("views: "+viewName(v), v)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "(verdict on the mean ℓ2 over the period as a share of answering \"uniform\": useful ≤ %.0f%%, rough ≤ %.0f%%, near-uniform beyond)\n",
		100*plan.UsefulRatio, 100*plan.NearUniformRatio)
	fmt.Fprintf(w, "recommended: %s\n", rec.Advice())
	if mv := rec.Multi; mv != nil {
		what := "every coarser view useful"
		if !mv.Useful {
			what = "no K made every coarser view useful: the least summed error"
		}
		var sizes []string
		for _, v := range mv.Views {
			if s := plan.ShortDuration(v.Window); v.Scale > 1 && !slices.Contains(sizes, s) {
				sizes = append(sizes, s)
			}
		}
		fmt.Fprintf(w, "\nviews in one budget for returning users (searched: your count histograms at window.size with K on a grid and gaussian, laplace, dirichlet optimal, each with a copy at %s that counts every active user in every window; kept: %s, then the least mean ℓ2 of %s). Config lines to paste (your average histograms stay as they are):\n",
			strings.Join(sizes, ", "), what, mv.Views[mv.Base].Histogram)
		for _, l := range strings.Split(strings.TrimRight(mv.YAML(), "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", l)
		}
		if led := mv.Led; led != nil {
			lead := plan.ShortDuration(led.Lead)
			fmt.Fprintf(w, "\nthe same views with budget shares: the %s view leads, the %s view is a trend line (searched: the %s views' histograms[].budget_share from 0.05 to 0.9, each other coarser size's from 0.02 to 0.2, the %s views the rest; kept: the least mean ℓ2 of the %s views while the %s views stay rough or better and the others useful):\n",
				lead, plan.ShortDuration(mv.Config.Window.Size.D()), lead, plan.ShortDuration(mv.Config.Window.Size.D()), lead, plan.ShortDuration(mv.Config.Window.Size.D()))
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "view\tbudget share\tper-release ε\tmean ℓ2\tequal shares\t\tverdict\n")
			for i, v := range led.Views {
				fmt.Fprintf(tw, "%s\t%.3g%%\t%.3g\t%.3g\t%.3g\t\t%s (%.0f%%)\n", viewName(v), 100*v.ReservedShare, v.PerReleaseEpsilon, v.MeanL2, mv.Views[i].MeanL2, plan.Verdict(v.MeanRatio()), 100*v.MeanRatio())
			}
			tw.Flush()
			fmt.Fprintf(w, "Config lines to paste:\n")
			for _, l := range strings.Split(strings.TrimRight(led.YAML(), "\n"), "\n") {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
	}
}

// candidateName names a per-size candidate of plan.Recommend: every count
// histogram at one window size (no views of their own; issue 29 item 4 —
// "1m windows, K=462" read as the config's minute view it is not).
func candidateName(b plan.Activity) string {
	return "all at one size: " + b.Describe()
}

// sharePct formats a counted share: "67.4%", "<0.01%".
func sharePct(s float64) string {
	if s < 1e-4 {
		return "<0.01%"
	}
	return fmt.Sprintf("%.3g%%", 100*s)
}

// viewName names a view of a config: "pages (1h windows, K=24, gaussian)".
func viewName(a plan.Activity) string {
	k := "no window bound"
	if a.K > 0 {
		k = fmt.Sprintf("K=%d", a.K)
	}
	return fmt.Sprintf("%s (%s windows, %s, %s)", a.Histogram, plan.ShortDuration(a.Window), k, a.Mechanism)
}

// activityViews are the predictions stage plan draws and writes: the
// config's views, the best per window size, and the recommended views,
// each with its name and whether it is the config's.
func activityViews(rec plan.Recommendation) (names []string, this []bool, as []plan.Activity) {
	for _, v := range rec.Views {
		names, this, as = append(names, "this config: "+viewName(v)), append(this, true), append(as, v)
	}
	for _, b := range rec.Best {
		names, this, as = append(names, candidateName(b)), append(this, false), append(as, b)
	}
	if mv := rec.Multi; mv != nil {
		for _, v := range mv.Views {
			names, this, as = append(names, "views: "+viewName(v)), append(this, false), append(as, v)
		}
	}
	return names, this, as
}

// writeActivityCSV writes every evaluated window of the config's and the
// candidates' predictions.
func writeActivityCSV(path string, rec plan.Recommendation) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	fmt.Fprintln(f, "configuration,this_config,window_s,k,mechanism,per_release_rdp_epsilon,window_index,hours_into_period,counted_share,predicted_l2")
	names, this, as := activityViews(rec)
	for j, a := range as {
		for i, t := range a.T {
			fmt.Fprintf(f, "%q,%t,%g,%d,%s,%.6g,%d,%.6g,%.6g,%.6g\n", names[j], this[j], a.Window.Seconds(), a.K, a.Mechanism, a.PerReleaseEpsilon,
				t, (time.Duration(t) * a.Window).Hours(), a.Share[i], a.L2[i])
		}
	}
	return f.Close()
}

// plotActivity draws the predicted ℓ2 per window through the period of the
// config and each candidate, with the "uniform" answer's level and the
// usefulness threshold.
func plotActivity(path string, cfg *config.Config, rec plan.Recommendation) error {
	cur := rec.Current
	line := func(name string, a plan.Activity) eval.ActivityLine {
		l := eval.ActivityLine{Name: name}
		for i, t := range a.T { // a step per window evaluated
			l.Hours = append(l.Hours, (time.Duration(t) * a.Window).Hours(), (time.Duration(t+1) * a.Window).Hours())
			l.L2 = append(l.L2, a.L2[i], a.L2[i])
		}
		return l
	}
	var lines []eval.ActivityLine
	names, _, as := activityViews(rec)
	for j, a := range as {
		lines = append(lines, line(names[j], a))
	}
	end := cur.Period().Hours()
	lines = append(lines,
		eval.ActivityLine{Name: `answering "uniform"`, Reference: true, Hours: []float64{0, end}, L2: []float64{cur.UniformL2, cur.UniformL2}},
		eval.ActivityLine{Name: fmt.Sprintf("useful (%.0f%% of it)", 100*plan.UsefulRatio), Reference: true, Hours: []float64{0, end},
			L2: []float64{plan.UsefulRatio * cur.UniformL2, plan.UsefulRatio * cur.UniformL2}})
	title := fmt.Sprintf("%s: users active in %g of %d windows per %s (%dth pct.), ε=%g per period",
		cur.Histogram, cur.BasePerUser, cur.BaseWindows, plan.ShortDuration(cur.Period()), config.ActivityPercentile, cfg.Privacy.Budget.Epsilon)
	return eval.PlotActivity(path, title, lines)
}
