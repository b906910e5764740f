package eval

import (
	"fmt"
	"math"

	"github.com/dpstage/stage/mechanism"
)

// Variant is one mechanism of a comparison: a spec template whose
// RDPEpsilon is filled in per target.
type Variant struct {
	Name string
	Spec mechanism.Spec
}

// FigureSensitivity is 000 Figure 2's: one observation changes bin (replace):
// Δ1 = 2, Δ2² = 2, Δ∞ = 1.
var FigureSensitivity = mechanism.Sensitivity{L1: 2, L2Sq: 2, LInf: 1}

// Variants returns the five mechanisms of 000 Figure 2 (plus the exact
// calibration) at order λ with FigureSensitivity: Dirichlet concentrated
// (000 eq. (8)), diffuse (001 Algorithm 1), exact (replace, mechanism/
// exact.go), the discrete Gaussian and the discrete Laplace.
func Variants(order float64) []Variant {
	d := func(c mechanism.Calibration) mechanism.Spec {
		return mechanism.Spec{Kind: mechanism.Dirichlet, Calibration: c, Order: order, Sensitivity: FigureSensitivity}
	}
	exact := d(mechanism.Exact)
	exact.Neighbour = mechanism.Replace
	return []Variant{
		{"dirichlet-concentrated", d(mechanism.Concentrated)},
		{"dirichlet-diffuse", d(mechanism.Diffuse)},
		{"dirichlet-exact", exact},
		{"gaussian", mechanism.Spec{Kind: mechanism.Gaussian, Order: order, Sensitivity: FigureSensitivity}},
		{"laplace", mechanism.Spec{Kind: mechanism.Laplace, Order: order, Sensitivity: FigureSensitivity}},
	}
}

// L2Config is experiment (a), 000 Figure 2: the ℓ2 loss ‖Y − x/N‖₂ of one
// release Y of the counts x ~ Multinomial(N, Zipf(d)) (000 §4 measures the
// loss against the normalized histogram x/N), for every (ε, d, N, variant).
type L2Config struct {
	Order    float64
	Epsilons []float64
	Dims     []int
	Ns       []int
	Reps     int // replications (fresh data and release) per (d, N)
	Seed     uint64
	Workers  int
	Variants []Variant
	// Unprojected adds the analytic UnprojectedGaussian (FigureSensitivity).
	Unprojected bool
}

// L2Point is the mean ℓ2 loss of one variant at one (ε, d, N).
type L2Point struct {
	Eps     float64
	D, N    int
	Variant string
	Params  mechanism.Params
	Stat    Stat
	// Analytic is set for UnprojectedGaussian: the mean is exact (no
	// replications; Stat holds it with a zero-width interval).
	Analytic bool
}

// UnprojectedGaussian is the Gaussian mechanism of 000 §4's analysis
// (eq. (17)): continuous N(0, σ²/N²·I_d) noise added to x/N with
// σ² = λΔ2²/(2ε), no projection onto the simplex. Its loss ‖Z‖₂ does not
// depend on the data: E‖Z‖₂ = (σ/N)·√2·Γ((d+1)/2)/Γ(d/2) exactly.
const UnprojectedGaussian = "gaussian-unprojected"

// unprojectedGaussianL2 is E‖Z‖₂ above.
func unprojectedGaussianL2(order, eps, l2sq float64, d, n int) float64 {
	sigma := math.Sqrt(order*l2sq/(2*eps)) / float64(n)
	lg1, _ := math.Lgamma(float64(d+1) / 2)
	lg2, _ := math.Lgamma(float64(d) / 2)
	return sigma * math.Sqrt2 * math.Exp(lg1-lg2)
}

// exactStat is a Stat holding the exact mean v (zero-width interval).
func exactStat(v float64) Stat { return Stat{N: 1, Sum: v, Sq: v * v, min: v, max: v, exact: true} }

// chunk is the number of replications one task runs.
const chunk = 50

// RunL2 runs experiment (a). The same data draw x is shared by every ε and
// variant of a replication (a paired comparison), so differences between
// mechanisms carry less noise than the separate confidence intervals
// suggest.
func RunL2(cfg L2Config) ([]L2Point, error) {
	mechs := make([][]mechanism.Mechanism, len(cfg.Epsilons))
	for e, eps := range cfg.Epsilons {
		for _, v := range cfg.Variants {
			spec := v.Spec
			spec.RDPEpsilon = eps
			m, err := mechanism.New(spec)
			if err != nil {
				return nil, fmt.Errorf("eval: calibrate %s at ε = %g: %w", v.Name, eps, err)
			}
			mechs[e] = append(mechs[e], m)
		}
	}
	type task struct{ d, n, from, to int }
	var tasks []task
	for _, d := range cfg.Dims {
		for _, n := range cfg.Ns {
			for from := 0; from < cfg.Reps; from += chunk {
				tasks = append(tasks, task{d, n, from, min(from+chunk, cfg.Reps)})
			}
		}
	}
	results := make([][][]Stat, len(tasks)) // [task][eps][variant]
	err := parallel(len(tasks), cfg.Workers, func(ti int) error {
		t := tasks[ti]
		rel, dat := streams(cfg.Seed, fmt.Sprintf("l2/d=%d/n=%d/from=%d", t.d, t.n, t.from))
		p := Zipf(t.d)
		x := make([]float64, t.d)
		ph := make([]float64, t.d)
		y := make([]float64, t.d)
		res := make([][]Stat, len(cfg.Epsilons))
		for e := range res {
			res[e] = make([]Stat, len(cfg.Variants))
		}
		for r := t.from; r < t.to; r++ {
			multinomial(dat, t.n, p, x)
			normalize(x, ph)
			for e := range cfg.Epsilons {
				for v, m := range mechs[e] {
					if err := m.Release(rel, x, y); err != nil {
						return err
					}
					res[e][v].Add(l2(y, ph))
				}
			}
		}
		results[ti] = res
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []L2Point
	for e, eps := range cfg.Epsilons {
		for _, d := range cfg.Dims {
			for _, n := range cfg.Ns {
				for v, variant := range cfg.Variants {
					var s Stat
					for ti, t := range tasks {
						if t.d == d && t.n == n {
							s.Merge(results[ti][e][v])
						}
					}
					out = append(out, L2Point{Eps: eps, D: d, N: n, Variant: variant.Name, Params: mechs[e][v].Params(), Stat: s})
				}
				if cfg.Unprojected {
					out = append(out, L2Point{Eps: eps, D: d, N: n, Variant: UnprojectedGaussian, Analytic: true,
						Params: mechanism.Params{Sigma: math.Sqrt(cfg.Order * FigureSensitivity.L2Sq / (2 * eps))},
						Stat:   exactStat(unprojectedGaussianL2(cfg.Order, eps, FigureSensitivity.L2Sq, d, n))})
				}
			}
		}
	}
	return out, nil
}

// Crossover is where a Dirichlet variant's mean ℓ2 loss stops being below
// a reference mechanism's, for one (ε, d).
type Crossover struct {
	Eps       float64
	D         int
	Variant   string
	Reference string // "gaussian" (the stage's, projected) or UnprojectedGaussian
	// N is the crossing, interpolated linearly in (log N, log ratio)
	// between the two grid points around the first change from below to
	// above, after the ratio has been clearly below (< 0.98) at a smaller
	// N; NaN if there is none on the grid (Below: the ratio stays < 1).
	N     float64
	Below bool
	// MinRatio and MaxRatio are the extremes of mean(Dirichlet)/mean(Gaussian)
	// over the grid.
	MinRatio, MaxRatio float64
}

// Crossovers finds, for every Dirichlet variant and (ε, d), where its ℓ2
// loss crosses the reference's (000 §4 predicts N of order d/ε against the
// unprojected Gaussian).
func Crossovers(points []L2Point, reference string) []Crossover {
	type key struct {
		eps float64
		d   int
	}
	means := map[key]map[string]map[int]float64{}
	var keys []key
	var ns []int
	seenN := map[int]bool{}
	var variants []string
	seenV := map[string]bool{}
	for _, p := range points {
		k := key{p.Eps, p.D}
		if means[k] == nil {
			means[k] = map[string]map[int]float64{}
			keys = append(keys, k)
		}
		if means[k][p.Variant] == nil {
			means[k][p.Variant] = map[int]float64{}
		}
		means[k][p.Variant][p.N] = p.Stat.Mean()
		if !seenN[p.N] {
			seenN[p.N] = true
			ns = append(ns, p.N)
		}
		if !seenV[p.Variant] {
			seenV[p.Variant] = true
			variants = append(variants, p.Variant)
		}
	}
	var out []Crossover
	for _, k := range keys {
		g := means[k][reference]
		if g == nil {
			continue
		}
		for _, v := range variants {
			if len(v) < 9 || v[:9] != "dirichlet" {
				continue
			}
			c := Crossover{Eps: k.eps, D: k.d, Variant: v, Reference: reference, N: math.NaN(), MinRatio: math.Inf(1), MaxRatio: 0}
			prevN, prevR := 0, 0.0
			below := false // clearly below (ratio < 0.98) at some smaller N
			for i, n := range ns {
				r := math.Log(means[k][v][n] / g[n])
				c.MinRatio = math.Min(c.MinRatio, math.Exp(r))
				c.MaxRatio = math.Max(c.MaxRatio, math.Exp(r))
				if i > 0 && math.IsNaN(c.N) && below && prevR < 0 && r >= 0 {
					f := -prevR / (r - prevR)
					c.N = math.Exp(math.Log(float64(prevN)) + f*(math.Log(float64(n))-math.Log(float64(prevN))))
				}
				prevN, prevR = n, r
				below = below || r < math.Log(0.98)
			}
			c.Below = c.MaxRatio < 1
			out = append(out, c)
		}
	}
	return out
}
