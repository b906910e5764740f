// Package eval reproduces the papers' privacy–utility measurements for the
// stage's mechanisms (`stage eval`) and estimates the error a configured
// stage will have (`stage plan`). Everything is Monte-Carlo with seeded
// streams (mechanism.NewSeededRand for releases, never the stage's secure
// source), spread over a worker pool of runtime.NumCPU() goroutines, and
// deterministic for a given seed whatever the number of workers.
//
// Experiments (papers in shared/papers):
//
//	(a) ℓ2 loss vs N, 000 Figure 2 / §4: Dirichlet (concentrated, diffuse,
//	    exact), discrete Gaussian and discrete Laplace at (λ = 2, ε) for
//	    ε ∈ {0.01, 0.1, 1}, d ∈ {10, 1000}, Δ1 = Δ2² = 2, Δ∞ = 1, on counts
//	    x ~ Multinomial(N, p) with p the Zipf law p_i ∝ 1/i; loss
//	    ‖Y − x/N‖₂, mean with a 95% confidence interval.
//	(b) exact Rényi divergence (000 eq. (19)) vs 001 Algorithm 1's
//	    guarantee as functions of r, λ ∈ {2, 20, 200}, on 001 Figure 3
//	    (top)'s neighbours (11,8,65,25,38,1) / (11,7,65,25,38,0) with
//	    α = 1 + 4(λ−1)r.
//	(c) D_KL(f̃(x) ‖ y) vs ε̂ at δ = 1e-5 for 001 Figure 3 (bottom)'s counts
//	    (119,74,618,272,13,187), r from 001 eq. (14), with the uniform
//	    distribution as a baseline.
package eval

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

// Options configure a `stage eval` run.
type Options struct {
	Out     string // output directory (created if needed)
	Quick   bool   // small grids and few repetitions (tests, smoke runs)
	Reps    int    // repetitions per point of (a) and (c); 0: default
	Seed    uint64
	Workers int // 0: runtime.NumCPU()
}

// Defaults: sized so that a full run takes about a minute on 2 cores.
const (
	defaultL2Reps = 5000
	defaultKLReps = 5000
	quickReps     = 100
)

// Result is what a run measured.
type Result struct {
	L2         []L2Point
	Crossovers []Crossover
	Renyi      []RenyiPoint
	KL         []KLPoint
	UniformKL  float64
	Files      []string // files written, relative to Options.Out
}

// Paper grids.
var (
	figure2Epsilons = []float64{0.01, 0.1, 1}
	figure2Dims     = []int{10, 1000}
	figure3Orders   = []float64{2, 20, 200}
)

// Figure2Ns is the grid of N of experiment (a): half decades from 10 to 10⁶.
func Figure2Ns() []int {
	var ns []int
	for _, v := range logGrid(10, 1e6, 11) {
		ns = append(ns, int(math.Round(v)))
	}
	return ns
}

// Run runs the three experiments, writes CSV and PNG files into o.Out and
// a short summary to w.
func Run(o Options, w io.Writer) (*Result, error) {
	if o.Out == "" {
		o.Out = "eval-out"
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	l2Reps, klReps := defaultL2Reps, defaultKLReps
	dims, ns := figure2Dims, Figure2Ns()
	rs := logGrid(1e-3, 1e2, 51)
	epsHats := logGrid(1e-3, 1e2, 21)
	if o.Quick {
		l2Reps, klReps = quickReps, quickReps
		dims, ns = []int{10}, []int{10, 1000, 100000}
		rs = logGrid(1e-3, 1e2, 11)
		epsHats = logGrid(1e-2, 1e2, 5)
	}
	if o.Reps > 0 {
		l2Reps, klReps = o.Reps, o.Reps
	}
	res := &Result{}
	var err error

	res.L2, err = RunL2(L2Config{Order: 2, Epsilons: figure2Epsilons, Dims: dims, Ns: ns, Reps: l2Reps,
		Seed: o.Seed, Workers: o.Workers, Variants: Variants(2), Unprojected: true})
	if err != nil {
		return nil, err
	}
	res.Crossovers = append(Crossovers(res.L2, UnprojectedGaussian), Crossovers(res.L2, "gaussian")...)
	if res.Renyi, err = RenyiVsR(figure3Orders, rs); err != nil {
		return nil, err
	}
	res.KL, res.UniformKL, err = RunKL(KLConfig{Orders: figure3Orders, EpsHats: epsHats, Delta: 1e-5, Reps: klReps,
		Seed: o.Seed, Workers: o.Workers, Variants: KLVariants()})
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		fn   func(string) error
	}{
		{"l2_vs_n.csv", res.writeL2CSV}, {"l2_vs_n.png", res.plotL2},
		{"renyi_vs_r.csv", res.writeRenyiCSV}, {"renyi_vs_r.png", res.plotRenyi},
		{"kl_vs_eps.csv", res.writeKLCSV}, {"kl_vs_eps.png", res.plotKL},
	} {
		if err := f.fn(filepath.Join(o.Out, f.name)); err != nil {
			return nil, fmt.Errorf("eval: %s: %w", f.name, err)
		}
		res.Files = append(res.Files, f.name)
	}
	res.Summary(w, l2Reps, klReps)
	return res, nil
}

func writeCSV(path string, header []string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(f)
	cw.Write(header)
	cw.WriteAll(rows) // flushes
	if err := cw.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (r *Result) writeL2CSV(path string) error {
	var rows [][]string
	for _, p := range r.L2 {
		reps, lo, hi := strconv.Itoa(p.Stat.N), fmtG(p.Stat.Lo()), fmtG(p.Stat.Hi())
		if p.Analytic {
			reps, lo, hi = "0", fmtG(p.Stat.Mean()), fmtG(p.Stat.Mean())
		}
		rows = append(rows, []string{fmtG(p.Eps), strconv.Itoa(p.D), strconv.Itoa(p.N), p.Variant,
			fmtG(p.Params.Alpha), fmtG(p.Params.R), fmtG(p.Params.Sigma), fmtG(p.Params.Scale),
			reps, fmtG(p.Stat.Mean()), lo, hi})
	}
	return writeCSV(path, []string{"epsilon", "d", "n", "mechanism", "alpha", "r", "sigma", "scale",
		"reps", "mean_l2", "ci95_lo", "ci95_hi"}, rows)
}

func (r *Result) writeRenyiCSV(path string) error {
	var rows [][]string
	for _, p := range r.Renyi {
		rows = append(rows, []string{fmtG(p.Order), fmtG(p.R), fmtG(p.Alpha), fmtG(p.Exact), fmtG(p.Reverse),
			fmtG(p.Bound), fmtG(p.Bound / p.Exact)})
	}
	return writeCSV(path, []string{"order", "r", "alpha", "exact", "exact_reverse", "guarantee", "ratio_guarantee_exact"}, rows)
}

func (r *Result) writeKLCSV(path string) error {
	var rows [][]string
	for _, p := range r.KL {
		mean, lo, hi := "", "", ""
		if p.Feasible {
			mean, lo, hi = fmtG(p.Stat.Mean()), fmtG(p.Stat.Lo()), fmtG(p.Stat.Hi())
		}
		rows = append(rows, []string{fmtG(p.Order), fmtG(p.EpsHat), fmtG(p.RDPEps), p.Variant, strconv.FormatBool(p.Feasible),
			fmtG(p.Params.R), fmtG(p.Params.Alpha), strconv.Itoa(p.Stat.N), mean, lo, hi, fmtG(r.UniformKL)})
	}
	return writeCSV(path, []string{"order", "epsilon_hat", "rdp_epsilon", "mechanism", "feasible", "r", "alpha",
		"reps", "mean_kl", "ci95_lo", "ci95_hi", "uniform_kl"}, rows)
}

// plotL2 draws experiment (a): one panel per (d, ε), rows d, columns ε.
func (r *Result) plotL2(path string) error {
	var dims []int
	var epss []float64
	var variants []string
	seen := map[string]bool{}
	for _, p := range r.L2 {
		if k := "d" + strconv.Itoa(p.D); !seen[k] {
			seen[k] = true
			dims = append(dims, p.D)
		}
		if k := "e" + fmtG(p.Eps); !seen[k] {
			seen[k] = true
			epss = append(epss, p.Eps)
		}
		if k := "v" + p.Variant; !seen[k] {
			seen[k] = true
			variants = append(variants, p.Variant)
		}
	}
	plots := make([][]*plot.Plot, len(dims))
	for j, d := range dims {
		for i, eps := range epss {
			var ss []series
			for _, v := range variants {
				s := series{name: v, dashed: v == UnprojectedGaussian}
				for _, p := range r.L2 {
					if p.D == d && p.Eps == eps && p.Variant == v {
						s.xs = append(s.xs, float64(p.N))
						s.ys = append(s.ys, p.Stat.Mean())
						if !p.Analytic {
							s.lo = append(s.lo, p.Stat.Lo())
							s.hi = append(s.hi, p.Stat.Hi())
						}
					}
				}
				if len(s.lo) == 0 {
					s.lo, s.hi = nil, nil
				}
				ss = append(ss, s)
			}
			pl, err := newPanel(fmt.Sprintf("d = %d, (λ=2, ε=%g)-RDP", d, eps), "N (events)", "mean ℓ2 loss", true, true, ss, j == 0 && i == 0)
			if err != nil {
				return err
			}
			plots[j] = append(plots[j], pl)
		}
	}
	return saveGrid(path, plots, vg.Length(len(epss))*4*vg.Inch, vg.Length(len(dims))*3.4*vg.Inch)
}

// plotRenyi draws experiment (b): one panel per λ.
func (r *Result) plotRenyi(path string) error {
	var row []*plot.Plot
	for _, o := range uniqueOrders(r.Renyi) {
		ex := series{name: "exact divergence"}
		rev := series{name: "reverse direction", dashed: true}
		bd := series{name: "guarantee (Alg. 1)"}
		for _, p := range r.Renyi {
			if p.Order != o {
				continue
			}
			ex.xs, ex.ys = append(ex.xs, p.R), append(ex.ys, p.Exact)
			rev.xs, rev.ys = append(rev.xs, p.R), append(rev.ys, p.Reverse)
			bd.xs, bd.ys = append(bd.xs, p.R), append(bd.ys, p.Bound)
		}
		pl, err := newPanel(fmt.Sprintf("λ = %g", o), "r", "Rényi divergence ε", true, true, []series{bd, ex, rev}, len(row) == 0)
		if err != nil {
			return err
		}
		row = append(row, pl)
	}
	return saveGrid(path, [][]*plot.Plot{row}, vg.Length(len(row))*3.6*vg.Inch, 3.4*vg.Inch)
}

func uniqueOrders(ps []RenyiPoint) []float64 {
	var out []float64
	for _, p := range ps {
		if len(out) == 0 || out[len(out)-1] != p.Order {
			out = append(out, p.Order)
		}
	}
	return out
}

// plotKL draws experiment (c): one panel per λ.
func (r *Result) plotKL(path string) error {
	var orders []float64
	var variants []string
	seen := map[string]bool{}
	for _, p := range r.KL {
		if k := "o" + fmtG(p.Order); !seen[k] {
			seen[k] = true
			orders = append(orders, p.Order)
		}
		if k := "v" + p.Variant; !seen[k] {
			seen[k] = true
			variants = append(variants, p.Variant)
		}
	}
	var row []*plot.Plot
	for _, o := range orders {
		var ss []series
		base := series{name: "uniform baseline", dashed: true}
		for _, v := range variants {
			s := series{name: v, points: true}
			for _, p := range r.KL {
				if p.Order == o && p.Variant == v && p.Feasible {
					s.xs = append(s.xs, p.EpsHat)
					s.ys = append(s.ys, p.Stat.Mean())
					s.lo = append(s.lo, p.Stat.Lo())
					s.hi = append(s.hi, p.Stat.Hi())
				}
			}
			ss = append(ss, s)
		}
		for _, p := range r.KL {
			if p.Order == o && p.Variant == variants[0] {
				base.xs, base.ys = append(base.xs, p.EpsHat), append(base.ys, r.UniformKL)
			}
		}
		ss = append(ss, base)
		pl, err := newPanel(fmt.Sprintf("λ = %g, δ = 1e-5", o), "ε̂ of (ε̂, δ)-DP", "mean KL(f/|f| ‖ y)", true, true, ss, len(row) == 0)
		if err != nil {
			return err
		}
		row = append(row, pl)
	}
	return saveGrid(path, [][]*plot.Plot{row}, vg.Length(len(row))*3.6*vg.Inch, 3.4*vg.Inch)
}

// Summary prints the run's headline numbers.
func (r *Result) Summary(w io.Writer, l2Reps, klReps int) {
	fmt.Fprintf(w, "(a) ℓ2 loss vs N (000 Fig. 2; λ=2, Δ2²=2, Δ∞=1, Zipf(1) data, %d reps per point)\n", l2Reps)
	fmt.Fprintf(w, "    where the Dirichlet mechanism's mean ℓ2 loss crosses the Gaussian's (000 §4: N ~ d/ε);\n")
	fmt.Fprintf(w, "    %s = 000 §4's Gaussian on x/N without projection (analytic), gaussian = the stage's (clipped, renormalized):\n", UnprojectedGaussian)
	for _, c := range r.Crossovers {
		where := "no crossing on the grid (always above)"
		switch {
		case !math.IsNaN(c.N):
			where = fmt.Sprintf("N* ≈ %-8.3g (d/ε = %g)", c.N, float64(c.D)/c.Eps)
		case c.Below:
			where = "no crossing on the grid (always below)"
		}
		fmt.Fprintf(w, "    vs %-20s ε=%-5g d=%-5d %-23s %s  ratio in [%.3g, %.3g]\n", c.Reference, c.Eps, c.D, c.Variant, where, c.MinRatio, c.MaxRatio)
	}
	// exact vs concentrated: best ratio of mean losses.
	type key struct {
		eps  float64
		d, n int
	}
	conc := map[key]float64{}
	for _, p := range r.L2 {
		if p.Variant == "dirichlet-concentrated" {
			conc[key{p.Eps, p.D, p.N}] = p.Stat.Mean()
		}
	}
	lo, hi := math.Inf(1), 0.0
	for _, p := range r.L2 {
		if p.Variant == "dirichlet-exact" {
			v := p.Stat.Mean() / conc[key{p.Eps, p.D, p.N}]
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	fmt.Fprintf(w, "    exact / concentrated mean ℓ2 loss over all points: [%.3f, %.3f]\n", lo, hi)

	fmt.Fprintf(w, "(b) guarantee (001 Alg. 1) / exact divergence (000 eq. (19)) on 001 Fig. 3's neighbours:\n")
	for _, o := range uniqueOrders(r.Renyi) {
		mn, mx, minR, maxR := math.Inf(1), 0.0, 0.0, 0.0
		above := true
		for _, p := range r.Renyi {
			if p.Order != o {
				continue
			}
			v := p.Bound / p.Exact
			if v < mn {
				mn, minR = v, p.R
			}
			if v > mx {
				mx, maxR = v, p.R
			}
			above = above && p.Bound >= p.Exact && p.Bound >= p.Reverse
		}
		fmt.Fprintf(w, "    λ=%-4g ratio in [%.3f (r=%.3g), %.3f (r=%.3g)]; guarantee above both directions at every r: %v\n", o, mn, minR, mx, maxR, above)
	}

	fmt.Fprintf(w, "(c) mean KL(f̃ ‖ y) vs ε̂ (001 Fig. 3 bottom; δ=1e-5, %d reps), uniform baseline %.4f:\n", klReps, r.UniformKL)
	type ok struct {
		order float64
		v     string
	}
	first := map[ok]float64{}
	var keys []ok
	for _, p := range r.KL {
		k := ok{p.Order, p.Variant}
		if _, seen := first[k]; !seen {
			first[k] = math.NaN()
			keys = append(keys, k)
		}
		if p.Feasible && math.IsNaN(first[k]) {
			first[k] = p.EpsHat
		}
	}
	sort.SliceStable(keys, func(i, j int) bool { return keys[i].order < keys[j].order })
	for _, k := range keys {
		var parts string
		for _, p := range r.KL {
			if p.Order == k.order && p.Variant == k.v && p.Feasible && (near(p.EpsHat, 1) || near(p.EpsHat, 10) || near(p.EpsHat, 100)) {
				parts += fmt.Sprintf("  ε̂=%-4.3g KL=%.4g", p.EpsHat, p.Stat.Mean())
			}
		}
		fmt.Fprintf(w, "    λ=%-4g %-23s feasible from ε̂ ≈ %.3g%s\n", k.order, k.v, first[k], parts)
	}
	fmt.Fprintf(w, "files: %v\n", r.Files)
}

// near reports whether x is within 1% of v.
func near(x, v float64) bool { return math.Abs(x-v) <= 0.01*v }
