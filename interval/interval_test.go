package interval

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestNormalLaplaceSurvival compares the closed form with a direct
// integration of P(X + Y > c) = ∫ f_Laplace(x)·Φ̄((c − x)/σ) dx (Simpson,
// 200,000 panels over ±60 scales), across the regimes of erfcx's branches.
func TestNormalLaplaceSurvival(t *testing.T) {
	for _, c := range []struct{ c, beta, sigma float64 }{
		{0, 1, 1}, {1, 1, 1}, {3, 0.7, 0.2}, {3, 0.2, 0.7}, {5, 0.05, 1}, {5, 1, 0.05},
		{2, 0.5, 3}, {10, 0.3, 2}, {0.5, 2, 0.01}, {1.96, 0.7071, 1e-9}, {1.96, 1e-9, 1},
	} {
		got := normalLaplaceSurvival(c.c, c.beta, c.sigma)
		lim := 60 * math.Max(c.beta, c.sigma)
		f := func(x float64) float64 {
			if c.beta < 1e-6 { // the normal alone
				return 0
			}
			return math.Exp(-math.Abs(x)/c.beta) / (2 * c.beta) * math.Erfc((c.c-x)/(c.sigma*math.Sqrt2)) / 2
		}
		want := simpson(f, -lim, lim, 200000)
		switch {
		case c.beta < 1e-6:
			want = math.Erfc(c.c/(c.sigma*math.Sqrt2)) / 2
		case c.sigma < 1e-6: // the Laplace alone (too sharp to integrate)
			want = math.Exp(-c.c/c.beta) / 2
		}
		if math.Abs(got-want) > 1e-7*math.Max(want, 1e-3) && math.Abs(got-want) > 1e-12 {
			t.Errorf("S(%g; β=%g, σ=%g) = %.12g, integration %.12g", c.c, c.beta, c.sigma, got, want)
		}
	}
}

func simpson(f func(float64) float64, a, b float64, n int) float64 {
	h := (b - a) / float64(n)
	s := f(a) + f(b)
	for i := 1; i < n; i++ {
		w := 2.0
		if i%2 == 1 {
			w = 4
		}
		s += w * f(a+float64(i)*h)
	}
	return s * h / 3
}

// TestLaplaceKappa: κ at w = 1 is the Laplace quantile; the table's
// interpolation is within 10⁻⁴ of κ computed at the point; and a Monte
// Carlo estimate of P(|W_w| > κ(w)) (10⁶ draws, standard error 2.2·10⁻⁴
// at a 5% tail) is within 6 standard errors of 1 − level — a false
// failure with probability below 10⁻⁸ per case.
func TestLaplaceKappa(t *testing.T) {
	const level = 0.95
	for _, n := range []int{1, 4, 30} {
		tab := kappaTable(n, level)
		if got, want := tab.at(1), math.Log(20)/math.Sqrt2; math.Abs(got-want) > 1e-12 {
			t.Errorf("n=%d: κ(1) = %v, want the Laplace quantile %v", n, got, want)
		}
		nodes := gammaNodes(n)
		for _, w := range []float64{0.013, 0.31, 0.5, 0.77, 0.99} {
			direct := laplaceKappa(w, nodes, 1-level)
			if math.Abs(tab.at(w)-direct) > 1e-4 {
				t.Errorf("n=%d w=%g: table %v, direct %v", n, w, tab.at(w), direct)
			}
		}
		rng := rand.New(rand.NewPCG(uint64(n), 7))
		lap := func() float64 { // unit variance
			e := rng.ExpFloat64()
			if rng.IntN(2) == 0 {
				e = -e
			}
			return e / math.Sqrt2
		}
		for _, w := range []float64{0, 0.3, 0.8} {
			k := tab.at(w)
			const draws = 1_000_000
			out := 0
			for range draws {
				s := 0.0
				for range n {
					s += lap()
				}
				x := math.Sqrt(w)*lap() + math.Sqrt((1-w)/float64(n))*s
				if math.Abs(x) > k {
					out++
				}
			}
			p := float64(out) / draws
			se := math.Sqrt(0.05 * 0.95 / draws)
			if math.Abs(p-0.05) > 6*se {
				t.Errorf("n=%d w=%g: P(|W| > κ=%.5f) = %.5f by Monte Carlo, want 0.05 ± %.5f", n, w, k, p, 6*se)
			}
		}
	}
}

// TestQuadSet compares quadSet with a fine scan of [0, 1] on random
// quadratics.
func TestQuadSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		a2, a1, a0 := rng.NormFloat64(), rng.NormFloat64(), rng.NormFloat64()*0.3
		if rng.IntN(10) == 0 {
			a2 = 0
		}
		lo, hi, ok := quadSet(a2, a1, a0)
		sLo, sHi, sOk := 2.0, -1.0, false
		const steps = 4000
		for i := 0; i <= steps; i++ {
			s := float64(i) / steps
			if a2*s*s+a1*s+a0 <= 0 {
				sOk = true
				sLo, sHi = math.Min(sLo, s), math.Max(sHi, s)
			}
		}
		if ok != sOk && (sOk || !ok) {
			// a set thinner than the scan's step is fine to miss
			if sOk {
				t.Fatalf("quadSet(%g, %g, %g) = empty, scan finds [%g, %g]", a2, a1, a0, sLo, sHi)
			}
			continue
		}
		if ok && sOk && (math.Abs(lo-sLo) > 1.0/steps || math.Abs(hi-sHi) > 1.0/steps) {
			t.Fatalf("quadSet(%g, %g, %g) = [%g, %g], scan [%g, %g]", a2, a1, a0, lo, hi, sLo, sHi)
		}
	}
}

// TestCountCoverage computes, by summing the discrete Gaussian's mass,
// the exact probability that Count's interval holds the true count, for
// σ from 0.3 to 3000 and three levels: never below the level, and the
// half-width the smallest that reaches it.
func TestCountCoverage(t *testing.T) {
	for _, level := range []float64{0.8, 0.95, 0.99} {
		for _, sigma := range []float64{0.3, 0.7, 1, 1.5, 3, 10, 33.3, 300, 999, 3000} {
			// P[Z = z] ∝ exp(−z²/(2σ²)); the interval of n + Z holds n iff
			// |Z| ≤ h, its half-width (whole, the same for every Z).
			tot, err := Count(1e6, sigma, level, math.Inf(1))
			if err != nil {
				t.Fatal(err)
			}
			h := tot.High - 1e6
			if tot.Low != 1e6-h {
				t.Fatalf("σ=%g: interval %+v not symmetric", sigma, tot)
			}
			var in, all float64
			for z := -int(40*sigma) - 5; z <= int(40*sigma)+5; z++ {
				p := math.Exp(-float64(z*z) / (2 * sigma * sigma))
				all += p
				if math.Abs(float64(z)) <= h {
					in += p
				}
			}
			// and h is the smallest such (summed, σ ≤ 1000), or one more
			// (the continuity-corrected quantile, σ > 1000): h − 1 (h − 2)
			// would not do.
			g, ing := h, in
			if sigma > 1000 {
				ing -= 2 * math.Exp(-h*h/(2*sigma*sigma))
				g--
			}
			if g > 0 {
				if less := ing - 2*math.Exp(-g*g/(2*sigma*sigma)); less >= level*all {
					t.Errorf("σ=%g level=%g: half-width %v is not the smallest", sigma, level, h)
				}
			}
			if cov := in / all; cov < level {
				t.Errorf("σ=%g level=%g: coverage %.5f", sigma, level, cov)
			}
		}
	}
	if tot, _ := Count(-7, 2, 0.95, math.Inf(1)); tot != (Total{0, 0, 0}) {
		t.Errorf("Count(−7, σ=2) = %+v, want all 0 (clamped)", tot)
	}
	if tot, _ := Count(105, 2, 0.95, 100); tot != (Total{100, 100, 100}) {
		t.Errorf("Count(105, σ=2, max 100) = %+v, want clamped to 100", tot)
	}
}

// TestNuisanceQuadrature: the Dirichlet interval with the 10-node
// Gauss–Hermite rule against a 400-node midpoint rule, where the total's
// uncertainty matters (N a few times d·α): ends within 2% of the width.
func TestNuisanceQuadrature(t *testing.T) {
	fine := make([]node, 400)
	for k := range fine {
		fine[k] = node{z: normalQuantile((float64(k) + 0.5) / 400), w: 1.0 / 400}
	}
	for _, c := range []struct{ y, r, alpha, nt, sigma float64 }{
		{0.41, 1, 20, 300, 14}, {0.05, 1, 20, 150, 14}, {0.3, 0.5, 3, 40, 14}, {0.2, 1, 45, 50, 30}, {0.7, 2, 10, 1000, 50},
	} {
		y := []float64{c.y, 1 - c.y}
		lo, hi := make([]float64, 2), make([]float64, 2)
		if err := Dirichlet(y, 10000, c.r, c.alpha, c.nt, c.sigma, 0.95, lo, hi); err != nil {
			t.Fatal(err)
		}
		saved := normalNodes
		normalNodes = fine
		flo, fhi := make([]float64, 2), make([]float64, 2)
		err := Dirichlet(y, 10000, c.r, c.alpha, c.nt, c.sigma, 0.95, flo, fhi)
		normalNodes = saved
		if err != nil {
			t.Fatal(err)
		}
		w := fhi[0] - flo[0]
		if math.Abs(lo[0]-flo[0]) > 0.02*w || math.Abs(hi[0]-fhi[0]) > 0.02*w {
			t.Errorf("%+v: 10 nodes [%.5f, %.5f], 400 nodes [%.5f, %.5f]", c, lo[0], hi[0], flo[0], fhi[0])
		}
	}
}

// TestArguments: bad levels, noise parameters and vectors are refused
// with ErrInvalid.
func TestArguments(t *testing.T) {
	two := make([]float64, 2)
	for name, err := range map[string]error{
		"level NaN": CheckLevel(math.NaN()),
		"level 0.4": CheckLevel(0.4),
		"level 1":   CheckLevel(1),
		"sigma 0":   func() error { _, err := Additive([]float64{1, 2}, Noise{Sigma: 0}, 0.95, two, two); return err }(),
		"laplace b Inf": func() error {
			_, err := Additive([]float64{1, 2}, Noise{Laplace: true, Scale: math.Inf(1)}, 0.95, two, two)
			return err
		}(),
		"one bin": func() error { _, err := Additive([]float64{1}, Noise{Sigma: 1}, 0.95, two[:1], two[:1]); return err }(),
		"noisy NaN": func() error {
			_, err := Additive([]float64{1, math.NaN()}, Noise{Sigma: 1}, 0.95, two, two)
			return err
		}(),
		"y > 1":            Dirichlet([]float64{1.5, 0}, 0, 1, 1, 10, 1, 0.95, two, two),
		"alpha 0":          Dirichlet([]float64{0.5, 0.5}, 0, 1, 0, 10, 1, 0.95, two, two),
		"total sigma 0":    Dirichlet([]float64{0.5, 0.5}, 0, 1, 1, 10, 0, 0.95, two, two),
		"average eta·d≥1":  Average([]float64{0.5, 0.5}, 0, 10, 0.5, 10, 5, 1, 0.95, two, two),
		"average users 0":  Average([]float64{0.5, 0.5}, 0, 10, 0.1, 0, 5, 1, 0.95, two, two),
		"count noisy +Inf": func() error { _, err := Count(math.Inf(1), 1, 0.95, 10); return err }(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if err := CheckLevel(DefaultLevel); err != nil {
		t.Error(err)
	}
}

// TestEmptyWindow: a Dirichlet release whose total is surely 0 gets
// [0, 1] for every bin (the shares of an empty window are undefined and
// the release carries no information on them).
func TestEmptyWindow(t *testing.T) {
	lo, hi := make([]float64, 3), make([]float64, 3)
	if err := Dirichlet([]float64{0.2, 0.3, 0.5}, 10000, 1, 5, -100, 2, 0.95, lo, hi); err != nil {
		t.Fatal(err)
	}
	for i := range lo {
		if lo[i] != 0 || hi[i] != 1 {
			t.Errorf("bin %d: [%v, %v], want [0, 1]", i, lo[i], hi[i])
		}
	}
}

// TestAdditiveTotalCoverage computes the exact coverage of an additive
// release's total interval: the law of Σ_j Z_j by convolving the discrete
// Gaussian's or discrete Laplace's mass d times, at scales from 0.3 to 30.
func TestAdditiveTotalCoverage(t *testing.T) {
	for _, lap := range []bool{false, true} {
		for _, p := range []float64{0.3, 1, 3, 10, 30} {
			for _, d := range []int{2, 5, 20} {
				nz := Noise{Laplace: lap, Sigma: p, Scale: p}
				top := int(60*p) + 3
				one := make([]float64, 2*top+1)
				for z := -top; z <= top; z++ {
					if lap {
						one[z+top] = math.Exp(-math.Abs(float64(z)) / p)
					} else {
						one[z+top] = math.Exp(-float64(z*z) / (2 * p * p))
					}
				}
				normalize(one)
				sum := []float64{1}
				for range d {
					sum = convolve(sum, one)
				}
				mid := (len(sum) - 1) / 2
				noisy := make([]float64, d) // all 0: t = 0, and t − N = Σ Z
				lo, hi := make([]float64, d), make([]float64, d)
				for _, level := range []float64{0.8, 0.95, 0.99} {
					tot, err := Additive(noisy, nz, level, lo, hi)
					if err != nil {
						t.Fatal(err)
					}
					h := int(tot.High)
					cov := 0.0
					for k := -h; k <= h; k++ {
						if mid+k >= 0 && mid+k < len(sum) {
							cov += sum[mid+k]
						}
					}
					if cov < level-2e-3 {
						t.Errorf("laplace=%v scale=%g d=%d level=%g: total coverage %.5f (half-width %d)", lap, p, d, level, cov, h)
					}
				}
			}
		}
	}
}

func normalize(p []float64) {
	s := 0.0
	for _, v := range p {
		s += v
	}
	for i := range p {
		p[i] /= s
	}
}

func convolve(a, b []float64) []float64 {
	out := make([]float64, len(a)+len(b)-1)
	for i, x := range a {
		if x < 1e-300 {
			continue
		}
		for j, y := range b {
			out[i+j] += x * y
		}
	}
	return out
}
