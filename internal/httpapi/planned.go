package httpapi

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/plan"
)

// PlannedView is what the plan predicts for one count histogram's view
// (issue 23) at the public planning figures privacy.expected_windows_per_user
// and privacy.expected_events_per_release (plan.PredictViews): a function
// of the public configuration only — never of the data, whose counts,
// users and drops are private (ground rule 8) — so /api/layout and the
// page can carry it. It is a prediction for users at the figure, not a
// measurement of the stream.
type PlannedView struct {
	// WindowsPerUser is privacy.expected_windows_per_user (the
	// config.ActivityPercentile-th percentile of a user's active windows
	// of window.size per period) and BaseWindows the windows of
	// window.size in a period; ActiveWindows is that figure in this view's
	// windows (plan.Activity.PerUser).
	WindowsPerUser float64 `json:"windows_per_user"`
	BaseWindows    int     `json:"base_windows_per_period"`
	ActiveWindows  float64 `json:"active_windows"`
	// CountedAtEnd is the predicted share of its active users the
	// period's last window still counts under the window bound.
	CountedAtEnd float64 `json:"counted_share_at_end"`
	// HalfAfterSeconds and BlindAfterSeconds are how far into each period
	// the view's windows count fewer than half, and (almost) none
	// (plan.BlindShare), of their active users; absent when they never do.
	HalfAfterSeconds  *float64 `json:"half_after_seconds,omitempty"`
	BlindAfterSeconds *float64 `json:"blind_after_seconds,omitempty"`
	// L2First, L2Last and MeanL2 are the predicted ℓ2 error of the view's
	// releases in the period's first and last window and on average;
	// UniformL2 is what answering "uniform" scores; Verdict is
	// plan.Verdict of the mean.
	L2First   float64 `json:"l2_first"`
	L2Last    float64 `json:"l2_last"`
	MeanL2    float64 `json:"mean_l2"`
	UniformL2 float64 `json:"uniform_l2"`
	Verdict   string  `json:"verdict"`
	// Text says it in one paragraph for the page.
	Text string `json:"text"`
}

// plannedViews predicts each count histogram of cfg (config index →
// prediction) under p, or derives p from cfg when nil. Nil without
// privacy.expected_windows_per_user or when no plan can be derived.
func plannedViews(cfg *config.Config, p *plan.Plan) (map[int]*PlannedView, error) {
	if !(cfg.Privacy.ExpectedWindowsPerUser > 0) {
		return nil, nil
	}
	if p == nil {
		var err error
		if p, err = plan.DerivePlan(cfg); err != nil {
			return nil, err
		}
	}
	views, ok := plan.PredictViews(cfg, p)
	if !ok {
		return nil, nil
	}
	out := map[int]*PlannedView{}
	for _, a := range views {
		out[a.Index] = newPlannedView(a)
	}
	return out, nil
}

func newPlannedView(a plan.Activity) *PlannedView {
	v := &PlannedView{WindowsPerUser: a.BasePerUser, BaseWindows: a.BaseWindows, ActiveWindows: a.PerUser,
		CountedAtEnd: a.Share[len(a.Share)-1], L2First: a.L2[0], L2Last: a.EndL2(), MeanL2: a.MeanL2,
		UniformL2: a.UniformL2, Verdict: plan.Verdict(a.MeanRatio())}
	if a.HalfFrom < a.Windows {
		s := a.HalfAfter().Seconds()
		v.HalfAfterSeconds = &s
	}
	if a.Blind() {
		s := a.BlindAfter().Seconds()
		v.BlindAfterSeconds = &s
	}
	period := periodWords(a.Period())
	base := a.Window / time.Duration(max(a.Scale, 1))
	t := fmt.Sprintf("Planned for users active in up to %s of the %s windows (%s each) of %s (privacy.expected_windows_per_user, the %dth percentile)",
		number(a.BasePerUser), thousands(a.BaseWindows), durWords(base), period, config.ActivityPercentile)
	if a.Scale > 1 {
		t += fmt.Sprintf(", that is in about %s of this view's %s windows (%s each)", number(a.PerUser), thousands(a.Windows), durWords(a.Window))
	}
	switch {
	case a.K <= 0 || a.K >= a.Windows:
		t += ": this view counts every active user " + allPeriod(a.Period())
	case a.Blind():
		t += fmt.Sprintf(": a user counts in at most %s of this view's windows %s, so this view counts (almost) none of them after about %s of each %s; its later releases are mostly noise",
			thousands(a.K), periodEach(a.Period()), durWords(a.BlindAfter()), periodNoun(a.Period()))
	case a.HalfFrom < a.Windows:
		t += fmt.Sprintf(": a user counts in at most %s of this view's windows %s, so this view counts fewer than half of them after about %s of each %s (never fewer than %.0f%%)",
			thousands(a.K), periodEach(a.Period()), durWords(a.HalfAfter()), periodNoun(a.Period()), 100*plan.BlindShare)
	default:
		t += ": this view counts at least half of them " + allPeriod(a.Period())
	}
	if a.Blind() {
		t += fmt.Sprintf(". Predicted error ℓ2 ≈ %s in the first window, %s at the end of the %s (answering \"uniform\" scores %s)", number(a.L2[0]), number(a.EndL2()), periodNoun(a.Period()), number(a.UniformL2))
	} else {
		t += fmt.Sprintf(". Predicted error ℓ2 ≈ %s per release on average (%s; answering \"uniform\" scores %s)", number(a.MeanL2), v.Verdict, number(a.UniformL2))
	}
	v.Text = t + ". This is a prediction from the public configuration, not a measurement of the data."
	return v
}

// periodWords is "a day", "an hour", "a week" or "a period of 6 hours".
func periodWords(d time.Duration) string {
	switch d {
	case time.Hour:
		return "an hour"
	case 24 * time.Hour:
		return "a day"
	case 7 * 24 * time.Hour:
		return "a week"
	}
	return "a period of " + durWords(d)
}

// periodEach is "a day", "an hour", "a week" or "per period".
func periodEach(d time.Duration) string {
	if periodNoun(d) == "period" {
		return "per period"
	}
	return periodWords(d)
}

// allPeriod is "all day", "all week", or "through the whole hour" /
// "through the whole period".
func allPeriod(d time.Duration) string {
	switch n := periodNoun(d); n {
	case "day", "week":
		return "all " + n
	default:
		return "through the whole " + n
	}
}

// periodNoun is "day", "hour", "week" or "period".
func periodNoun(d time.Duration) string {
	switch d {
	case time.Hour:
		return "hour"
	case 24 * time.Hour:
		return "day"
	case 7 * 24 * time.Hour:
		return "week"
	}
	return "period"
}

// durWords says a duration in one unit: "16 minutes", "1 hour",
// "7.5 hours", "2 days", "30 seconds".
func durWords(d time.Duration) string {
	unit := func(n float64, one, many string) string {
		s := strconv.FormatFloat(n, 'f', -1, 64)
		if n == 1 {
			return s + " " + one
		}
		return s + " " + many
	}
	switch {
	case d >= 48*time.Hour || (d >= 24*time.Hour && d%(24*time.Hour) == 0):
		return unit(math.Round(d.Hours()/24*10)/10, "day", "days")
	case d >= 2*time.Hour || (d >= time.Hour && d%time.Hour == 0):
		return unit(math.Round(d.Hours()*10)/10, "hour", "hours")
	case d >= 2*time.Minute || (d >= time.Minute && d%time.Minute == 0):
		return unit(math.Round(d.Minutes()), "minute", "minutes")
	}
	return unit(math.Round(d.Seconds()), "second", "seconds")
}

// thousands formats n with a comma every three digits: 1,440.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// number formats a figure with three significant digits, whole numbers
// of a thousand or more with commas.
func number(x float64) string {
	if x >= 1000 && x == math.Trunc(x) && x < 1e15 {
		return thousands(int(x))
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}
