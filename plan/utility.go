package plan

import (
	"fmt"
	"math"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/mechanism"
)

// DefaultPlanningEvents is the events per release the error figures assume
// when privacy.expected_events_per_release is not given.
const DefaultPlanningEvents = 1000

// NearUniformRatio is the error ratio above which a release is called
// near-uniform: its expected ℓ2 error is more than this fraction of the
// error of answering "uniform" without looking at the data.
const NearUniformRatio = 0.5

// UsefulRatio is the error ratio up to which a release is called useful:
// its expected ℓ2 error is at most a fifth of the distance of a typical
// histogram from the uniform one (UniformL2). For 5 bins that is ℓ2 ≤
// 0.073, about ±3 percentage points per bin; between UsefulRatio and
// NearUniformRatio a release is rough (it shows large differences only).
// The thresholds are the planner's convention, stated so that `stage
// validate` and `stage plan` give the same answer; they are not derived
// from the data.
const UsefulRatio = 0.2

// Verdict names what a release at error ratio (ℓ2 / UniformL2) is good
// for: "useful" (≤ UsefulRatio), "rough" (≤ NearUniformRatio),
// "near-uniform" beyond (NaN included).
func Verdict(ratio float64) string {
	switch {
	case ratio <= UsefulRatio:
		return "useful"
	case ratio <= NearUniformRatio:
		return "rough"
	default:
		return "near-uniform"
	}
}

// EventsForRatio is the smallest events per release n (to 2 significant
// digits, rounded up) at which m's releases over d bins reach
// ExpectedL2 ≤ ratio·UniformL2(d); +Inf when no n up to 10¹⁵ does. The
// error falls with n for every model of ExpectedL2 (the Dirichlet's
// variance and bias, the additive mechanisms' s/n), so a bisection on
// log n finds it.
func EventsForRatio(m mechanism.Mechanism, d int, ratio float64) float64 {
	target := ratio * UniformL2(d)
	ok := func(n float64) bool { return ExpectedL2(m, d, n) <= target }
	lo, hi := 1.0, 1e15
	if ok(lo) {
		return lo
	}
	if !ok(hi) {
		return math.Inf(1)
	}
	for hi/lo > 1.001 {
		mid := math.Sqrt(lo * hi)
		if ok(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	e := math.Pow(10, math.Floor(math.Log10(hi))-1) // two significant digits, up
	return math.Ceil(hi/e) * e
}

// Utility is what one count histogram's release is expected to show at a
// planning figure of N events per release (one histogram, one group, one
// window).
type Utility struct {
	Histogram string
	Bins      int
	// N is the planning figure; Assumed is set when the config did not give
	// one and DefaultPlanningEvents is used.
	N       float64
	Assumed bool
	// Basis says how N was derived for a view coarser than window.size
	// (ViewEvents); "" at window.size.
	Basis string
	// Period is set when L2 is the view's mean predicted error over the
	// period (the activity prediction), not one window's at N.
	Period bool
	// L2 is the root-mean-square ℓ2 distance between a release and the true
	// normalized histogram x/N, averaged over histograms drawn from the flat
	// prior on the simplex (the model of 000 §4 / mechanism/optimal.go for
	// Dirichlet draws; a first-order model for the additive mechanisms, see
	// ExpectedL2).
	L2 float64
	// UniformL2 is the same figure for the constant answer "uniform":
	// √((d−1)/(d(d+1))), what a release that ignores the data scores.
	UniformL2 float64
}

// At says at what figure the error is predicted: "N events per release"
// and where N comes from.
func (u Utility) At() string {
	src := "privacy.expected_events_per_release"
	if u.Assumed {
		src = "assumed: set privacy.expected_events_per_release to your traffic"
	}
	if u.Basis != "" {
		src += "; " + u.Basis
	}
	n := fmt.Sprintf("%.0f", u.N) // a count: 10000, not 1e+04
	if u.N < 10 {
		n = fmt.Sprintf("%.3g", u.N)
	}
	return fmt.Sprintf("%s events per release (%s)", n, src)
}

// Over is " (mean over the period)" when L2 is the activity prediction's
// mean, else "".
func (u Utility) Over() string {
	if u.Period {
		return " (mean over the period)"
	}
	return ""
}

// Ratio is L2 / UniformL2: 0 is exact, 1 is no better than "uniform".
func (u Utility) Ratio() float64 { return u.L2 / u.UniformL2 }

// NearUniform reports whether releases are expected to be near-uniform
// (Ratio > NearUniformRatio).
func (u Utility) NearUniform() bool { return !(u.Ratio() <= NearUniformRatio) }

// UniformL2 is the root-mean-square ℓ2 distance between the uniform
// distribution and a histogram p drawn from the flat prior Dir(1,…,1) on d
// bins: E‖p − u‖² = Σᵢ Var(pᵢ) = d·(d−1)/(d²(d+1)) = (d−1)/(d(d+1)).
func UniformL2(d int) float64 {
	df := float64(d)
	return math.Sqrt((df - 1) / (df * (df + 1)))
}

// ExpectedL2 is the root-mean-square ℓ2 error of one release of m over d
// bins at n events, averaged over the flat prior on the simplex:
//
//   - Dirichlet (every calibration): Dir(r·x + α) with its calibrated (r, α),
//     mechanism.DirichletExpectedError — exact for the draw under the
//     prior (the release grid adds at most 1/Q per bin, ignored).
//   - Gaussian / Laplace: noisy counts x + z (Var zᵢ = s², s² = σ² or 2b²),
//     clipped at 0 and normalized. To first order in z/n the error is
//     eᵢ = (zᵢ − pᵢ·Σz)/n, so E‖e‖² = s²·(d − 2 + d·Σpᵢ²)/n², and under the
//     flat prior E Σpᵢ² = 2/(d+1). Clipping is ignored: the figure is
//     accurate while s ≪ n/d and an upper-side estimate beyond, so it is
//     capped at NoiseOnlyL2, the error of a release of noise alone (what
//     the mechanism releases from empty counts, n = 0).
//
// n may be 0 (a window that counts nobody: the activity prediction).
// NaN when the mechanism has no model here.
func ExpectedL2(m mechanism.Mechanism, d int, n float64) float64 {
	if d < 2 || !(n >= 0) || math.IsInf(n, 0) {
		return math.NaN()
	}
	p := m.Params()
	df := float64(d)
	var s2 float64
	switch {
	case p.Alpha > 0:
		r := p.R
		if !(r > 0) {
			r = 1
		}
		return math.Sqrt(mechanism.DirichletExpectedError(d, n, r, p.Alpha))
	case p.Sigma > 0:
		s2 = p.Sigma * p.Sigma
	case p.Scale > 0:
		s2 = 2 * p.Scale * p.Scale
	default:
		return math.NaN()
	}
	return math.Min(math.Sqrt(s2*(df-2+2*df/(df+1)))/n, NoiseOnlyL2(d, p.Sigma > 0))
}

// NoiseOnlyL2 is the root-mean-square ℓ2 distance, under the flat prior on
// p, between p and a release of an additive mechanism from empty counts:
// q = z⁺/Σz⁺ for i.i.d. symmetric noise z (uniform when every zᵢ ≤ 0, as
// the mechanisms release), gaussian or Laplace. It does not depend on the
// noise's scale. With k ~ Binomial(d, ½) positive coordinates, E q = u,
// q ⟂ p, so E‖q − p‖² = E‖q‖² − 2/d + 2/(d+1), and given k the positive
// parts are i.i.d. with squared coefficient of variation c, normalized:
// for Laplace noise they are exponential (c = 1) and q is Dir(1, …, 1) on
// the k coordinates, E‖q‖² = 2/(k+1) exactly; for Gaussian noise they are
// half-normal (c = π/2 − 1), approximated by the Dirichlet of the same c,
// E‖q‖² ≈ (1+c)/(k+c) (TestNoiseOnlyL2 checks both against the
// mechanisms' own releases).
func NoiseOnlyL2(d int, gaussian bool) float64 {
	if d < 2 {
		return math.NaN()
	}
	c := 1.0
	if gaussian {
		c = math.Pi/2 - 1
	}
	df := float64(d)
	sq := math.Exp(-df*math.Ln2) / df // k = 0: the uniform release
	for k := 1; k <= d; k++ {
		lc, _ := math.Lgamma(df + 1)
		a, _ := math.Lgamma(float64(k) + 1)
		b, _ := math.Lgamma(df - float64(k) + 1)
		sq += math.Exp(lc-a-b-df*math.Ln2) * (1 + c) / (float64(k) + c)
	}
	return math.Sqrt(max(sq-2/df+2/(df+1), 0))
}

// Utilities returns the expected error of every count histogram's release
// under p (each with its own calibration: CountPlan.For), at each view's
// own events per release (ViewEvents; issue 29 item 4: the per-minute
// planning figure is not an hour view's). With
// privacy.expected_windows_per_user the figure is the view's activity
// prediction's mean over the period (PredictView: Period set), so the
// expected-error line, the activity line and the warnings give one verdict
// per view. Nil without count histograms.
func Utilities(cfg *config.Config, p *Plan) []Utility {
	if p.Count == nil {
		return nil
	}
	var out []Utility
	for i, h := range cfg.Histograms {
		if h.IsAverage() {
			continue
		}
		d := len(h.Bins)
		n, how, assumed := ViewEvents(cfg, p, i)
		u := Utility{Histogram: h.Name, Bins: d, N: n, Basis: how, Assumed: assumed,
			L2: ExpectedL2(p.Count.For(i).Mechanism, d, n), UniformL2: UniformL2(d)}
		if a, ok := PredictView(cfg, p, i); ok {
			u.L2, u.Period = a.MeanL2, true
		}
		out = append(out, u)
	}
	return out
}

// ViewEvents is count histogram i's events per release before the bound,
// how it is derived, and whether the planning figure is assumed:
// privacy.expected_events_per_release (or DefaultPlanningEvents) counts a
// window of window.size; a view of r base windows counts, with
// privacy.expected_windows_per_user (p₀ = that figure / the base windows
// of a period, a user active in a base window with probability p₀), the
// users active in any of its r base windows: N·p_r/p₀, p_r = 1 − (1 −
// p₀)^r (as PredictView); without it every base window's events, N·r (an
// upper figure: it assumes new users in every base window).
func ViewEvents(cfg *config.Config, p *Plan, i int) (float64, string, bool) {
	n, assumed := planningEvents(cfg)
	base := cfg.Window.Size.D()
	if base <= 0 {
		return n, "", assumed
	}
	r := int(cfg.Histograms[i].WindowSize(cfg.Window.Size).D() / base)
	if r <= 1 {
		return n, "", assumed
	}
	if m := cfg.Privacy.ExpectedWindowsPerUser; m > 0 && p.WindowsPerPeriod > 0 {
		p0 := min(m/float64(p.WindowsPerPeriod), 1)
		return n * coarseP(p0, r) / p0, fmt.Sprintf("the users active in any of its %d windows of window.size", r), assumed
	}
	return n * float64(r), fmt.Sprintf("%d windows of window.size, new users in each (set privacy.expected_windows_per_user for returning users)", r), assumed
}

// Warnings are the plan's warnings: a count histogram whose releases are
// expected to be near-uniform at the planning figure, said in plain words
// with what to change, and with privacy.expected_windows_per_user the
// activity warnings (ActivityWarnings). Each carries its config line.
// `stage validate` prints them, `stage run` logs them.
func Warnings(cfg *config.Config, p *Plan) []config.Warning {
	var out []config.Warning
	for _, u := range Utilities(cfg, p) {
		if !u.NearUniform() {
			continue
		}
		at := u.At()
		fix := "raise privacy.budget.epsilon or window.size"
		if cfg.Contribution.MaxWindowsPerUser == 0 {
			fix += ", or set contribution.max_windows_per_user (the budget is now split over all " +
				fmt.Sprint(p.WindowsPerPeriod) + " windows of the period)"
		}
		if cfg.Privacy.Mechanism == config.MechanismDirichlet && cfg.Privacy.Calibration != config.CalibrationOptimal {
			fix += ", or use privacy.calibration: optimal"
		}
		path := fmt.Sprintf("histograms[%d]", histIndex(cfg, u.Histogram))
		out = append(out, config.Warning{Path: path, Line: cfg.LineOf(path), Message: fmt.Sprintf(
			"releases will be near-uniform: at this budget a release is expected to be ℓ2 ≈ %.3g from the true histogram%s at %s, "+
				"while answering \"uniform\" without looking at the data is ≈ %.3g off (%.0f%% of it); %s",
			u.L2, u.Over(), at, u.UniformL2, 100*u.Ratio(), fix)})
	}
	out = append(out, SelectionWarnings(cfg, p)...)
	return append(out, ActivityWarnings(cfg, p)...)
}

func histIndex(cfg *config.Config, name string) int {
	for i, h := range cfg.Histograms {
		if h.Name == name {
			return i
		}
	}
	return -1
}
