package mechanism

import (
	"math"
	"testing"

	"github.com/dpstage/stage/internal/lib/special"
)

var example = Spec{Kind: Dirichlet, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2, LInf: 1}}

// TestWorkedExample pins 000 §3.3's example (λ = 2, ε = 1, Δ2² = 2, Δ∞ = 1;
// the equation is ψ′(α_m − 1) = 0.5, see shared/papers/README.md).
func TestWorkedExample(t *testing.T) {
	conc := example
	conc.Calibration = Concentrated
	m := mustNew(t, conc)
	// Pinned on amd64. Platforms that fuse multiply-adds (arm64, …) may round
	// the special.Trigamma series differently in the last bit, so allow 2 ulps.
	const pinned = 3.4599529483523073
	a := m.Params().Alpha
	if ulps(a, pinned) > 2 {
		t.Errorf("concentrated alpha = %.17g, pinned %.17g", a, pinned)
	}
	if math.Abs(a-3.46) > 0.005 {
		t.Errorf("concentrated alpha = %g, paper prints 3.46", a)
	}
	// The pin is, to the last bit, the smallest float64 whose ψ′(α − 1)
	// evaluated in 200-bit arithmetic is ≤ 0.5: the exact root rounded up.
	if v := bigTrigamma(pinned - 1); !(v <= 0.5) {
		t.Errorf("psi'(pinned-1) = %.17g > 0.5", v)
	}
	if v := bigTrigamma(math.Nextafter(pinned, 0) - 1); !(v > 0.5) {
		t.Errorf("psi'(prev(pinned)-1) = %.17g <= 0.5: pin is not the smallest", v)
	}
	if r := m.Params().R; r != 1 {
		t.Errorf("concentrated r = %g, want 1", r)
	}
	if got := m.RDP(2); !(got <= 1) || got < 1-1e-15 {
		t.Errorf("concentrated RDP(2) = %.17g, want 1 (≤)", got)
	}

	cf := example
	cf.Calibration = ClosedForm
	m = mustNew(t, cf)
	if a := m.Params().Alpha; a != 4 {
		t.Errorf("closed-form alpha = %.17g, want exactly 4", a)
	}
	if got, want := m.RDP(2), 2*special.Trigamma(3); got != want { // ½·2·2·ψ′(4 − 1)
		t.Errorf("closed-form RDP(2) = %.17g, want 2 psi'(3) = %.17g", got, want)
	}

	df := example
	df.Calibration = Diffuse
	m = mustNew(t, df)
	p := m.Params()
	if ulps(p.R, 1.6555692763540084) > 2 || p.Alpha != 1+4*p.R {
		t.Errorf("diffuse (r, alpha) = (%.17g, %.17g), pinned r = 1.6555692763540084, alpha = 1 + 4r", p.R, p.Alpha)
	}
	if got := m.RDP(2); !(got <= 1) || got < 1-1e-15 {
		t.Errorf("diffuse RDP(2) = %.17g, want 1 (≤)", got)
	}
}

type calCase struct {
	name                  string
	order, eps, l2sq, inf float64
	lower                 float64
}

var calCases = []calCase{
	{"example", 2, 1, 2, 1, 0},
	{"tight", 1.5, 0.1, 2, 1, 0},
	{"high-order", 32, 0.5, 1, 1, 0},
	{"loose", 2, 10, 2, 1, 0},
	{"tiny-alpha", 1.1, 50, 1, 1, 0},
	{"big-sens", 3, 0.01, 50, 5, 0},
	{"order-8", 8, 4, 4, 1, 0},
	{"fractional", 1.01, 3, 0.7, 0.5, 0},
	{"huge-order", 1e4, 1e3, 2, 1, 0},
	{"lower-bound", 2, 1, 2, 1, 3},
	{"lower-bound-2", 5, 2, 2, 1, 0.5},
}

func (c calCase) spec(cal Calibration) Spec {
	s := Spec{Kind: Dirichlet, Calibration: cal, Order: c.order, RDPEpsilon: c.eps, Sensitivity: Sensitivity{L2Sq: c.l2sq, LInf: c.inf}}
	if cal == Diffuse {
		s.LowerBound = c.lower
	}
	return s
}

// TestCalibrationHitsTarget: at the calibration order, RDP ≤ ε exactly and
// (for the root-found calibrations) equal to ε up to rounding; the RDP curve
// is increasing, finite below MaxOrder and +Inf from it on.
func TestCalibrationHitsTarget(t *testing.T) {
	for _, c := range calCases {
		for _, cal := range []Calibration{Concentrated, ClosedForm, Diffuse} {
			if c.lower != 0 && cal != Diffuse {
				continue
			}
			m := mustNew(t, c.spec(cal))
			got := m.RDP(c.order)
			if !(got <= c.eps) {
				t.Errorf("%s/%s: RDP(%g) = %.17g > eps %g", c.name, cal, c.order, got, c.eps)
			}
			if cal != ClosedForm && got < c.eps*(1-1e-12) {
				t.Errorf("%s/%s: RDP(%g) = %.17g, want eps %g up to rounding", c.name, cal, c.order, got, c.eps)
			}
			if cal == ClosedForm && !(got < c.eps) {
				t.Errorf("%s/%s: closed form RDP %.17g not < eps", c.name, cal, got)
			}
			mo := m.MaxOrder()
			if !(mo > c.order) {
				t.Errorf("%s/%s: MaxOrder %g <= order %g", c.name, cal, mo, c.order)
			}
			if v := m.RDP(mo); !math.IsInf(v, 1) {
				t.Errorf("%s/%s: RDP(MaxOrder) = %g, want +Inf", c.name, cal, v)
			}
			if v := m.RDP(mo * 2); !math.IsInf(v, 1) {
				t.Errorf("%s/%s: RDP(2 MaxOrder) = %g, want +Inf", c.name, cal, v)
			}
			prev := 0.0
			for i := 1; i < 200; i++ {
				o := 1 + (mo-1)*float64(i)/200
				v := m.RDP(o)
				if !(v > prev) || math.IsInf(v, 0) || math.IsNaN(v) {
					t.Errorf("%s/%s: RDP(%g) = %g not finite and increasing (prev %g)", c.name, cal, o, v, prev)
					break
				}
				prev = v
			}
			p := m.Params()
			if !(p.Alpha > 0) || !(p.R > 0) || p.Sigma != 0 || p.Scale != 0 {
				t.Errorf("%s/%s: bad params %+v", c.name, cal, p)
			}
			if cal != Diffuse && p.R != 1 {
				t.Errorf("%s/%s: r = %g, want 1", c.name, cal, p.R)
			}
			if cal == Diffuse && math.Abs(p.Alpha-(1+4*(c.order-1)*p.R*c.inf)) > 1e-12*p.Alpha {
				t.Errorf("%s/%s: alpha %g != 1 + 4(λ-1)rΔ∞", c.name, cal, p.Alpha)
			}
		}
	}
}

// TestLemma2Monotone sweeps 001 Lemma 2: r ↦ ½λr²Δ2²ψ′(1 + rb + 3(λ−1)rΔ∞)
// is strictly increasing from 0 to ∞ (b = 0 is Lemma 2 itself, b > 0 its
// Remark 2 variant), and so the diffuse r is increasing in ε.
func TestLemma2Monotone(t *testing.T) {
	step := 0.05
	if *long {
		step = 0.005
	}
	for _, lambda := range []float64{1.001, 1.1, 2, 5, 32, 1024} {
		for _, l2sq := range []float64{0.5, 2, 100} {
			for _, linf := range []float64{0.25, 1, 10} {
				for _, b := range []float64{0, 0.5, 20} {
					phi := func(r float64) float64 {
						return 0.5 * lambda * r * r * l2sq * special.Trigamma(1+r*b+3*(lambda-1)*r*linf)
					}
					prev := 0.0
					for e := -8.0; e <= 8; e += step {
						v := phi(math.Pow(10, e))
						if !(v > prev) {
							t.Fatalf("λ=%g Δ2²=%g Δ∞=%g b=%g: phi(1e%g) = %g not > %g", lambda, l2sq, linf, b, e, v, prev)
						}
						prev = v
					}
					if v := phi(1e-8); v > 1e-12*lambda*l2sq {
						t.Errorf("phi(1e-8) = %g, want → 0", v)
					}
					if v := phi(1e8); v < 1e3 {
						t.Errorf("phi(1e8) = %g, want → ∞", v)
					}
				}
			}
		}
	}
	prevR := 0.0
	for e := -4.0; e <= 3; e += 0.25 {
		m := mustNew(t, Spec{Kind: Dirichlet, Calibration: Diffuse, Order: 3, RDPEpsilon: math.Pow(10, e), Sensitivity: Sensitivity{L2Sq: 2, LInf: 1}})
		r := m.Params().R
		if !(r > prevR) {
			t.Errorf("diffuse r(eps=1e%g) = %g not > %g", e, r, prevR)
		}
		prevR = r
	}
}

// TestLowerBoundHelps: with a known lower bound b (001 Remark 2) the diffuse
// r is larger than without (Remark 2's claim), and Release raises counts
// below b to b.
func TestLowerBoundHelps(t *testing.T) {
	base := Spec{Kind: Dirichlet, Calibration: Diffuse, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2, LInf: 1}}
	withB := base
	withB.LowerBound = 3
	r0, r1 := mustNew(t, base).Params().R, mustNew(t, withB).Params().R
	if !(r1 > r0) {
		t.Errorf("r with b=3 is %g, without %g: want larger", r1, r0)
	}
	m := mustNew(t, withB).(*dirichletMech)
	if got, want := m.RDP(2), dirichletRDP(2, m.alpha+m.r*3, m.r, 2, 1); got != want {
		t.Errorf("RDP uses alpha_eff: got %g want %g", got, want)
	}
}

// TestDirichletRenyiAgainstQuadrature checks eq. (19) for d = 2 (Beta
// distributions) against direct numerical integration of
// ∫ p^λ q^{1−λ} dy with composite Simpson on a fine grid.
func TestDirichletRenyiAgainstQuadrature(t *testing.T) {
	cases := []struct {
		order     float64
		u, uPrime []float64
	}{
		{2, []float64{3, 4}, []float64{4, 3}},
		{1.5, []float64{2.5, 7}, []float64{3.5, 7}},
		{3, []float64{5, 5}, []float64{5, 6}},
		{10, []float64{12, 30}, []float64{13, 29}},
		{1.01, []float64{2, 2}, []float64{3, 2}},
	}
	for _, c := range cases {
		got, err := DirichletRenyi(c.order, c.u, c.uPrime)
		if err != nil {
			t.Fatal(err)
		}
		lb := func(a, b float64) float64 { return special.Lgamma(a) + special.Lgamma(b) - special.Lgamma(a+b) }
		logp := func(y float64, a, b float64) float64 {
			return (a-1)*math.Log(y) + (b-1)*math.Log(1-y) - lb(a, b)
		}
		const n = 20000
		h := 1.0 / n
		sum := 0.0
		for i := 1; i < n; i++ {
			y := float64(i) * h
			w := 2.0
			if i%2 == 1 {
				w = 4
			}
			sum += w * math.Exp(c.order*logp(y, c.u[0], c.u[1])+(1-c.order)*logp(y, c.uPrime[0], c.uPrime[1]))
		}
		want := math.Log(sum*h/3) / (c.order - 1)
		if math.Abs(got-want) > 1e-7*math.Max(1, want) {
			t.Errorf("D_%g(%v||%v) = %.12g, quadrature %.12g", c.order, c.u, c.uPrime, got, want)
		}
	}
}

func TestDirichletRenyiSpecialValues(t *testing.T) {
	u := []float64{1, 2, 3}
	if d, err := DirichletRenyi(2, u, u); err != nil || d != 0 {
		t.Errorf("D(u||u) = %g, %v; want 0", d, err)
	}
	// w_1 = 1 + (λ−1)(1 − 2) ≤ 0 at λ ≥ 2: +Inf, no error.
	for _, o := range []float64{2, 2.5, 100} {
		if d, err := DirichletRenyi(o, []float64{1, 2}, []float64{2, 1}); err != nil || !math.IsInf(d, 1) {
			t.Errorf("D_%g = %g, %v; want +Inf", o, d, err)
		}
	}
	if d, err := DirichletRenyi(1.99, []float64{1, 2}, []float64{2, 1}); err != nil || math.IsInf(d, 0) || !(d > 0) {
		t.Errorf("D_1.99 = %g, %v; want finite > 0", d, err)
	}
	// Invariance to the order of coordinates; large unchanged coordinates do
	// not disturb the result.
	a, _ := DirichletRenyi(3, []float64{4, 5, 6}, []float64{5, 5, 5})
	b, _ := DirichletRenyi(3, []float64{6, 4, 5}, []float64{5, 5, 5})
	if math.Abs(a-b) > 1e-13 {
		t.Errorf("permutation changed D: %g vs %g", a, b)
	}
}

// ulps returns the distance between two finite positive float64s in units in
// the last place.
func ulps(a, b float64) uint64 {
	x, y := math.Float64bits(a), math.Float64bits(b)
	if x > y {
		return x - y
	}
	return y - x
}
