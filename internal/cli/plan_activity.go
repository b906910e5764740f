package cli

import (
	"fmt"
	"io"
	"os"
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
	fmt.Fprintf(w, "\nactivity (privacy.expected_windows_per_user = %g, the %dth percentile of a user's active windows per period; %g events per release before the window bound%s)\n",
		cur.PerUser, config.ActivityPercentile, cur.Events, assumed)
	fmt.Fprintf(w, "this config: %s\n", activityLine(cur))
	fmt.Fprintf(w, "\npredicted through the period for users at the figure: the config, then the best K and mechanism at each window size (model: plan/activity.go)\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "configuration\tper-release ε\tcounted at the end\tℓ2 first\tℓ2 middle\tℓ2 last\tmean ℓ2\tblind after\t\tverdict\n")
	row := func(name string, a plan.Activity) {
		blind := "never"
		if a.Blind() {
			blind = plan.ShortDuration(a.BlindAfter())
		}
		fmt.Fprintf(tw, "%s\t%.3g\t%.3g%%\t%.3g\t%.3g\t%.3g\t%.3g\t%s\t\t%s (%.0f%%)\n", name, a.PerReleaseEpsilon, 100*a.Share[len(a.Share)-1],
			a.L2[0], a.L2[len(a.L2)/2], a.L2[len(a.L2)-1], a.MeanL2, blind, plan.Verdict(a.MeanRatio()), 100*a.MeanRatio())
	}
	row("this config: "+cur.Describe(), cur)
	for _, b := range rec.Best {
		row(b.Describe(), b)
	}
	tw.Flush()
	fmt.Fprintf(w, "(verdict on the mean ℓ2 over the period as a share of answering \"uniform\": useful ≤ %.0f%%, rough ≤ %.0f%%, near-uniform beyond)\n",
		100*plan.UsefulRatio, 100*plan.NearUniformRatio)
	fmt.Fprintf(w, "recommended: %s\n", rec.Advice())
}

// writeActivityCSV writes every evaluated window of the config's and the
// candidates' predictions.
func writeActivityCSV(path string, rec plan.Recommendation) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	fmt.Fprintln(f, "configuration,this_config,window_s,k,mechanism,per_release_rdp_epsilon,window_index,hours_into_period,counted_share,predicted_l2")
	write := func(a plan.Activity, this bool) {
		for i, t := range a.T {
			fmt.Fprintf(f, "%q,%t,%g,%d,%s,%.6g,%d,%.6g,%.6g,%.6g\n", a.Describe(), this, a.Window.Seconds(), a.K, a.Mechanism, a.PerReleaseEpsilon,
				t, (time.Duration(t) * a.Window).Hours(), a.Share[i], a.L2[i])
		}
	}
	write(rec.Current, true)
	for _, b := range rec.Best {
		write(b, false)
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
	lines := []eval.ActivityLine{line("this config: "+cur.Describe(), cur)}
	for _, b := range rec.Best {
		lines = append(lines, line(b.Describe(), b))
	}
	end := (time.Duration(cur.Windows) * cur.Window).Hours()
	lines = append(lines,
		eval.ActivityLine{Name: `answering "uniform"`, Reference: true, Hours: []float64{0, end}, L2: []float64{cur.UniformL2, cur.UniformL2}},
		eval.ActivityLine{Name: fmt.Sprintf("useful (%.0f%% of it)", 100*plan.UsefulRatio), Reference: true, Hours: []float64{0, end},
			L2: []float64{plan.UsefulRatio * cur.UniformL2, plan.UsefulRatio * cur.UniformL2}})
	title := fmt.Sprintf("%s: users active in %g of %d windows per %s (%dth pct.), ε=%g per period",
		cur.Histogram, cur.PerUser, cur.Windows, plan.ShortDuration(time.Duration(cur.Windows)*cur.Window), config.ActivityPercentile, cfg.Privacy.Budget.Epsilon)
	return eval.PlotActivity(path, title, lines)
}
