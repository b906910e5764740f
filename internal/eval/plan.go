package eval

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/dpstage/stage/mechanism"
)

// PlanPoint is the expected error of one release of a d-bin count vector
// holding N events, for one ground truth p (all by Monte-Carlo: fresh
// x ~ Multinomial(N, p) and a fresh release y for each replication).
type PlanPoint struct {
	Truth string // "flat" (p_i = 1/d) or "skewed" (Zipf, p_i ∝ 1/i)
	N     int
	// L2 is ‖y − x/N‖₂ and KL is D_KL(x/N ‖ y): the error the mechanism
	// adds to the window's exact normalized histogram. KL is +Inf when y has
	// a zero where x/N does not (possible for Gaussian and Laplace, never
	// for Dirichlet); such replications are counted in KL.Inf.
	L2, KL Stat
	// Sampling is ‖x/N − p‖₂: the error of the exact histogram itself as an
	// estimate of p (no privacy). Below it, privacy noise is not what
	// limits accuracy.
	Sampling Stat
	// UniformL2 and UniformKL are ‖u − x/N‖₂ and D_KL(x/N ‖ u) for the
	// answer "uniform" u: what a release that ignores the data achieves. A
	// release no better than this carries no information.
	UniformL2, UniformKL Stat
}

// PlanTruths are the two ground truths `stage plan` evaluates on d bins:
// "flat", every bin 1/d (named so that "uniform" names only the answer
// that ignores the data, UniformL2), and "skewed".
func PlanTruths(d int) []struct {
	Name string
	P    []float64
} {
	return []struct {
		Name string
		P    []float64
	}{{"flat", Uniform(d)}, {"skewed", Zipf(d)}}
}

// PlanErrors estimates the errors of m's releases of d bins at each N, for
// both PlanTruths, with reps replications each.
func PlanErrors(m mechanism.Mechanism, d int, ns []int, reps int, seed uint64, workers int) ([]PlanPoint, error) {
	truths := PlanTruths(d)
	type task struct{ t, n, from, to int }
	var tasks []task
	for t := range truths {
		for n := range ns {
			for from := 0; from < reps; from += chunk {
				tasks = append(tasks, task{t, n, from, min(from+chunk, reps)})
			}
		}
	}
	results := make([]PlanPoint, len(tasks))
	err := parallel(len(tasks), workers, func(i int) error {
		tk := tasks[i]
		p := truths[tk.t].P
		n := ns[tk.n]
		rel, dat := streams(seed, fmt.Sprintf("plan/%s/d=%d/n=%d/from=%d", truths[tk.t].Name, d, n, tk.from))
		x := make([]float64, d)
		ph := make([]float64, d)
		y := make([]float64, d)
		u := Uniform(d)
		var pt PlanPoint
		for r := tk.from; r < tk.to; r++ {
			multinomial(dat, n, p, x)
			normalize(x, ph)
			if err := m.Release(rel, x, y); err != nil {
				return err
			}
			pt.L2.Add(l2(y, ph))
			pt.KL.Add(kl(ph, y))
			pt.Sampling.Add(l2(ph, p))
			pt.UniformL2.Add(l2(u, ph))
			pt.UniformKL.Add(kl(ph, u))
		}
		results[i] = pt
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []PlanPoint
	for t, tr := range truths {
		for ni, n := range ns {
			pt := PlanPoint{Truth: tr.Name, N: n}
			for i, tk := range tasks {
				if tk.t == t && tk.n == ni {
					r := results[i]
					pt.L2.Merge(r.L2)
					pt.KL.Merge(r.KL)
					pt.Sampling.Merge(r.Sampling)
					pt.UniformL2.Merge(r.UniformL2)
					pt.UniformKL.Merge(r.UniformKL)
				}
			}
			out = append(out, pt)
		}
	}
	return out, nil
}

// PlanLine is one line of `stage plan`'s figure: mean ℓ2 error vs N.
type PlanLine struct {
	Name     string
	Sampling bool // the sampling-error reference (drawn dashed)
	N, L2    []float64
}

// PlotPlan draws the plan's lines (log-log) into a PNG at path. The i-th
// sampling line has the colour of the i-th private line.
func PlotPlan(path, title string, lines []PlanLine) error {
	cols := []color.RGBA{{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}}
	var ss []series
	np, ns := 0, 0
	for _, l := range lines {
		i := &np
		if l.Sampling {
			i = &ns
		}
		c := cols[*i%len(cols)]
		*i++
		ss = append(ss, series{name: l.Name, xs: l.N, ys: l.L2, dashed: l.Sampling, points: !l.Sampling, col: &c})
	}
	p, err := newPanel(title, "events per window and group (N)", "mean ℓ2 error", true, true, ss, true)
	if err != nil {
		return err
	}
	p.Legend.Left, p.Legend.Top = false, true // the lines fall from the top left
	return saveGrid(path, [][]*plot.Plot{{p}}, 6.5*vg.Inch, 4.5*vg.Inch)
}

// ActivityLine is one line of `stage plan`'s activity figure: predicted ℓ2
// per window against hours into the budget period (a step per window: its
// start and end at its value).
type ActivityLine struct {
	Name      string
	Reference bool // a constant reference level (drawn dashed, grey)
	Hours, L2 []float64
}

// PlotActivity draws the activity prediction (linear time, log ℓ2) into a
// PNG at path.
func PlotActivity(path, title string, lines []ActivityLine) error {
	cols := []color.RGBA{{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, {R: 0xe3, G: 0x77, B: 0xc2, A: 0xff}, {R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
		{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff}}
	grey := color.RGBA{R: 0x70, G: 0x70, B: 0x70, A: 0xff}
	var ss []series
	i := 0
	for _, l := range lines {
		c := grey
		if !l.Reference {
			c = cols[i%len(cols)]
			i++
		}
		ss = append(ss, series{name: l.Name, xs: l.Hours, ys: l.L2, dashed: l.Reference, col: &c})
	}
	p, err := newPanel(title, "hours into the budget period", "predicted ℓ2 error per window", false, true, ss, true)
	if err != nil {
		return err
	}
	// Room for the legend below the lowest line: the lines span the
	// period's whole width.
	lo, hi := math.Inf(1), 0.0
	for _, l := range lines {
		for _, y := range l.L2 {
			if y > 0 && !math.IsInf(y, 0) {
				lo, hi = math.Min(lo, y), math.Max(hi, y)
			}
		}
	}
	if hi > 0 {
		span := math.Max(hi/lo, 10)
		p.Y.Min, p.Y.Max = lo/math.Pow(span, 0.9), hi*1.5
	}
	p.Legend.Left, p.Legend.Top = false, false
	return saveGrid(path, [][]*plot.Plot{{p}}, 8*vg.Inch, 5.5*vg.Inch)
}
