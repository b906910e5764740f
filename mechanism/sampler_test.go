package mechanism

import (
	"math"
	"strconv"
	"testing"

	"gonum.org/v1/gonum/mathext"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/dpstage/stage/internal/lib/special"
)

// Each statistical test below uses a fixed seed, so it is deterministic; the
// stated false-failure rate is the probability, over seeds, that a correct
// sampler fails it — the chance that a change of seed or of the order of
// draws makes it fail spuriously.

// TestGammaKS: Marsaglia–Tsang Gamma(a, 1) against gonum's Gamma CDF.
// False-failure rate ≤ 1e-6 per shape, ≤ 6e-6 in total.
func TestGammaKS(t *testing.T) {
	const n, rate = 50000, 1e-6
	rng := NewSeededRand(seed(1))
	crit := kolmogorovThreshold(n, rate)
	for _, a := range []float64{1, 1.0001, 1.3, 4.7, 50, 1e4} {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = rng.gammaGE1(a)
		}
		dist := distuv.Gamma{Alpha: a, Beta: 1}
		if d := ksStatistic(xs, dist.CDF, nil); d > crit {
			t.Errorf("Gamma(%g): KS D = %.4f > %.4f", a, d, crit)
		}
	}
}

// TestLogGammaKS: the log-space sampler log G(a) = log G(a+1) + log(U)/a for
// tiny shapes, against the Gamma CDF evaluated at e^l (for e^l < 1e-9,
// P(a, x) = x^a/Γ(a+1)·(1 + O(x)) in log space, since x underflows).
// False-failure rate ≤ 1e-6 per shape, ≤ 5e-6 in total.
func TestLogGammaKS(t *testing.T) {
	const n, rate = 50000, 1e-6
	rng := NewSeededRand(seed(2))
	crit := kolmogorovThreshold(n, rate)
	for _, a := range []float64{1e-3, 0.01, 0.05, 0.5, 0.999} {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = rng.logGamma(a)
		}
		la1 := special.Lgamma(a + 1)
		cdf := func(l float64) float64 {
			if l < math.Log(1e-9) {
				return math.Exp(a*l - la1)
			}
			return mathext.GammaIncReg(a, math.Exp(l))
		}
		if d := ksStatistic(xs, cdf, nil); d > crit {
			t.Errorf("log Gamma(%g): KS D = %.4f > %.4f", a, d, crit)
		}
	}
}

// TestDirichletMarginalsKS: each marginal of Dir(shape) is
// Beta(shape_i, shape_0 − shape_i); KS against gonum's Beta CDF. Values the
// sampler floors to 2^-1022 form an atom there, handled by using 0 as the
// CDF's left limit at that point (the test is then conservative). Marginals
// whose second Beta parameter is < 0.5 are skipped: their mass within 2^-54
// of 1 rounds to 1.0, an atom at the other end. Includes tiny shapes (1e-3,
// log-space path) and shapes ≥ 1 (linear path), through both the internal
// sampler and Release. False-failure rate ≤ 1e-6 per marginal; 31 marginals
// are tested, ≤ 3.1e-5 in total.
func TestDirichletMarginalsKS(t *testing.T) {
	const n, rate = 10000, 1e-6
	crit := kolmogorovThreshold(n, rate)
	cases := []struct {
		name   string
		counts []float64
		alpha  float64
	}{
		{"tiny-alpha", []float64{0, 0, 0, 4.999, 0.499}, 1e-3},
		{"tiny-alpha-d2", []float64{0, 1}, 1e-3},
		{"sub-one", []float64{0, 0.2, 3, 0, 12}, 0.3},
		{"linear", []float64{0, 3, 10, 100}, 1},
		{"example-alpha", []float64{0, 1, 5, 0, 40, 2, 0, 0}, 3.4599529483523073},
	}
	checked := 0
	for ci, c := range cases {
		rng := NewSeededRand(seed(byte(10 + ci)))
		d := len(c.counts)
		draws := make([][]float64, d)
		out := make([]float64, d)
		minShape := math.Inf(1)
		a0 := 0.0
		for _, x := range c.counts {
			minShape = math.Min(minShape, x+c.alpha)
			a0 += x + c.alpha
		}
		for i := 0; i < n; i++ {
			rng.dirichlet(c.counts, 1, 0, c.alpha, minShape < 1, out)
			for j, y := range out {
				draws[j] = append(draws[j], y)
			}
		}
		for j := range c.counts {
			a := c.counts[j] + c.alpha
			b := a0 - a
			if b < 0.5 {
				continue
			}
			checked++
			beta := distuv.Beta{Alpha: a, Beta: b}
			left := func(x float64) float64 {
				if x <= smallestNormal {
					return 0
				}
				return beta.CDF(x)
			}
			if dd := ksStatistic(draws[j], beta.CDF, left); dd > crit {
				t.Errorf("%s: marginal %d Beta(%g, %g): KS D = %.4f > %.4f", c.name, j, a, b, dd, crit)
			}
		}
	}
	// Through Release: the worked example's concentrated mechanism, and a
	// diffuse one (r ≠ 1).
	for k, spec := range []Spec{example, {Kind: Dirichlet, Calibration: Diffuse, Order: 3, RDPEpsilon: 2, Sensitivity: Sensitivity{L2Sq: 2, LInf: 1}}} {
		m := mustNew(t, spec)
		p := m.Params()
		counts := []float64{0, 2, 7, 30}
		rng := NewSeededRand(seed(byte(30 + k)))
		draws := make([][]float64, len(counts))
		out := make([]float64, len(counts))
		for i := 0; i < n; i++ {
			if err := m.Release(rng, counts, out); err != nil {
				t.Fatal(err)
			}
			for j, y := range out {
				draws[j] = append(draws[j], y)
			}
		}
		a0 := 0.0
		for _, x := range counts {
			a0 += p.R*x + p.Alpha
		}
		for j, x := range counts {
			checked++
			a := p.R*x + p.Alpha
			beta := distuv.Beta{Alpha: a, Beta: a0 - a}
			if dd := ksStatistic(draws[j], beta.CDF, nil); dd > crit {
				t.Errorf("release %d: marginal %d Beta(%g, %g): KS D = %.4f > %.4f", k, j, a, a0-a, dd, crit)
			}
		}
	}
	if checked != 31 {
		t.Errorf("checked %d marginals; update the stated false-failure rate", checked)
	}
}

// checkSimplex verifies a Dirichlet output: finite entries ≥ 2^-1022 and a
// sum within 1e-12 of 1 (computed both naively and compensated).
func checkSimplex(t *testing.T, name string, out []float64, strictlyPositive bool) {
	t.Helper()
	var k kahan
	naive := 0.0
	for i, y := range out {
		if math.IsNaN(y) || math.IsInf(y, 0) || y < 0 || (strictlyPositive && !(y >= smallestNormal)) {
			t.Fatalf("%s: entry %d = %g", name, i, y)
		}
		k.add(y)
		naive += y
	}
	if s := k.value(); math.Abs(s-1) > 1e-12 {
		t.Fatalf("%s: compensated sum = %.17g", name, s)
	}
	if math.Abs(naive-1) > 1e-12 {
		t.Fatalf("%s: naive sum = %.17g", name, naive)
	}
}

// TestDirichletSimplexInvariants: valid simplex points for tiny shapes, for
// d = 10⁶ (once per path), and for counts near the float64 range.
func TestDirichletSimplexInvariants(t *testing.T) {
	rng := NewSeededRand(seed(3))
	const big = 1_000_000
	counts := make([]float64, big)
	for i := range counts {
		if i%1000 == 0 {
			counts[i] = float64(i % 7)
		}
	}
	out := make([]float64, big)
	rng.dirichlet(counts, 1, 0, 1e-3, true, out)
	checkSimplex(t, "d=1e6 alpha=1e-3 (log path)", out, true)
	rng.dirichlet(counts, 1, 0, 1.5, false, out)
	checkSimplex(t, "d=1e6 alpha=1.5 (linear path)", out, true)

	for i, c := range []struct {
		counts []float64
		alpha  float64
	}{
		{[]float64{0, 0}, 1e-3},
		{[]float64{0, 0, 0}, 1e-9},
		{[]float64{1e300, 1e300, 1e300}, 1},   // sum overflows: rescale path
		{[]float64{1e300, 0, 0, 5}, 1e-3},     // extreme mix in log space
		{[]float64{0, 1e-300, 3}, 2},          // subnormal-ish counts
		{[]float64{1e15, 1, 0, 1e15, 2}, 0.5}, // large and tiny shapes
	} {
		o := make([]float64, len(c.counts))
		for rep := 0; rep < 200; rep++ {
			minShape := math.Inf(1)
			for _, x := range c.counts {
				minShape = math.Min(minShape, x+c.alpha)
			}
			rng.dirichlet(c.counts, 1, 0, c.alpha, minShape < 1, o)
			checkSimplex(t, "case "+itoa(i), o, true)
		}
	}
}

// TestBernoulliExpNeg: CKS20 Algorithm 1 returns true with probability
// exp(−γ), including γ > 1 and 128-bit numerators/denominators; also the
// 128-bit lazy Bernoulli(n/m). Two-sided z-test on 2·10⁵ draws each;
// false-failure rate ≤ 1e-6 per case, ≤ 1e-5 in total.
func TestBernoulliExpNeg(t *testing.T) {
	const n, rate = 200000, 1e-6
	z := zThreshold(rate)
	rng := NewSeededRand(seed(4))
	check := func(name string, p float64, draw func() bool) {
		hits := 0
		for i := 0; i < n; i++ {
			if draw() {
				hits++
			}
		}
		se := math.Sqrt(p * (1 - p) / n)
		if got := float64(hits) / n; math.Abs(got-p) > z*se+1e-12 {
			t.Errorf("%s: frequency %.5f, want %.5f (±%.5f)", name, got, p, z*se)
		}
	}
	big := u128{1 << 30, 0} // 2^94
	for _, c := range []struct {
		name string
		n, d u128
	}{
		{"gamma=0", u128{0, 0}, u128{0, 7}},
		{"gamma=0.3", u128{0, 3}, u128{0, 10}},
		{"gamma=1", u128{0, 5}, u128{0, 5}},
		{"gamma=2.5", u128{0, 5}, u128{0, 2}},
		{"gamma=7.25", u128{0, 29}, u128{0, 4}},
		{"gamma=0.6 (128-bit)", u128{0x99999999, 0x9999999999999999}, u128{1 << 32, 0}},
		{"gamma=1.75 (128-bit)", u128{7 << 28, 0}, big},
	} {
		nn, dd := c.n, c.d
		gamma := (float64(nn.hi)*0x1p64 + float64(nn.lo)) / (float64(dd.hi)*0x1p64 + float64(dd.lo))
		check(c.name, math.Exp(-gamma), func() bool { return rng.bernoulliExpNeg(nn, dd) })
	}
	check("exp(-1)", math.Exp(-1), rng.bernoulliExpNeg1)
	check("ratio 1/3 (128-bit)", 1.0/3, func() bool { return rng.bernoulliRatio(u128{1 << 40, 0}, u128{3 << 40, 0}) })
	check("ratio 0.999 (128-bit)", 0.999, func() bool { return rng.bernoulliRatio(u128{999 << 40, 0}, u128{1000 << 40, 0}) })
}

// momentTest checks a sample of an integer distribution against its exact
// mean 0, variance v, fourth central moment m4 and P[X = 0] = p0, with
// two-sided z-tests (the sample variance's standard error is
// √((m4 − v²)/n)). The P[0] test is skipped when n·p0·(1−p0) < 25, where the
// normal approximation of the binomial count is not valid. False-failure
// rate ≤ 3·rate per call.
func momentTest(t *testing.T, name string, xs []int64, v, m4, p0, rate float64) {
	t.Helper()
	z := zThreshold(rate)
	n := float64(len(xs))
	var s, s2 float64
	zeros := 0
	for _, x := range xs {
		f := float64(x)
		s += f
		s2 += f * f
		if x == 0 {
			zeros++
		}
	}
	mean := s / n
	if se := math.Sqrt(v / n); math.Abs(mean) > z*se {
		t.Errorf("%s: mean %.6g, want 0 ± %.3g", name, mean, z*se)
	}
	vhat := s2/n - mean*mean
	if se := math.Sqrt((m4 - v*v) / n); math.Abs(vhat-v) > z*se {
		t.Errorf("%s: variance %.6g, want %.6g ± %.3g", name, vhat, v, z*se)
	}
	if se := math.Sqrt(p0 * (1 - p0) / n); n*p0*(1-p0) >= 25 && math.Abs(float64(zeros)/n-p0) > z*se {
		t.Errorf("%s: P[0] %.6g, want %.6g ± %.3g", name, float64(zeros)/n, p0, z*se)
	}
}

// TestDiscreteLaplaceMoments: Lap_Z(b) for integer and dyadic scales.
// Exact moments: Z = G₁ − G₂ with G geometric(1 − q), q = e^{−1/b};
// κ₂(G) = q/(1−q)², κ₄(G) = q(1+4q+q²)/(1−q)⁴; Var Z = 2κ₂,
// μ₄(Z) = 2(κ₄ + 3κ₂²) + 6κ₂², P[Z = 0] = (1−q)/(1+q).
// False-failure rate ≤ 3e-6 per scale, ≤ 1.8e-5 in total.
func TestDiscreteLaplaceMoments(t *testing.T) {
	n := trials(100000)
	rng := NewSeededRand(seed(5))
	for _, b := range []float64{0.25, 1, 7.3, 1000, 0x1p40, 3.0e-6} {
		tt, k := dyadicCeil(b, dyadicPrecBits)
		bb := math.Ldexp(float64(tt), -int(k))
		q := math.Exp(-1 / bb)
		omq := -math.Expm1(-1 / bb)
		k2 := q / (omq * omq)
		k4 := q * (1 + 4*q + q*q) / (omq * omq * omq * omq)
		xs := make([]int64, n)
		for i := range xs {
			xs[i] = rng.discreteLaplace(tt, k)
		}
		momentTest(t, "Lap_Z("+formatG(bb)+")", xs, 2*k2, 2*(k4+3*k2*k2)+6*k2*k2, omq/(1+q), 1e-6)
	}
}

// TestDiscreteGaussianMoments: N_Z(0, σ²) against its exact moments,
// computed by summation over a ±(40σ + 10) window (for σ = 2^20 the
// continuous values σ², 3σ⁴ and 1/(σ√(2π)), exact to far below the test's
// resolution). False-failure rate ≤ 3e-6 per σ, ≤ 1.8e-5 in total.
func TestDiscreteGaussianMoments(t *testing.T) {
	n := trials(100000)
	rng := NewSeededRand(seed(6))
	for _, sigma := range []float64{0.1, 0.8, 1, 3.7, 50, 0x1p20} {
		dg, ok := newDGauss(sigma * sigma)
		if !ok {
			t.Fatalf("newDGauss(%g) failed", sigma)
		}
		s2 := dg.sigma2()
		var v, m4, p0 float64
		if sigma > 1e3 {
			v, m4, p0 = s2, 3*s2*s2, 1/math.Sqrt(2*math.Pi*s2)
		} else {
			w := int(40*sigma) + 10
			var z, e2, e4 float64
			for x := -w; x <= w; x++ {
				f := float64(x)
				p := math.Exp(-f * f / (2 * s2))
				z += p
				e2 += f * f * p
				e4 += f * f * f * f * p
			}
			v, m4, p0 = e2/z, e4/z, 1/z
		}
		xs := make([]int64, n)
		for i := range xs {
			xs[i] = rng.discreteGaussian(&dg)
		}
		momentTest(t, "N_Z(0, "+formatG(s2)+")", xs, v, m4, p0, 1e-6)
	}
}

func formatG(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// TestReleaseOutputs: every mechanism's output is a simplex point for random
// integer counts, including all-zero counts; Gaussian/Laplace all-clipped
// vectors become uniform; out may alias counts.
func TestReleaseOutputs(t *testing.T) {
	specs := []Spec{
		example,
		{Kind: Dirichlet, Calibration: ClosedForm, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2, LInf: 1}},
		{Kind: Dirichlet, Calibration: Diffuse, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2, LInf: 1}, LowerBound: 2},
		{Kind: Dirichlet, Order: 1.1, RDPEpsilon: 50, Sensitivity: Sensitivity{L2Sq: 1, LInf: 1}}, // α < 1
		{Kind: Gaussian, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2}},
		{Kind: Laplace, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L1: 2, LInf: 1}},
	}
	rng := NewSeededRand(seed(7))
	for _, s := range specs {
		m := mustNew(t, s)
		for _, counts := range [][]float64{{0, 0}, {0, 0, 0, 0, 0}, {3, 0, 100, 7}, {1e6, 0, 1}} {
			out := make([]float64, len(counts))
			for rep := 0; rep < 50; rep++ {
				if err := m.Release(rng, counts, out); err != nil {
					t.Fatal(err)
				}
				checkSimplex(t, string(s.Kind), out, false)
				if s.Kind == Dirichlet {
					// Released on the grid; the draw before it is > 0.
					checkGrid(t, string(s.Kind), out)
					if err := m.(Unrounded).ReleaseUnrounded(rng, counts, out); err != nil {
						t.Fatal(err)
					}
					checkSimplex(t, string(s.Kind)+" unrounded", out, true)
				}
			}
			// Aliasing.
			c := append([]float64(nil), counts...)
			if err := m.Release(rng, c, c); err != nil {
				t.Fatal(err)
			}
			checkSimplex(t, string(s.Kind)+" aliased", c, false)
		}
	}
	v := []float64{0, 0, 0, 0}
	projectClipped(v)
	for _, x := range v {
		if x != 0.25 {
			t.Fatalf("all-zero projection = %v, want uniform", v)
		}
	}
}

// TestLowerBoundClamp: counts below the declared lower bound are released
// as if they were at the bound (same seed, same output).
func TestLowerBoundClamp(t *testing.T) {
	m := mustNew(t, Spec{Kind: Dirichlet, Calibration: Diffuse, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2, LInf: 1}, LowerBound: 5})
	a, b := make([]float64, 3), make([]float64, 3)
	if err := m.Release(NewSeededRand(seed(8)), []float64{0, 2, 9}, a); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(NewSeededRand(seed(8)), []float64{5, 5, 9}, b); err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("clamped release %v != release at the bound %v", a, b)
		}
	}
}

// TestReleaseZeroAllocs: no allocation per release after warm-up, for every
// mechanism and both Dirichlet sampling paths.
func TestReleaseZeroAllocs(t *testing.T) {
	specs := []Spec{
		example,
		{Kind: Dirichlet, Order: 1.1, RDPEpsilon: 50, Sensitivity: Sensitivity{L2Sq: 1, LInf: 1}}, // log path
		{Kind: Gaussian, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2}},
		{Kind: Laplace, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L1: 2, LInf: 1}},
	}
	counts := make([]float64, 1000)
	for i := range counts {
		counts[i] = float64(i % 13)
	}
	out := make([]float64, len(counts))
	rng := NewSeededRand(seed(9))
	for _, s := range specs {
		m := mustNew(t, s)
		if allocs := testing.AllocsPerRun(20, func() {
			if err := m.Release(rng, counts, out); err != nil {
				t.Fatal(err)
			}
		}); allocs != 0 {
			t.Errorf("%s/%s: %g allocations per release", s.Kind, s.Calibration, allocs)
		}
	}
}

// TestDiscretePMFChiSquare: the whole pmf of both discrete samplers, by a
// chi-square goodness-of-fit test on the cells −K..K, the two edge cells
// holding the tails (expected count ≥ 20 in every cell), against the exact
// pmf computed by summation. False-failure rate ≤ 1e-6 per distribution, ≤ 4e-6 in total.
func TestDiscretePMFChiSquare(t *testing.T) {
	n := trials(100000)
	rng := NewSeededRand(seed(11))
	type dist struct {
		name   string
		logw   func(k int) float64 // unnormalized log pmf
		sample func() int64
	}
	var dists []dist
	for _, b := range []float64{0.6, 4.25} {
		tt, k := dyadicCeil(b, dyadicPrecBits)
		bb := math.Ldexp(float64(tt), -int(k))
		dists = append(dists, dist{"Lap_Z(" + formatG(bb) + ")",
			func(x int) float64 { return -math.Abs(float64(x)) / bb },
			func() int64 { return rng.discreteLaplace(tt, k) }})
	}
	for _, sigma := range []float64{0.45, 2.3} {
		dg, _ := newDGauss(sigma * sigma)
		s2 := dg.sigma2()
		dists = append(dists, dist{"N_Z(0, " + formatG(s2) + ")",
			func(x int) float64 { return -float64(x*x) / (2 * s2) },
			func() int64 { return rng.discreteGaussian(&dg) }})
	}
	for _, d := range dists {
		const w = 2000
		z := 0.0
		for k := -w; k <= w; k++ {
			z += math.Exp(d.logw(k))
		}
		pmf := func(k int) float64 { return math.Exp(d.logw(k)) / z }
		upper := func(k int) float64 { // P[X ≥ k]
			p := 0.0
			for x := k; x <= w; x++ {
				p += pmf(x)
			}
			return p
		}
		// Cells −K..K, the edge cells holding the tails (X ≤ −K, X ≥ K), with
		// K the largest value whose tail has an expected count ≥ 20.
		K := 0
		for float64(n)*upper(K+1) >= 20 {
			K++
		}
		counts := make(map[int]int)
		for i := 0; i < n; i++ {
			x := int(d.sample())
			counts[max(-K, min(K, x))]++
		}
		chi2 := 0.0
		cells := 0
		for k := -K; k <= K; k++ {
			p := pmf(k)
			if k == K || k == -K {
				p = upper(K)
			}
			e := p * float64(n)
			o := float64(counts[k])
			chi2 += (o - e) * (o - e) / e
			cells++
		}
		crit := distuv.ChiSquared{K: float64(cells - 1)}.Quantile(1 - 1e-6)
		if chi2 > crit {
			t.Errorf("%s: chi-square %.1f > %.1f (%d cells)", d.name, chi2, crit, cells)
		}
	}
}

// TestConcurrentReleases: one Mechanism shared by several goroutines, each
// with its own Rand (run with -race to check the immutability claim).
func TestConcurrentReleases(t *testing.T) {
	for _, s := range []Spec{
		example,
		{Kind: Gaussian, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2}},
		{Kind: Laplace, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L1: 2, LInf: 1}},
	} {
		m := mustNew(t, s)
		done := make(chan error)
		for w := 0; w < 4; w++ {
			go func(w int) {
				rng := NewSeededRand(seed(byte(40 + w)))
				counts := []float64{5, 0, 12, 3}
				out := make([]float64, len(counts))
				for i := 0; i < 200; i++ {
					if err := m.Release(rng, counts, out); err != nil {
						done <- err
						return
					}
					_ = m.RDP(2)
				}
				done <- nil
			}(w)
		}
		for w := 0; w < 4; w++ {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}
}
