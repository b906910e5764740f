package plan

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/dpstage/stage/config"
)

// MultiView is a recommended configuration of several views in one budget
// for returning users (issue 23): each count histogram of the config at
// window.size with bound K, plus a copy of it at each coarser view size
// (an hour, a day, the period: those that are whole multiples of
// window.size dividing the period) that counts every active user in every
// one of its windows (K_h = W_h).
type MultiView struct {
	// Config is the candidate configuration (the config with the views
	// and K); Views its count histograms' predictions, config order.
	Config *config.Config
	Views  []Activity
	// K is contribution.max_windows_per_user (the views at window.size),
	// Mechanism the mechanism and calibration.
	K         int
	Mechanism string
	// Base is the index in Views of the view whose mean error the search
	// minimized (the count histogram with the most bins at window.size).
	Base int
	// Useful reports whether every coarser view is useful
	// (MeanRatio ≤ UsefulRatio): the constraint the search met.
	Useful bool
	// Led is the same views with budget shares in which the views at
	// Led.Lead (the first coarser size: an hour) lead and the views at
	// window.size are a trend line (leadShares); nil when none qualifies.
	Led *MultiView
	// Lead is, in a Led recommendation, the view size that leads.
	Lead time.Duration
}

// viewSizes are the coarser view sizes recommendViews adds: an hour, a
// day and the period, those that are whole multiples of window.size, above
// it, and divide the period.
func viewSizes(base, period time.Duration) []time.Duration {
	var out []time.Duration
	for _, s := range []time.Duration{time.Hour, 24 * time.Hour, period} {
		if s > base && s <= period && s%base == 0 && period%s == 0 && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// recommendViews searches the multi-view configuration for returning
// users. What it searches, and nothing else: the config's count histograms
// at window.size keep their window, and each gets a copy at every
// coarser view size (viewSizes) named "<name>_<size>" with
// max_windows_per_user = its windows per period (every active user counted
// in every window: such a view never goes blind); the config's count
// histograms with another window are left out (replaced by these views),
// its average histograms kept as they are. Over contribution.
// max_windows_per_user = K on kGrid (1 to the base windows of a period,
// about ×1.5 apart, with the figure and the config's own K) and the
// gaussian and laplace mechanisms — and, when dirichlet, the Dirichlet
// mechanism with the optimal calibration at the best of those — it keeps
// the candidate that makes every coarser view useful and, among those, the
// base view (the count histogram with the most bins at window.size) of
// least mean predicted error over the period; when no candidate makes
// every coarser view useful, the one of least summed mean-error ratio over
// all views. Every candidate is planned by DerivePlan under the config's
// (ε, δ) per period (privacy.rdp_epsilon cleared, max_tracked_users off),
// so all views fit the budget together. Nil when there is no coarser view
// size, no count histogram at window.size, or nothing can be planned.
func recommendViews(cfg *config.Config, dirichlet bool) *MultiView {
	base, period := cfg.Window.Size.D(), cfg.Privacy.Budget.Period.D()
	sizes := viewSizes(base, period)
	if len(sizes) == 0 || base <= 0 {
		return nil
	}
	c := *cfg
	c.Histograms = nil
	baseHist := -1
	for _, h := range cfg.Histograms {
		if h.IsAverage() || h.WindowSize(cfg.Window.Size).D() != base {
			continue
		}
		h.Window, h.MaxWindowsPerUser = 0, 0
		if baseHist < 0 || len(h.Bins) > len(c.Histograms[baseHist].Bins) {
			baseHist = len(c.Histograms)
		}
		c.Histograms = append(c.Histograms, h)
	}
	if baseHist < 0 {
		return nil
	}
	for _, h := range slices.Clone(c.Histograms) {
		for _, s := range sizes {
			v := h
			v.Name = h.Name + "_" + ShortDuration(s)
			v.Window, v.MaxWindowsPerUser = config.Duration(s), int(period/s)
			c.Histograms = append(c.Histograms, v)
		}
	}
	for _, h := range cfg.Histograms {
		if h.IsAverage() {
			c.Histograms = append(c.Histograms, h)
		}
	}
	c.Contribution.MaxTrackedUsers = 0
	c.Privacy.RDPEpsilon = 0
	windows := int(period / base)
	m := c.Privacy.ExpectedWindowsPerUser
	if !(m > 0) {
		return nil
	}
	var best *MultiView
	score := func(mv *MultiView) (bool, float64) {
		if mv.Useful {
			return true, mv.Views[baseHist].MeanL2
		}
		sum := 0.0
		for _, a := range mv.Views {
			sum += a.MeanRatio()
		}
		return false, sum
	}
	try := func(k int, mech, calibration string) {
		cc := c
		cc.Histograms = slices.Clone(c.Histograms)
		cc.Contribution.MaxWindowsPerUser = k
		cc.Privacy.Mechanism, cc.Privacy.Calibration, cc.Privacy.PriorAlpha = mech, calibration, 0
		views, ok := predictCandidate(&cc)
		if !ok {
			return
		}
		mv := &MultiView{Config: &cc, Views: views, K: k, Mechanism: mechanismName(&cc), Base: baseHist, Useful: true}
		for _, a := range views {
			if a.Scale > 1 && a.MeanRatio() > UsefulRatio {
				mv.Useful = false
			}
		}
		if best == nil {
			best = mv
			return
		}
		u, s := score(mv)
		bu, bs := score(best)
		if (u && !bu) || (u == bu && s < bs) {
			best = mv
		}
	}
	for _, mech := range []string{config.MechanismGaussian, config.MechanismLaplace} {
		for _, k := range kGrid(windows, m, cfg.Contribution.MaxWindowsPerUser, true) {
			try(k, mech, "")
		}
	}
	if best != nil && dirichlet {
		try(best.K, config.MechanismDirichlet, config.CalibrationOptimal)
	}
	if best != nil && len(sizes) > 0 {
		best.Led = leadShares(best, sizes[0])
	}
	return best
}

// predictCandidate validates and plans a candidate config and predicts
// its views; false when any step fails.
func predictCandidate(cc *config.Config) ([]Activity, bool) {
	if cc.Validate() != nil {
		return nil, false
	}
	p, err := DerivePlan(cc)
	if err != nil || p.Count == nil {
		return nil, false
	}
	return PredictViews(cc, p)
}

// leadShares searches budget shares (histograms[].budget_share) for mv's
// views in which the views at size lead (the hour view a returning-user
// dashboard leads with) and the views at window.size are a trend line:
// over the lead views' summed share on a grid of 0.05 to 0.9 and each
// other coarser size's on {0.02, 0.05, 0.1, 0.2} (split evenly over the
// histograms of a size; the views at window.size get the rest, at least
// 0.05), it keeps the candidate whose lead views' mean predicted error is
// least while every view at window.size stays at most rough (MeanRatio ≤
// NearUniformRatio) and every other coarser view useful. Nil when no
// candidate qualifies or none improves the lead views on mv.
func leadShares(mv *MultiView, size time.Duration) *MultiView {
	cfg := mv.Config
	bySize := map[time.Duration][]int{}
	var others []time.Duration
	base := cfg.Window.Size.D()
	for i, h := range cfg.Histograms {
		if h.IsAverage() {
			continue
		}
		s := h.WindowSize(cfg.Window.Size).D()
		if s != base && s != size && len(bySize[s]) == 0 {
			others = append(others, s)
		}
		bySize[s] = append(bySize[s], i)
	}
	if len(bySize[size]) == 0 || len(bySize[base]) == 0 {
		return nil
	}
	leadErr := func(views []Activity) float64 {
		sum := 0.0
		for _, a := range views {
			if a.Window == size {
				sum += a.MeanL2
			}
		}
		return sum
	}
	var best *MultiView
	bestErr := leadErr(mv.Views)
	otherGrid := []float64{0.02, 0.05, 0.1, 0.2}
	var walk func(j int, shares map[time.Duration]float64)
	walk = func(j int, shares map[time.Duration]float64) {
		if j < len(others) {
			for _, s := range otherGrid {
				shares[others[j]] = s
				walk(j+1, shares)
			}
			return
		}
		used := 0.0
		for _, s := range shares {
			used += s
		}
		if 1-used < 0.05 {
			return
		}
		cc := *cfg
		cc.Histograms = slices.Clone(cfg.Histograms)
		for sz, idx := range bySize {
			if sz == base {
				continue
			}
			for _, i := range idx {
				cc.Histograms[i].BudgetShare = shares[sz] / float64(len(idx))
			}
		}
		views, ok := predictCandidate(&cc)
		if !ok {
			return
		}
		for _, a := range views {
			switch {
			case a.Window == base && a.MeanRatio() > NearUniformRatio:
				return
			case a.Window != base && a.Window != size && a.MeanRatio() > UsefulRatio:
				return
			}
		}
		if e := leadErr(views); e < bestErr {
			bestErr = e
			best = &MultiView{Config: &cc, Views: views, K: mv.K, Mechanism: mv.Mechanism, Base: mv.Base, Useful: true, Lead: size}
		}
	}
	for ls := 0.05; ls < 0.9+1e-9; ls += 0.05 {
		walk(0, map[time.Duration]float64{size: math.Round(ls*100) / 100})
	}
	return best
}

// yamlHist is a count histogram as YAML lines (MultiView.YAML).
type yamlHist struct {
	Name              string   `yaml:"name"`
	Field             string   `yaml:"field"`
	Bins              []string `yaml:"bins,flow"`
	OverflowBin       string   `yaml:"overflow_bin,omitempty"`
	GroupBy           string   `yaml:"group_by,omitempty"`
	Groups            []string `yaml:"groups,flow,omitempty"`
	Window            string   `yaml:"window,omitempty"`
	MaxWindowsPerUser int      `yaml:"max_windows_per_user,omitempty"`
	BudgetShare       float64  `yaml:"budget_share,omitempty"`
}

// YAML is the recommendation as config lines to paste: the
// contribution.max_windows_per_user, the privacy mechanism (and
// calibration) and the count histograms (the average histograms are the
// config's own, unchanged, and not repeated).
func (mv *MultiView) YAML() string {
	var doc struct {
		Contribution struct {
			MaxWindowsPerUser int `yaml:"max_windows_per_user"`
		} `yaml:"contribution"`
		Privacy struct {
			Mechanism   string `yaml:"mechanism"`
			Calibration string `yaml:"calibration,omitempty"`
		} `yaml:"privacy"`
		Histograms []yamlHist `yaml:"histograms"`
	}
	doc.Contribution.MaxWindowsPerUser = mv.K
	doc.Privacy.Mechanism = mv.Config.Privacy.Mechanism
	if doc.Privacy.Mechanism == config.MechanismDirichlet {
		doc.Privacy.Calibration = mv.Config.Privacy.Calibration
	}
	for _, h := range mv.Config.Histograms {
		if h.IsAverage() {
			continue
		}
		y := yamlHist{Name: h.Name, Field: h.Field, Bins: h.Bins, OverflowBin: h.OverflowBin, GroupBy: h.GroupBy, Groups: h.Groups, MaxWindowsPerUser: h.MaxWindowsPerUser, BudgetShare: h.BudgetShare}
		if h.Window > 0 {
			y.Window = ShortDuration(h.Window.D())
		}
		doc.Histograms = append(doc.Histograms, y)
	}
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return "# " + err.Error() + "\n"
	}
	_ = enc.Close()
	return b.String()
}

// Describe says in one line what each view of the recommendation gets.
func (mv *MultiView) Describe() string {
	var parts []string
	for _, a := range mv.Views {
		parts = append(parts, fmt.Sprintf("%s (%s windows, K=%d: mean ℓ2 %.3g, %s%s)", a.Histogram, ShortDuration(a.Window), a.K, a.MeanL2,
			Verdict(a.MeanRatio()), blindNote(a)))
	}
	return fmt.Sprintf("%s, per-release ε %.3g: %s", mv.Mechanism, mv.Views[0].PerReleaseEpsilon, strings.Join(parts, "; "))
}

// blindNote is ", blind after X" for a view that goes blind within the
// period, else "".
func blindNote(a Activity) string {
	if !a.Blind() {
		return ""
	}
	return ", blind after " + ShortDuration(a.BlindAfter())
}

// Period is the budget period the prediction covers.
func (a Activity) Period() time.Duration { return time.Duration(a.Windows) * a.Window }

// EndL2 is the predicted ℓ2 of the period's last window.
func (a Activity) EndL2() float64 {
	if len(a.L2) == 0 {
		return math.NaN()
	}
	return a.L2[len(a.L2)-1]
}
