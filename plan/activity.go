package plan

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/gonum/mathext"

	"github.com/dpstage/stage/config"
)

// # Planning by activity (privacy.expected_windows_per_user)
//
// The cross-window bound K = contribution.max_windows_per_user counts a
// user only in its K earliest active windows of a budget period. On a
// stream whose users come back all day, the users of a late window have
// mostly used up their K windows already, so the window counts few of them
// and its releases show noise over nearly empty counts. This file predicts
// that from two public planning figures: m = privacy.expected_windows_per_user
// (the ActivityPercentile-th percentile of how many of a period's W windows
// a user is active in) and N = privacy.expected_events_per_release (the
// events one release counts when every active user is counted, i.e. before
// the bound drops any).
//
// The model. A returning user is active in each window of the period
// independently with probability p = m/W, from the period's first window
// on. Window t (t = 0, 1, …, W−1: t windows of the period before it)
// counts an active user iff the user was active in fewer than K of those t
// windows, so the share of window t's active users it still counts is
//
//	share_t = P(Binomial(t, p) < K) = I_{1−p}(t − K + 1, K)   (t ≥ K; 1 for t < K)
//
// (CountedShare; I the regularized incomplete beta function), and the
// window's release counts N_t = N·share_t events. Its predicted error is
// ExpectedL2 of the plan's calibrated mechanism at N_t — the same model
// `stage validate` and the optimal calibration use (utility.go). share_t
// falls with t (Binomial(t+1, p) dominates Binomial(t, p)), so from the
// first window whose share is below BlindShare on, every window of the
// period is blind.
//
// Whom it describes. Every user is modelled at the percentile: P(Binomial
// (t, p) < K) falls as p grows, so the users below the percentile — nine in
// ten — are active less often, use their K windows later and fare better
// than predicted; the tenth above it fare worse. The prediction is
// therefore the share of the period's heavier users that a window keeps
// (a lower bound for nine users in ten at a given t), not the average.
//
// Limits. Real activity is not independent from window to window: sessions
// fill runs of consecutive windows (a user with m active windows in a few
// long sessions uses up K sooner within a session and is missing from the
// later ones exactly as predicted, but blind windows come in runs), and
// daily rhythms make p vary through the period (quiet hours use fewer of
// the K windows). Users who first appear late in the period are counted
// fully (they are new at that point), so windows late in a period keep
// those; the model has none. N is taken as constant through the period.
// The error model is ExpectedL2's: the flat prior on the true histogram.
//
// Candidate configurations (Recommend). For a window r times window.size
// the same model gives a user an active coarse window with probability
// p_r = 1 − (1 − p)^r (active in any of its r base windows), m_r =
// W_r·p_r, and the coarse window counts N_r = N·p_r/p events (its distinct
// users; a user's events per window are capped by max_events_per_user, so
// this is the conservative scaling). For each window size that divides the
// period the planner derives the stage's own plan (DerivePlan: the
// per-release calibration for K under the same (ε, δ) per period — the
// per-release charge grows with K) for a grid of K and the mechanisms, and
// keeps the one of least mean predicted error over the period.
//
// Views (histograms[].window, histograms[].max_windows_per_user). Each
// count histogram is predicted over its own windows: a window of r base
// windows (r = its window / window.size) is active for a user with
// probability p_r = 1 − (1 − p)^r, the view has W_h = period / its window
// windows and its own bound K_h (Plan.HistBounds), so window t of the view
// counts the share P(Binomial(t, p_r) < K_h) of its active users and
// N_r = N·p_r/p events when all are counted. N_r is N scaled by the view's
// distinct active users (U·p_r against U·p), each counted with the events
// one base window gives it: exact when a user has one event per active
// window and max_events_per_user is 1, a lower bound on the view's events
// (an upper bound on its error) otherwise, since a user active in several
// of the r base windows has more events, up to max_events_per_user. The
// views share one calibration (DerivePlan: one per-window curve, the
// budget spread over Units = Σ_h K′_h of them), so every view's releases
// have the same per-release ε; view h's reservation is the share
// K′_h / Units of the count histograms' budget (Activity.ReservedShare).
// With privacy.calibration: optimal that calibration is tuned to N at the
// largest bin count (expected_events_per_release is per base window), not
// to each view's N_r.

// BlindShare is the share of its active returning users below which a
// window is called blind: it counts (almost) none of them.
const BlindShare = 0.05

// activitySamples bounds the windows an Activity evaluates: periods of more
// windows are evaluated at this many evenly spaced windows (the mean over
// the period is then the mean over those).
const activitySamples = 2000

// CountedShare is P(Binomial(t, p) < k): the share of window t's active
// users (t windows of the period before it) that the cross-window bound k
// still counts when each user is active in each window with probability p,
// independently (see "Planning by activity"). 1 when k ≤ 0 (no bound).
func CountedShare(t int, p float64, k int) float64 {
	switch {
	case k <= 0 || t < k || !(p > 0):
		return 1
	case p >= 1:
		return 0
	}
	return mathext.RegIncBeta(float64(t-k+1), float64(k), 1-p)
}

// Activity is the prediction of one configuration through one budget
// period for users at the activity figure.
type Activity struct {
	// Mechanism is the mechanism and calibration, e.g. "gaussian" or
	// "dirichlet optimal".
	Mechanism string
	// Window is the window size; Windows (W) the windows of one period.
	Window  time.Duration
	Windows int
	// K is contribution.max_windows_per_user (0: no bound).
	K int
	// PerUser is the activity figure m in these windows, P = m/W.
	PerUser, P float64
	// Events is N: the events one release counts when every active user
	// is counted; Assumed when the config did not give it.
	Events  float64
	Assumed bool
	// PerReleaseEpsilon is the calibrated mechanism's RDP ε per release at
	// privacy.order.
	PerReleaseEpsilon float64
	// Histogram and Bins name the count histogram predicted, Index its
	// config index.
	Histogram string
	Bins      int
	Index     int
	// Scale is r: the view's window in windows of window.size (1 for a
	// histogram at window.size). BasePerUser is the activity figure itself
	// (privacy.expected_windows_per_user, in base windows) and BaseWindows
	// the base windows of a period; PerUser = Windows·P with
	// P = 1 − (1 − BasePerUser/BaseWindows)^Scale.
	Scale       int
	BasePerUser float64
	BaseWindows int
	// ReservedShare is the view's share of the count histograms' budget:
	// K′_h / Units with the window bound (its reservation), W_h / Units
	// without.
	ReservedShare float64
	// T are the windows evaluated (every window of the period, or
	// activitySamples evenly spaced ones); Share[i] is CountedShare at
	// window T[i] and L2[i] the predicted ℓ2 error of its releases.
	T         []int
	Share, L2 []float64
	// MeanL2 is the mean of L2 over the period.
	MeanL2 float64
	// UniformL2 is what answering "uniform" scores (UniformL2(Bins)).
	UniformL2 float64
	// HalfFrom and BlindFrom are the first windows that count fewer than
	// half, and fewer than BlindShare, of their active users; Windows when
	// no window of the period does.
	HalfFrom, BlindFrom int
}

// MeanRatio is MeanL2 / UniformL2 (Verdict reads it).
func (a Activity) MeanRatio() float64 { return a.MeanL2 / a.UniformL2 }

// BlindAfter is how far into each period windows go blind (BlindFrom
// windows); the period itself when they never do.
func (a Activity) BlindAfter() time.Duration { return time.Duration(a.BlindFrom) * a.Window }

// HalfAfter is how far into each period windows count fewer than half of
// their active users.
func (a Activity) HalfAfter() time.Duration { return time.Duration(a.HalfFrom) * a.Window }

// Blind reports whether windows go blind within the period.
func (a Activity) Blind() bool { return a.BlindFrom < a.Windows }

// Describe is a short name of the configuration: "1h windows, K=24,
// gaussian".
func (a Activity) Describe() string {
	k := "no window bound"
	if a.K > 0 {
		k = fmt.Sprintf("K=%d", a.K)
	}
	return fmt.Sprintf("%s windows, %s, %s", ShortDuration(a.Window), k, a.Mechanism)
}

// Settings are the config lines of the configuration: "window.size: 1h,
// contribution.max_windows_per_user: 24, privacy.mechanism: gaussian".
func (a Activity) Settings() string {
	mech := "privacy.mechanism: " + a.Mechanism
	if m, c, ok := strings.Cut(a.Mechanism, " "); ok {
		mech = "privacy.mechanism: " + m + ", privacy.calibration: " + c
	}
	return fmt.Sprintf("window.size: %s, contribution.max_windows_per_user: %d, %s", ShortDuration(a.Window), a.K, mech)
}

// PredictActivity predicts the config's count histogram with the most bins
// (the first of them on a tie) through a period for users at
// privacy.expected_windows_per_user, over its own view (PredictView).
// False when the figure is not given or there is no count histogram.
func PredictActivity(cfg *config.Config, p *Plan) (Activity, bool) {
	return PredictView(cfg, p, activityHist(cfg))
}

// PredictViews predicts every count histogram of cfg (config order), each
// over its own view: its window, its own bound K_h and its events per
// release N_r (see "Views"). False when the figure is not given or there
// is no count histogram.
func PredictViews(cfg *config.Config, p *Plan) ([]Activity, bool) {
	var out []Activity
	for i, h := range cfg.Histograms {
		if h.IsAverage() {
			continue
		}
		a, ok := PredictView(cfg, p, i)
		if !ok {
			return nil, false
		}
		out = append(out, a)
	}
	return out, len(out) > 0
}

// PredictView predicts count histogram i of cfg (with p its plan) through
// a period for users at privacy.expected_windows_per_user, over the
// histogram's own view. False when the figure is not given, i is not a
// count histogram, or its windows do not divide the period.
func PredictView(cfg *config.Config, p *Plan, i int) (Activity, bool) {
	m := cfg.Privacy.ExpectedWindowsPerUser
	if !(m > 0) || i < 0 || i >= len(cfg.Histograms) || cfg.Histograms[i].IsAverage() || p.Count == nil || p.WindowsPerPeriod < 1 {
		return Activity{}, false
	}
	windows, err := HistWindows(cfg, i)
	if err != nil {
		return Activity{}, false
	}
	h := cfg.Histograms[i]
	r := int(h.WindowSize(cfg.Window.Size).D() / cfg.Window.Size.D())
	p0 := min(m/float64(p.WindowsPerPeriod), 1)
	pr := coarseP(p0, r)
	n, assumed := planningEvents(cfg)
	k := 0
	if i < len(p.HistBounds) {
		k = p.HistBounds[i].K
	}
	a := predict(p, i, h, mechanismName(cfg), h.WindowSize(cfg.Window.Size).D(), windows, k, float64(windows)*pr, n*pr/p0)
	a.Assumed, a.Index, a.Scale, a.BasePerUser, a.BaseWindows = assumed, i, r, m, p.WindowsPerPeriod
	own := windows
	if k > 0 {
		own = p.HistBounds[i].CountWindows
	}
	a.ReservedShare = p.Count.ShareOf(i, own)
	return a, true
}

// coarseP is p_r = 1 − (1 − p)^r: the probability that a user active in
// each base window with probability p is active in a window of r of them.
func coarseP(p float64, r int) float64 {
	if p >= 1 {
		return 1
	}
	return -math.Expm1(float64(r) * math.Log1p(-p))
}

// planningEvents is expected_events_per_release, or DefaultPlanningEvents
// (assumed).
func planningEvents(cfg *config.Config) (float64, bool) {
	if n := cfg.Privacy.ExpectedEventsPerRelease; n > 0 {
		return n, false
	}
	return DefaultPlanningEvents, true
}

// activityHist is the config index of the count histogram with the most
// bins (the first on a tie), -1 without count histograms.
func activityHist(cfg *config.Config) int {
	best := -1
	for i, h := range cfg.Histograms {
		if !h.IsAverage() && (best < 0 || len(h.Bins) > len(cfg.Histograms[best].Bins)) {
			best = i
		}
	}
	return best
}

func mechanismName(cfg *config.Config) string {
	if cfg.Privacy.Mechanism == config.MechanismDirichlet && cfg.Privacy.Calibration != "" {
		return cfg.Privacy.Mechanism + " " + cfg.Privacy.Calibration
	}
	return cfg.Privacy.Mechanism
}

// predict evaluates p's count mechanism on histogram h through a period of
// windows windows of size window, with bound k, activity figure perUser
// and n events per release before the bound.
func predict(p *Plan, hi int, h config.Histogram, mech string, window time.Duration, windows, k int, perUser, n float64) Activity {
	d := len(h.Bins)
	a := Activity{
		Mechanism: mech, Window: window, Windows: windows, K: k,
		PerUser: perUser, P: min(perUser/float64(windows), 1), Events: n,
		PerReleaseEpsilon: p.Count.For(hi).Mechanism.Spec().RDPEpsilon,
		Histogram:         h.Name, Bins: d, UniformL2: UniformL2(d),
	}
	a.T = sampleWindows(windows)
	a.Share = make([]float64, len(a.T))
	a.L2 = make([]float64, len(a.T))
	sum := 0.0
	for i, t := range a.T {
		a.Share[i] = CountedShare(t, a.P, k)
		a.L2[i] = ExpectedL2(p.Count.For(hi).Mechanism, d, n*a.Share[i])
		sum += a.L2[i]
	}
	a.MeanL2 = sum / float64(len(a.T))
	a.HalfFrom = firstBelow(windows, a.P, k, 0.5)
	a.BlindFrom = firstBelow(windows, a.P, k, BlindShare)
	return a
}

// sampleWindows returns 0, …, windows−1, or activitySamples of them evenly
// spaced (first and last included).
func sampleWindows(windows int) []int {
	n := min(windows, activitySamples)
	ts := make([]int, n)
	for i := range ts {
		if n == windows {
			ts[i] = i
		} else {
			ts[i] = int(math.Round(float64(i) * float64(windows-1) / float64(n-1)))
		}
	}
	return ts
}

// firstBelow is the first window t < windows with CountedShare(t, p, k) <
// share (CountedShare falls with t: a bisection), windows when none.
func firstBelow(windows int, p float64, k int, share float64) int {
	return sort.Search(windows, func(t int) bool { return CountedShare(t, p, k) < share })
}

// Recommendation is what the planner recommends for the activity figure:
// per candidate window size, the configuration of least mean predicted
// error over the period.
type Recommendation struct {
	// Current is the config as it is: the prediction of its count
	// histogram with the most bins (PredictActivity).
	Current Activity
	// Views are the config's count histograms, each over its own view
	// (PredictViews).
	Views []Activity
	// Multi is the multi-view configuration recommended for returning
	// users (recommendViews); nil when the period has no coarser window
	// size than window.size.
	Multi *MultiView
	// Best holds, for each candidate window size (finest first), the K and
	// mechanism of least mean predicted error over the period.
	Best []Activity
	// Finest is the index in Best of the finest window size whose best
	// configuration is useful (MeanRatio ≤ UsefulRatio); -1 when none is.
	Finest int
	// Own is the index in Best of the config's own window size.
	Own int
}

// candidateSizes are the window sizes Recommend tries (those that are
// whole multiples of window.size and divide the period, with window.size
// and the period itself).
var candidateSizes = []time.Duration{time.Second, 10 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute,
	time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}

// Recommend searches, for the activity figure of cfg (given), each
// candidate window size (window.size, the multiples of it in
// candidateSizes that divide the period, and the period) over a grid of K
// (1 to the period's windows, about ×1.5 apart, with the figure and the
// config's own K; refined between the best one's neighbours) for the
// gaussian and laplace mechanisms, and evaluates
// the Dirichlet mechanism with the optimal calibration at the gaussian's
// best K — at every window size when dirichletEverywhere, otherwise at the
// config's own window size only (each optimal calibration takes about half
// a second; `stage validate` and `stage run` leave the others out, `stage
// plan` includes them). Every candidate is planned by DerivePlan under the
// config's (ε, δ) per period, its contribution bounds, neighbour relation
// and histograms, all at the candidate's window (histograms[].window
// cleared, max_tracked_users off, privacy.rdp_epsilon cleared). False when
// PredictActivity is.
func Recommend(cfg *config.Config, p *Plan, dirichletEverywhere bool) (Recommendation, bool) {
	cur, ok := PredictActivity(cfg, p)
	if !ok {
		return Recommendation{}, false
	}
	views, _ := PredictViews(cfg, p)
	rec := Recommendation{Current: cur, Views: views, Finest: -1, Own: -1}
	hist := activityHist(cfg)
	base, period := cfg.Window.Size.D(), cfg.Privacy.Budget.Period.D()
	p0 := min(cfg.Privacy.ExpectedWindowsPerUser/float64(p.WindowsPerPeriod), 1)
	events, _ := planningEvents(cfg)
	sizes := []time.Duration{base}
	for _, s := range append(slices.Clone(candidateSizes), period) {
		if s > base && s%base == 0 && period%s == 0 && !slices.Contains(sizes, s) {
			sizes = append(sizes, s)
		}
	}
	for _, size := range sizes {
		r := float64(size / base)
		windows := int(period / size)
		pr := coarseP(p0, int(r))
		m, n := float64(windows)*pr, events*pr/p0
		var best *Activity
		consider := func(a Activity) {
			if best == nil || a.MeanL2 < best.MeanL2 {
				best = &a
			}
		}
		bestK := map[string]int{} // per mechanism
		grid := kGrid(windows, m, cfg.Contribution.MaxWindowsPerUser, size == base)
		for _, mech := range []string{config.MechanismGaussian, config.MechanismLaplace} {
			// The mean error at K (+Inf when it cannot be planned), memoized.
			seen := map[int]float64{}
			at := func(k int) float64 {
				if e, ok := seen[k]; ok {
					return e
				}
				e := math.Inf(1)
				if a, ok := candidate(cfg, hist, size, windows, k, m, n, mech, ""); ok {
					consider(a)
					e = a.MeanL2
				}
				seen[k] = e
				return e
			}
			bi := -1
			for i, k := range grid {
				if e := at(k); bi < 0 || e < at(grid[bi]) {
					bi = i
				}
			}
			if bi < 0 || math.IsInf(at(grid[bi]), 1) {
				continue
			}
			// Refine between the grid's neighbours of the best K: the mean
			// error is unimodal there (noise falls, blind windows rise with
			// K), so a ternary search on whole K finds its minimum.
			lo, hi := grid[max(bi-1, 0)], grid[min(bi+1, len(grid)-1)]
			for hi-lo > 2 {
				m1, m2 := lo+(hi-lo)/3, hi-(hi-lo)/3
				if at(m1) <= at(m2) {
					hi = m2
				} else {
					lo = m1
				}
			}
			k := grid[bi]
			for j := lo; j <= hi; j++ {
				if at(j) < at(k) {
					k = j
				}
			}
			bestK[mech] = k
		}
		if k := bestK[config.MechanismGaussian]; k > 0 && (dirichletEverywhere || size == base) {
			if a, ok := candidate(cfg, hist, size, windows, k, m, n, config.MechanismDirichlet, config.CalibrationOptimal); ok {
				consider(a)
			}
		}
		if best == nil {
			continue
		}
		best.Assumed = cur.Assumed
		if size == base {
			rec.Own = len(rec.Best)
		}
		if rec.Finest < 0 && best.MeanRatio() <= UsefulRatio {
			rec.Finest = len(rec.Best)
		}
		rec.Best = append(rec.Best, *best)
	}
	rec.Multi = recommendViews(cfg, dirichletEverywhere)
	return rec, true
}

// kGrid is the K tried for a period of windows windows: 1, then about ×1.5
// apart up to windows, with the activity figure m (rounded up, and 1.5×
// it) and, at the config's own window size, its own K.
func kGrid(windows int, m float64, own int, base bool) []int {
	var ks []int
	for k := 1; k < windows; k = max(k+1, int(math.Round(float64(k)*1.5))) {
		ks = append(ks, k)
	}
	ks = append(ks, windows, int(math.Ceil(m)), int(math.Ceil(1.5*m)))
	if base && own > 0 {
		ks = append(ks, own)
	}
	out := ks[:0]
	for _, k := range ks {
		if k >= 1 && k <= windows {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// candidate plans cfg at window size, bound k and mechanism (calibration)
// and predicts it; false when the plan cannot be derived (e.g. the
// average histograms leave no budget at this K).
func candidate(cfg *config.Config, hist int, size time.Duration, windows, k int, m, n float64, mech, calibration string) (Activity, bool) {
	c := *cfg
	c.Window.Size = config.Duration(size)
	c.Histograms = slices.Clone(cfg.Histograms)
	for i := range c.Histograms {
		// Every histogram at the candidate's window, with the candidate's
		// K: a histogram's own bound belongs to its own window (a view).
		c.Histograms[i].Window = 0
		c.Histograms[i].MaxWindowsPerUser = 0
		c.Histograms[i].BudgetShare = 0 // one window: one calibration
	}
	c.Contribution.MaxWindowsPerUser = k
	c.Contribution.MaxTrackedUsers = 0
	c.Privacy.RDPEpsilon = 0
	c.Privacy.Mechanism, c.Privacy.Calibration, c.Privacy.PriorAlpha = mech, calibration, 0
	c.Privacy.ExpectedEventsPerRelease = n
	p, err := DerivePlan(&c)
	if err != nil || p.Count == nil || p.WindowsPerPeriod != windows {
		return Activity{}, false
	}
	return predict(p, hist, c.Histograms[hist], mechanismName(&c), size, windows, k, m, n), true
}

// ShortDuration formats d without trailing zero units: 1m, 1h, 24h,
// 1h30m, 5s.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ActivityWarnings are the plan's warnings for privacy.expected_windows_per_user
// (each with its config line): for each view (the count histograms of one
// window size, each with its own bound K_h), K_h below the view's expected
// active windows W_h·p_r (windows go blind, or count fewer than half their
// users, within each period), at the line of that histogram's
// max_windows_per_user, or of contribution.max_windows_per_user for a
// histogram at window.size without one; and no candidate window size
// reaching a useful error at the figure. Nil without the figure.
func ActivityWarnings(cfg *config.Config, p *Plan) []config.Warning {
	rec, ok := Recommend(cfg, p, false)
	if !ok {
		return nil
	}
	var out []config.Warning
	fig := fmt.Sprintf("privacy.expected_windows_per_user = %g (the %dth percentile of a user's active windows of window.size per period)", rec.Current.BasePerUser, config.ActivityPercentile)
	warned := map[time.Duration]bool{} // view sizes warned: histograms of one size share K_h and p_r
	for _, v := range rec.Views {
		if v.K <= 0 || !(float64(v.K) < v.PerUser) || warned[v.Window] {
			continue
		}
		warned[v.Window] = true
		var names []string
		for _, o := range rec.Views {
			if o.Window == v.Window {
				names = append(names, o.Histogram)
			}
		}
		period := ShortDuration(v.Period())
		var what string
		if v.Blind() {
			what = fmt.Sprintf("its windows go blind after about %s of each %s period: from then on a window counts fewer than %.0f%% of its active users, and its releases show noise over nearly empty counts (predicted ℓ2 of %s %.3g at the period's end, against %.3g for answering \"uniform\")",
				ShortDuration(v.BlindAfter()), period, 100*BlindShare, v.Histogram, v.EndL2(), v.UniformL2)
		} else {
			what = fmt.Sprintf("its windows count fewer than half of their active users after about %s of each %s period", ShortDuration(v.HalfAfter()), period)
		}
		var active string
		if v.Scale > 1 {
			active = fmt.Sprintf("%.3g of its %d %s windows (active in a %s window with probability %.3g = 1 − (1 − %.3g)^%d)", v.PerUser, v.Windows, ShortDuration(v.Window), ShortDuration(v.Window), v.P, v.BasePerUser/float64(v.BaseWindows), v.Scale)
		} else {
			active = fmt.Sprintf("%.3g of its %d windows (probability %.3g per window)", v.PerUser, v.Windows, v.P)
		}
		path := cfg.HistWindowBoundKey(v.Index)
		out = append(out, config.Warning{Path: path, Line: cfg.LineOf(path),
			Message: fmt.Sprintf("view %s (%s windows): K = %d is below the windows a user at %s is active in: %s; such a user has used up its %d windows after about %s, so %s. %s",
				strings.Join(names, ", "), ShortDuration(v.Window), v.K, fig, active, v.K,
				ShortDuration(time.Duration(math.Ceil(float64(v.K)/v.P-1e-9))*v.Window), what, rec.Advice()+" (`stage plan` draws them through the period)")})
	}
	if rec.Finest < 0 {
		b := rec.bestOverall()
		msg := fmt.Sprintf("at this budget no window size reaches a useful error (mean ℓ2 over the period at most %.0f%% of answering \"uniform\") for users this active", 100*UsefulRatio)
		if b != nil {
			msg += fmt.Sprintf(": the best found, %s, is predicted mean ℓ2 %.3g over the period (%.0f%%, %s)", b.Describe(), b.MeanL2, 100*b.MeanRatio(), Verdict(b.MeanRatio()))
		}
		msg += "; raise privacy.budget.epsilon, or count more events per release (fewer groups or bins)"
		out = append(out, config.Warning{Path: "privacy.expected_windows_per_user", Line: cfg.LineOf("privacy.expected_windows_per_user"), Message: msg})
	}
	return out
}

// bestOverall is the candidate of least mean error ratio; nil when there
// is none.
func (r Recommendation) bestOverall() *Activity {
	var b *Activity
	for i := range r.Best {
		if b == nil || r.Best[i].MeanRatio() < b.MeanRatio() {
			b = &r.Best[i]
		}
	}
	return b
}

// Advice says in one sentence what the recommendation is: the finest
// useful window size's configuration, and the best at the config's own
// window size when that differs.
func (r Recommendation) Advice() string {
	var s string
	if r.Finest >= 0 {
		f := r.Best[r.Finest]
		s = fmt.Sprintf("For this figure the finest useful single window size for every count histogram is %s: predicted mean ℓ2 %.3g over the period (%s)",
			f.Describe(), f.MeanL2, f.Settings())
	} else {
		s = "No window size is useful for this figure at this budget"
	}
	if r.Own >= 0 && r.Own != r.Finest {
		o := r.Best[r.Own]
		s += fmt.Sprintf("; at window.size %s the best is K=%d with %s (predicted mean ℓ2 %.3g, %s)", ShortDuration(o.Window), o.K, o.Mechanism, o.MeanL2, Verdict(o.MeanRatio()))
	}
	if mv := r.Multi; mv != nil {
		s += fmt.Sprintf("; in one budget, views for returning users: %s", mv.Describe())
	}
	return s
}
