package eval

import (
	"fmt"
	"time"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/window"
)

// period simulates one budget period of r's config (rep selects the data
// and release streams) and returns its views.
func (r *steadyRun) period(rep int) (views []*SteadyView, events int64, err error) {
	g := newSteadyGen(r, rep)
	rel := mechanism.NewSeededRand(taskSeed(r.opts.Seed, fmt.Sprintf("steady/release/%s/rep=%d", r.name, rep)))
	aggs := make([]*aggregate.Aggregator, len(r.sets))
	for s, def := range r.sets {
		if aggs[s], err = aggregate.New(def.spec); err != nil {
			return nil, 0, err
		}
	}
	// The cross-window bound, as the stage's consumer and closer apply it
	// (consume/consume.go handle, consume/close.go CloseWindow): one
	// admission state per window size with a bound.
	adms := make([]*aggregate.Admissions, len(r.sets))
	for s, def := range r.sets {
		if def.k > 0 {
			if adms[s], err = aggregate.NewAdmissions(def.k); err != nil {
				return nil, 0, err
			}
		}
	}
	views = make([]*SteadyView, len(r.views))
	truth := make([][][]float64, len(r.views)) // [view][group][bin] of the open window
	for vi, v := range r.views {
		views[vi] = &SteadyView{Config: r.name, Histogram: v.histName, Window: v.windowDur, Bins: v.bins, Groups: v.groups,
			K: v.k, Mechanism: describeMechanism(v.mech), Windows: make([]SteadyWindow, v.windows)}
		truth[vi] = make([][]float64, v.groups)
		for gi := range truth[vi] {
			truth[vi][gi] = make([]float64, v.bins)
		}
	}
	ev := r.newEvent()
	values := make([]int, len(r.fields))
	period := steadyEpoch
	m := &steadyMeasure{}
	for b := int64(0); b < r.periodMs/r.baseMs; b++ {
		start := period + b*r.baseMs
		g.window(start, ev, values, func(int) {
			events++
			for vi, v := range r.views {
				if bin, grp := ev.Bins[r.hists[v.hist]], ev.Groups[r.hists[v.hist]]; bin >= 0 && grp >= 0 {
					truth[vi][grp][bin]++
				}
			}
			for s, def := range r.sets {
				if adms[s] != nil && !adms[s].Admissible(ev.User, period) {
					continue // admitted to K closed windows of this size in the period already
				}
				aggs[s].Add(window.Start(ev.TimeMs, def.sizeMs), ev)
			}
		})
		end := start + r.baseMs
		for s, def := range r.sets {
			if window.Start(end, def.sizeMs) != end {
				continue // its window does not end here
			}
			wstart := end - def.sizeMs
			var wc *aggregate.WindowCounts
			if adm := adms[s]; adm != nil {
				decided := map[uint64]bool{} // one decision per user and window
				admit := func(u uint64) bool {
					u = aggregate.UserKey(u)
					ok, seen := decided[u]
					if !seen {
						ok = adm.Admit(period, u)
						decided[u] = ok
					}
					return ok
				}
				wc, err = aggs[s].CloseAdmitted(wstart, admit)
			} else {
				wc, err = aggs[s].Close(wstart)
			}
			if err != nil {
				return nil, 0, err
			}
			for vi, v := range r.views {
				if v.set != s {
					continue
				}
				wi := int((wstart - period) / def.sizeMs)
				out := &views[vi].Windows[wi]
				out.Start, out.End = time.Duration(wstart-period)*time.Millisecond, time.Duration(end-period)*time.Millisecond
				if err := m.window(rel, v, wc, truth[vi], out, r.opts.Keep); err != nil {
					wc.Release()
					return nil, 0, fmt.Errorf("eval: steady: %s: %s window %d: %w", r.name, v.histName, wi, err)
				}
			}
			wc.Release()
		}
	}
	return views, events, nil
}

// steadyMeasure holds the buffers of one period's measurements.
type steadyMeasure struct {
	b, t, bn, y, u, alpha []float64
}

// window releases every group of view v's closed window (counts wc) as
// the stage does (release/release.go countUnit: Release, or the posterior
// mean for laplace-posterior), measures each release against the true
// counts truth[g] and clears them.
func (m *steadyMeasure) window(rel *mechanism.Rand, v steadyViewDef, wc *aggregate.WindowCounts, truth [][]float64, out *SteadyWindow, keep bool) error {
	d := v.bins
	if len(m.t) != d {
		m.t, m.bn, m.y, m.u, m.alpha = make([]float64, d), make([]float64, d), make([]float64, d), Uniform(d), make([]float64, d)
	}
	post, _ := v.mech.(mechanism.PosteriorReleaser)
	for gi := range truth {
		m.b = wc.Counts(v.idxInSet, gi, m.b)
		var err error
		if post != nil {
			if err = post.ReleasePosterior(rel, m.b, m.alpha); err == nil {
				err = mechanism.PosteriorMean(m.alpha, m.y)
			}
		} else {
			err = v.mech.Release(rel, m.b, m.y)
		}
		if err != nil {
			return err
		}
		normalize(truth[gi], m.t)
		normalize(m.b, m.bn)
		out.L2.Add(l2(m.y, m.t))
		out.KL.Add(kl(m.t, m.y))
		out.UniformL2.Add(l2(m.u, m.t))
		out.BoundedL2.Add(l2(m.bn, m.t))
		for i := range truth[gi] {
			out.TrueEvents += truth[gi][i]
			out.Counted += m.b[i]
		}
		if keep {
			out.True = append(out.True, append([]float64(nil), truth[gi]...))
			out.Bounded = append(out.Bounded, append([]float64(nil), m.b...))
			out.Release = append(out.Release, append([]float64(nil), m.y...))
		}
		clear(truth[gi])
	}
	return nil
}

// describeMechanism is a short description of a calibrated mechanism.
func describeMechanism(m mechanism.Mechanism) string {
	s, p := m.Spec(), m.Params()
	d := string(s.Kind)
	if s.Calibration != "" {
		d += " " + string(s.Calibration)
	}
	d += fmt.Sprintf(", (λ=%g, ε=%.4g)-RDP per release", s.Order, s.RDPEpsilon)
	switch s.Kind {
	case mechanism.Dirichlet:
		d += fmt.Sprintf(", α=%.4g r=%.4g", p.Alpha, p.R)
	case mechanism.Gaussian:
		d += fmt.Sprintf(", σ=%.4g", p.Sigma)
	case mechanism.Laplace:
		d += fmt.Sprintf(", b=%.4g", p.Scale)
	}
	return d
}
