package eval

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/consume"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
)

// The steady-population benchmark (`stage eval steady`).
//
// Workload: U users; in every base window (window.size) of one budget
// period each user is active independently with probability p, and an
// active user sends exactly one event, at a uniformly random millisecond of
// the window. A user's group (the value of a histogram's group_by field) is
// fixed for the whole period, uniform over the declared groups; an event's
// bin (the value of a histogram's field) is drawn afresh from the Zipf law
// p_i ∝ 1/i over the declared bins (the "skewed" truth of `stage plan`).
// Histograms of one field share the event's value (a minute, an hour and a
// day view of the same page field see the same page). The data streams
// depend on the seed, the period's index (reps) and the config's fields
// and groups: configs that declare the same fields and groups see the same
// events (a paired comparison), others different draws of the workload.
//
// Every view — each count histogram at its own window (window.size or
// histograms[].window) — goes through the stage's own code: the counting
// and per-window bounding of aggregate.Aggregator (one per window size, as
// the stage builds them), the cross-window bound of aggregate.Admissions
// (Admissible on arrival, Admit once per user at each base boundary, as the
// stage's consumer and closer call them), the calibrated mechanism of
// plan.DerivePlan, one Release per declared group and window. The error of
// each release is measured against the TRUE histogram of the window and
// group — every event of the window, before any bounding: what a dashboard
// reader wants to see.
//
// Per window and group: ℓ2 = ‖y − t‖₂ and KL = D_KL(t ‖ y), t the true
// normalized histogram and y the release (as `stage plan` and experiment
// (a)); uniform ℓ2 = ‖u − t‖₂, what a release that ignores the data scores
// (a view whose ℓ2 reaches it is blind); bounded ℓ2 = ‖b − t‖₂, b the
// normalized bounded counts (what the bounds alone cost, no noise); and the
// counted share Σb/Σt over the window. These figures are of synthetic data
// and for the benchmark only: the stage never releases them.

// SteadyConfig is one configuration to benchmark.
type SteadyConfig struct {
	Name   string
	Config *config.Config // loaded and validated
}

// SteadyOptions configure a run.
type SteadyOptions struct {
	Users   int     // U ≥ 1
	P       float64 // activity probability per user and base window, in (0, 1]
	Reps    int     // independent periods simulated per config (≥ 1)
	Seed    uint64
	Workers int // 0: runtime.NumCPU()
	Configs []SteadyConfig
	// Keep keeps every release and true histogram in the result (tests).
	Keep bool
}

// SteadyResult is what a run measured.
type SteadyResult struct {
	Users  int
	P      float64
	Reps   int
	Events int64 // events of the first config's first period
	Views  []*SteadyView
	// Elapsed is the time each config took (all reps), in config order.
	Elapsed []time.Duration
}

// SteadyView is one histogram of one config through the period.
type SteadyView struct {
	Config    string
	Histogram string
	Window    time.Duration // the histogram's window
	Bins      int
	Groups    int
	// K is the cross-window bound on the view's windows (0: none).
	K int
	// Mechanism describes the calibrated release: kind, calibration and
	// per-release (λ, ε)-RDP with its parameters.
	Mechanism string
	Windows   []SteadyWindow // in time order
}

// SteadyWindow is one window of a view: means over groups, and over reps.
type SteadyWindow struct {
	Start, End time.Duration // from the period's start
	// Over groups (and reps): Stat of the per-group values.
	L2, KL, UniformL2, BoundedL2 Stat
	// TrueEvents and Counted are summed over groups, averaged over reps.
	TrueEvents, Counted float64
	// Kept (Options.Keep, first rep): per group, the true counts, the
	// bounded counts and the release.
	True, Bounded, Release [][]float64
}

// CountedShare is Counted / TrueEvents (NaN for an empty window).
func (w SteadyWindow) CountedShare() float64 {
	if w.TrueEvents == 0 {
		return math.NaN()
	}
	return w.Counted / w.TrueEvents
}

// steadyEpoch is the start of the simulated period: a Unix-epoch-aligned
// day (every window and period divides a day or a multiple of it aligned
// at 0, so any multiple of the period works; this one is 2026-11-28).
const steadyEpoch = int64(20_420) * 86_400_000

// RunSteady runs the benchmark.
func RunSteady(o SteadyOptions) (*SteadyResult, error) {
	switch {
	case o.Users < 1:
		return nil, fmt.Errorf("eval: steady: users must be ≥ 1, got %d", o.Users)
	case !(o.P > 0 && o.P <= 1):
		return nil, fmt.Errorf("eval: steady: p must be in (0, 1], got %g", o.P)
	case o.Reps < 1:
		return nil, fmt.Errorf("eval: steady: reps must be ≥ 1, got %d", o.Reps)
	case len(o.Configs) == 0:
		return nil, errors.New("eval: steady: no config to benchmark")
	}
	runs := make([]*steadyRun, len(o.Configs))
	for i, c := range o.Configs {
		r, err := newSteadyRun(c, o)
		if err != nil {
			return nil, err
		}
		runs[i] = r
	}
	type task struct{ c, rep int }
	var tasks []task
	for c := range runs {
		for rep := 0; rep < o.Reps; rep++ {
			tasks = append(tasks, task{c, rep})
		}
	}
	outs := make([][]*SteadyView, len(tasks))
	events := make([]int64, len(tasks))
	took := make([]time.Duration, len(tasks))
	err := parallel(len(tasks), o.Workers, func(i int) error {
		t := tasks[i]
		start := time.Now()
		v, n, err := runs[t.c].period(t.rep)
		outs[i], events[i], took[i] = v, n, time.Since(start)
		return err
	})
	if err != nil {
		return nil, err
	}
	res := &SteadyResult{Users: o.Users, P: o.P, Reps: o.Reps, Elapsed: make([]time.Duration, len(runs))}
	for c := range runs {
		var views []*SteadyView
		for i, t := range tasks {
			if t.c != c {
				continue
			}
			res.Elapsed[c] += took[i]
			if t.rep == 0 {
				views = outs[i]
				if c == 0 {
					res.Events = events[i]
				}
				continue
			}
			for v, view := range outs[i] { // merge the rep into rep 0
				for w := range view.Windows {
					a, b := &views[v].Windows[w], view.Windows[w]
					a.L2.Merge(b.L2)
					a.KL.Merge(b.KL)
					a.UniformL2.Merge(b.UniformL2)
					a.BoundedL2.Merge(b.BoundedL2)
					a.TrueEvents += b.TrueEvents
					a.Counted += b.Counted
				}
			}
		}
		for _, v := range views {
			for w := range v.Windows {
				v.Windows[w].TrueEvents /= float64(o.Reps)
				v.Windows[w].Counted /= float64(o.Reps)
			}
		}
		res.Views = append(res.Views, views...)
	}
	return res, nil
}

// steadyRun is one config, ready to simulate periods.
type steadyRun struct {
	name     string
	cfg      *config.Config
	opts     SteadyOptions
	plan     *plan.Plan
	baseMs   int64
	periodMs int64
	hists    []int          // config indices of the count histograms
	field    []int          // per entry of hists: index of its field in fields
	fields   []steadyField  // the distinct fields the events carry
	groupBy  []int          // per entry of hists: index of its group_by field in groupFields (-1: none)
	gFields  []steadyField  // the distinct group_by fields
	sets     []steadySetDef // per distinct window size, increasing
	views    []steadyViewDef
}

// steadyField is one event field: its values (the first histogram's list
// that uses it) and, per histogram of hists, each value's index in that
// histogram's bins or groups (-1: not declared and no overflow bin).
type steadyField struct {
	name   string
	values []string
	cdf    []float64 // Zipf over values (bins); nil for group fields (uniform)
	index  [][]int32 // [position in hists][value]; nil for a histogram without the field
}

type steadySetDef struct {
	sizeMs int64
	spec   aggregate.Spec
	hists  []int // positions in steadyRun.hists of its count histograms
	idx    []int // their indices in spec.Histograms
	k      int   // the cross-window bound of its histograms (0: none)
}

type steadyViewDef struct {
	hist      int // position in steadyRun.hists
	set       int // index in sets
	idxInSet  int
	mech      mechanism.Mechanism
	k         int
	bins      int
	groups    int
	windows   int
	histName  string
	windowDur time.Duration
}

func newSteadyRun(c SteadyConfig, o SteadyOptions) (*steadyRun, error) {
	cfg := c.Config
	p, err := plan.DerivePlan(cfg)
	if err != nil {
		return nil, fmt.Errorf("eval: steady: %s: %w", c.Name, err)
	}
	if p.Count == nil {
		return nil, fmt.Errorf("eval: steady: %s has no count histogram (the benchmark measures count histograms)", c.Name)
	}
	if cp := p.Count; cp.FitUnits > 0 && cp.FitUnits < cp.Units {
		return nil, fmt.Errorf("eval: steady: %s: privacy.rdp_epsilon covers %d of the %d releases of a period; the benchmark needs every window released (leave privacy.rdp_epsilon out)", c.Name, cp.FitUnits, cp.Units)
	}
	r := &steadyRun{name: c.Name, cfg: cfg, opts: o, plan: p,
		baseMs: cfg.Window.Size.D().Milliseconds(), periodMs: cfg.Privacy.Budget.Period.D().Milliseconds()}
	fieldIdx := map[string]int{}
	gIdx := map[string]int{}
	for i, h := range cfg.Histograms {
		if h.IsAverage() {
			continue
		}
		pos := len(r.hists)
		r.hists = append(r.hists, i)
		f, ok := fieldIdx[h.Field]
		if !ok {
			f = len(r.fields)
			fieldIdx[h.Field] = f
			r.fields = append(r.fields, steadyField{name: h.Field, values: slices.Clone(h.Bins), cdf: cumulative(Zipf(len(h.Bins)))})
		}
		r.field = append(r.field, f)
		r.fields[f].index = setIndex(r.fields[f].index, pos, valueIndex(r.fields[f].values, h.Bins, h.OverflowBin))
		if h.GroupBy == "" {
			r.groupBy = append(r.groupBy, -1)
			continue
		}
		g, ok := gIdx[h.GroupBy]
		if !ok {
			g = len(r.gFields)
			gIdx[h.GroupBy] = g
			r.gFields = append(r.gFields, steadyField{name: h.GroupBy, values: slices.Clone(h.Groups)})
		}
		r.groupBy = append(r.groupBy, g)
		r.gFields[g].index = setIndex(r.gFields[g].index, pos, valueIndex(r.gFields[g].values, h.Groups, ""))
	}
	// One aggregator per distinct window size, built by the stage's own
	// consume.WindowSpecs (its EventIndex is the config index: the events'
	// Bins and Groups are indexed by it).
	for _, ws := range consume.WindowSpecs(cfg) {
		def := steadySetDef{sizeMs: ws.Size.D().Milliseconds(), spec: ws.Spec}
		for j, i := range ws.Spec.EventIndex {
			if pos := slices.Index(r.hists, i); pos >= 0 {
				def.hists = append(def.hists, pos)
				def.idx = append(def.idx, j)
				def.k = histBound(cfg, i)
			}
		}
		if len(def.hists) == 0 {
			continue // average histograms only
		}
		if _, err := aggregate.New(def.spec); err != nil { // check once
			return nil, fmt.Errorf("eval: steady: %s: %w", c.Name, err)
		}
		r.sets = append(r.sets, def)
	}
	for s, def := range r.sets {
		for j, pos := range def.hists {
			i := r.hists[pos]
			h := cfg.Histograms[i]
			w, err := plan.HistWindows(cfg, i)
			if err != nil {
				return nil, fmt.Errorf("eval: steady: %s: %w", c.Name, err)
			}
			r.views = append(r.views, steadyViewDef{hist: pos, set: s, idxInSet: def.idx[j], mech: p.Count.For(i).Mechanism,
				k: def.k, bins: len(h.Bins), groups: len(h.GroupNames()), windows: w, histName: h.Name,
				windowDur: h.WindowSize(cfg.Window.Size).D()})
		}
	}
	return r, nil
}

// setIndex sets index[pos] = v, growing index as needed.
func setIndex(index [][]int32, pos int, v []int32) [][]int32 {
	for len(index) <= pos {
		index = append(index, nil)
	}
	index[pos] = v
	return index
}

// histBound is the cross-window bound of histogram i (0: none): its own
// histograms[].max_windows_per_user, else the contribution-level K at
// window.size (config.Config.HistWindowBound, as the stage reads it).
func histBound(cfg *config.Config, i int) int { return cfg.HistWindowBound(i) }

// valueIndex maps each of values to its index in bins (the overflow bin's
// when absent and one is declared, else -1).
func valueIndex(values, bins []string, overflow string) []int32 {
	out := make([]int32, len(values))
	for i, v := range values {
		j := slices.Index(bins, v)
		if j < 0 && overflow != "" {
			j = slices.Index(bins, overflow)
		}
		out[i] = int32(j)
	}
	return out
}

func cumulative(p []float64) []float64 {
	c := make([]float64, len(p))
	s := 0.0
	for i, v := range p {
		s += v
		c[i] = s
	}
	c[len(c)-1] = 1
	return c
}

// steadyGen generates one period's events, window by window.
type steadyGen struct {
	run    *steadyRun
	src    *rand.ChaCha8
	rng    *rand.Rand
	key    uint64    // user-hash key
	groups [][]int32 // per user: its value index per group field
	thresh uint64    // active iff a uniform uint64 < thresh (p = 1: always)
	always bool
}

func newSteadyGen(r *steadyRun, rep int) *steadyGen {
	src := rand.NewChaCha8(taskSeed(r.opts.Seed, fmt.Sprintf("steady/data/rep=%d", rep)))
	g := &steadyGen{run: r, src: src, rng: rand.New(src)}
	g.key = g.rng.Uint64()
	g.always = r.opts.P >= 1
	g.thresh = uint64(r.opts.P * (1 << 63) * 2)
	g.groups = make([][]int32, r.opts.Users)
	for u := range g.groups {
		g.groups[u] = make([]int32, len(r.gFields))
		for f, gf := range r.gFields {
			g.groups[u][f] = int32(g.rng.IntN(len(gf.values)))
		}
	}
	return g
}

// newEvent returns an event for r's config (see window).
func (r *steadyRun) newEvent() *decode.Event {
	n := len(r.cfg.Histograms)
	ev := &decode.Event{Bins: make([]int32, n), Groups: make([]int32, n)}
	for i := range ev.Bins {
		ev.Bins[i], ev.Groups[i] = -1, -1
	}
	return ev
}

// userHash is the synthetic user's 64-bit hash (the stage's is a keyed
// hash of the user id; here splitmix64 of id and a per-rep key).
func (g *steadyGen) userHash(u int) uint64 {
	z := g.key + uint64(u+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	if z == 0 {
		z = 1
	}
	return z
}

// window calls fn for every event of the base window starting at startMs,
// in user order, with ev filled in (ev.Bins and ev.Groups indexed by config
// histogram index, as the decoder's; -1 for a value the histogram does not
// declare; newEvent sets the average histograms' to -1). ev and values are
// reused between calls.
func (g *steadyGen) window(startMs int64, ev *decode.Event, values []int, fn func(u int)) {
	r := g.run
	for u := 0; u < r.opts.Users; u++ {
		if !g.always && g.rng.Uint64() >= g.thresh {
			continue
		}
		ev.TimeMs = startMs + g.rng.Int64N(r.baseMs)
		ev.User = g.userHash(u)
		for f, fd := range r.fields {
			x := g.rng.Float64()
			v := 0
			for v < len(fd.cdf)-1 && x >= fd.cdf[v] {
				v++
			}
			values[f] = v
		}
		for pos, i := range r.hists {
			ev.Bins[i] = r.fields[r.field[pos]].index[pos][values[r.field[pos]]]
			ev.Groups[i] = 0
			if gf := r.groupBy[pos]; gf >= 0 {
				ev.Groups[i] = r.gFields[gf].index[pos][g.groups[u][gf]]
			}
		}
		fn(u)
	}
}
