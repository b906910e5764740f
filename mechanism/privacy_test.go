package mechanism

import (
	"math"
	"math/rand/v2"
	"testing"
)

// neighbour returns a random neighbour x′ of x for sensitivities (Δ2², Δ∞),
// keeping every count ≥ b. Kinds of change, chosen at random:
//   - replace: move a ≤ min(Δ∞, √(Δ2²/2)) of mass from one bin to another;
//   - add/remove: a random change vector with ‖Δ‖∞ ≤ Δ∞ and ‖Δ‖₂² ≤ Δ2², of
//     one sign or mixed, on a random subset of bins;
//   - worst case: bins at the lower bound b gaining a full Δ∞ each.
func neighbour(rng *rand.Rand, x []float64, l2sq, linf, b float64, integer bool) []float64 {
	d := len(x)
	xp := append([]float64(nil), x...)
	q := func(v float64) float64 {
		if integer {
			return math.Floor(v)
		}
		return v
	}
	switch rng.IntN(3) {
	case 0: // replace
		i, j := rng.IntN(d), rng.IntN(d-1)
		if j >= i {
			j++
		}
		a := q(math.Min(linf, math.Sqrt(l2sq/2)) * (1 - rng.Float64()*rng.Float64()))
		a = math.Min(a, x[i]-b)
		if a > 0 {
			xp[i] -= a
			xp[j] += a
		}
	case 1: // general add/remove
		delta := make([]float64, d)
		ss := 0.0
		sign := float64(1 - 2*rng.IntN(2))
		mixed := rng.IntN(2) == 0
		for i := range delta {
			if rng.IntN(2) == 0 {
				continue
			}
			v := linf * (1 - rng.Float64()*rng.Float64())
			s := sign
			if mixed {
				s = float64(1 - 2*rng.IntN(2))
			}
			delta[i] = s * v
			ss += v * v
		}
		scale := 1.0
		if ss > l2sq {
			scale = math.Sqrt(l2sq / ss)
		}
		for i := range delta {
			v := q(math.Abs(delta[i]*scale)) * math.Copysign(1, delta[i])
			if x[i]+v < b {
				v = b - x[i]
			}
			xp[i] = x[i] + v
		}
	default: // worst case: bins at b gain Δ∞ each, as many as Δ2² allows
		k := int(math.Floor(l2sq / (linf * linf)))
		a := linf
		if k == 0 {
			k, a = 1, math.Sqrt(l2sq)
		}
		a = q(a)
		for _, i := range rng.Perm(d)[:min(k, d)] {
			xp[i] = b + a
		}
		for i := range xp { // and x has b there
			if xp[i] != x[i] {
				x[i] = b
			}
		}
	}
	return xp
}

// randomCounts returns d counts ≥ b: many at b, some small, some large.
func randomCounts(rng *rand.Rand, d int, b float64, integer bool) []float64 {
	x := make([]float64, d)
	for i := range x {
		switch rng.IntN(4) {
		case 0:
			x[i] = b
		case 1:
			x[i] = b + 3*rng.Float64()
		case 2:
			x[i] = b + 100*rng.Float64()
		default:
			x[i] = b + 1e4*rng.Float64()
		}
		if integer {
			x[i] = math.Ceil(x[i])
		}
	}
	return x
}

func shapes(x []float64, r, alpha float64) []float64 {
	u := make([]float64, len(x))
	for i, v := range x {
		u[i] = r*v + alpha
	}
	return u
}

// otherOrders returns orders in (1, MaxOrder) to check the whole curve.
func otherOrders(m Mechanism) []float64 {
	mo := m.MaxOrder()
	if math.IsInf(mo, 1) {
		mo = 64
	}
	var out []float64
	for _, f := range []float64{0.001, 0.05, 0.2, 0.5, 0.8, 0.95, 0.999} {
		out = append(out, 1+(mo-1)*f)
	}
	return append(out, m.Spec().Order)
}

// TestPropertyNeighbours: for random neighbouring count vectors the exact
// divergence of 000 eq. (19) never exceeds the calibrated ε at the
// calibration order, nor RDP(λ′) at other orders, in both directions, for
// all three calibrations (and the lower-bound variant).
func TestPropertyNeighbours(t *testing.T) {
	n := trials(1500)
	for ci, c := range calCases {
		for _, cal := range []Calibration{Concentrated, ClosedForm, Diffuse} {
			if c.lower != 0 && cal != Diffuse {
				continue
			}
			m := mustNew(t, c.spec(cal))
			p := m.Params()
			b := 0.0
			if cal == Diffuse {
				b = c.lower
			}
			rng := rand.New(rand.NewPCG(uint64(ci), 17))
			orders := otherOrders(m)
			worst := 0.0
			for trial := 0; trial < n; trial++ {
				d := 2 + rng.IntN(9)
				integer := rng.IntN(2) == 0
				x := randomCounts(rng, d, b, integer)
				xp := neighbour(rng, x, c.l2sq, c.inf, b, integer)
				u, up := shapes(x, p.R, p.Alpha), shapes(xp, p.R, p.Alpha)
				for _, o := range orders {
					bound := m.RDP(o)
					for dir := 0; dir < 2; dir++ {
						a, bb := u, up
						if dir == 1 {
							a, bb = up, u
						}
						got, err := DirichletRenyi(o, a, bb)
						if err != nil {
							t.Fatal(err)
						}
						if !(got <= bound) {
							t.Fatalf("%s/%s: D_%g(Dir(%v)||Dir(%v)) = %.17g > RDP %.17g", c.name, cal, o, a, bb, got, bound)
						}
						if o == c.order {
							if !(got <= c.eps) {
								t.Fatalf("%s/%s: D_%g = %.17g > eps %g", c.name, cal, o, got, c.eps)
							}
							worst = math.Max(worst, got/c.eps)
						}
					}
				}
			}
			t.Logf("%s/%s: worst exact D_λ / ε over %d neighbours = %.4f", c.name, cal, n, worst)
		}
	}
}

// TestGroupSplitDirichlet: one user's changes spread over G groups' count
// vectors (each released by its own draw) with Σ_g ‖Δ_g‖₂² ≤ Δ2² and every
// ‖Δ_g‖∞ ≤ Δ∞: the SUM of the exact divergences is ≤ RDP(λ′) at the total
// sensitivity, since the bound of 000 Theorem 2 is ½λ Σ_i (x_i − x′_i)² ψ′(…)
// with a ψ′ factor that only depends on Δ∞.
func TestGroupSplitDirichlet(t *testing.T) {
	n := trials(800)
	for ci, c := range calCases {
		for _, cal := range []Calibration{Concentrated, ClosedForm, Diffuse} {
			if c.lower != 0 && cal != Diffuse {
				continue
			}
			m := mustNew(t, c.spec(cal))
			p := m.Params()
			b := 0.0
			if cal == Diffuse {
				b = c.lower
			}
			rng := rand.New(rand.NewPCG(uint64(ci), 99))
			for trial := 0; trial < n; trial++ {
				groups := 2 + rng.IntN(5)
				// Split the squared budget at random between groups.
				w := make([]float64, groups)
				tot := 0.0
				for g := range w {
					w[g] = rng.Float64()
					tot += w[g]
				}
				for _, o := range otherOrders(m) {
					sum := 0.0
					for g := 0; g < groups; g++ {
						x := randomCounts(rng, 2+rng.IntN(6), b, false)
						xp := neighbour(rng, x, c.l2sq*w[g]/tot, c.inf, b, false)
						dv, err := DirichletRenyi(o, shapes(x, p.R, p.Alpha), shapes(xp, p.R, p.Alpha))
						if err != nil {
							t.Fatal(err)
						}
						sum += dv
					}
					if bound := m.RDP(o); !(sum <= bound) {
						t.Fatalf("%s/%s: %d groups at order %g: sum of divergences %.17g > RDP %.17g", c.name, cal, groups, o, sum, bound)
					}
				}
			}
		}
	}
}

// discreteGaussianRenyi computes D_λ(N_Z(0,σ²) ‖ N_Z(Δ,σ²)) for an integer
// shift Δ by direct summation (log-sum-exp over a wide window). Both pmfs
// share the normalizer, so D = log Σ_k exp(−(λk² + (1−λ)(k−Δ)²)/(2σ²))/(λ−1)
// − log Σ_k exp(−k²/(2σ²))/(λ−1).
func discreteGaussianRenyi(lambda, sigma2 float64, delta int) float64 {
	s := math.Sqrt(sigma2)
	lo := int(-40*s-40*lambda*float64(delta)) - 10
	hi := int(40*s+40*lambda*float64(delta)) + 10
	var num, den []float64
	for k := lo; k <= hi; k++ {
		fk, fd := float64(k), float64(k-delta)
		num = append(num, -(lambda*fk*fk+(1-lambda)*fd*fd)/(2*sigma2))
		den = append(den, -fk*fk/(2*sigma2))
	}
	return (logSumExp(num) - logSumExp(den)) / (lambda - 1)
}

// TestDiscreteGaussianRenyi numerically verifies the bound the Gaussian
// mechanism reports (CKS20): D_λ(N_Z(0,σ²) ‖ N_Z(Δ,σ²)) ≤ λΔ²/(2σ²).
func TestDiscreteGaussianRenyi(t *testing.T) {
	for _, sigma := range []float64{0.05, 0.3, 0.7, 1, 2.5, 10} {
		for _, lambda := range []float64{1.01, 1.5, 2, 5, 30} {
			for _, delta := range []int{1, 2, 3, 7} {
				got := discreteGaussianRenyi(lambda, sigma*sigma, delta)
				bound := lambda * float64(delta*delta) / (2 * sigma * sigma)
				if !(got <= bound*(1+1e-12)) {
					t.Errorf("σ=%g λ=%g Δ=%d: D = %.15g > %.15g", sigma, lambda, delta, got, bound)
				}
			}
		}
	}
}

// TestGroupSplitGaussian: divergences of independent coordinates add, so the
// sum over groups of exact per-coordinate divergences is ≤ RDP when the
// total ‖Δ‖₂² ≤ Δ2².
func TestGroupSplitGaussian(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, l2sq := range []float64{1, 2, 6, 25} {
		m := mustNew(t, Spec{Kind: Gaussian, Order: 3, RDPEpsilon: 0.7, Sensitivity: Sensitivity{L2Sq: l2sq}})
		s2 := math.Pow(m.Params().Sigma, 2)
		for trial := 0; trial < trials(200); trial++ {
			// Integer changes with Σ Δ² ≤ l2sq, spread over groups/coordinates.
			budget := int(l2sq)
			var deltas []int
			for budget > 0 {
				v := 1 + rng.IntN(int(math.Sqrt(float64(budget))))
				deltas = append(deltas, v)
				budget -= v * v
			}
			for _, o := range []float64{1.5, 3, 10} {
				sum := 0.0
				for _, v := range deltas {
					sum += discreteGaussianRenyi(o, s2, v)
				}
				if bound := m.RDP(o); !(sum <= bound*(1+1e-12)) {
					t.Fatalf("Δ2²=%g changes %v order %g: sum %.15g > RDP %.15g", l2sq, deltas, o, sum, bound)
				}
			}
		}
	}
}

// discreteLaplaceRenyiSum computes D_λ(Lap_Z(b) ‖ Δ + Lap_Z(b)) by direct
// summation of p(k)^λ p(k−Δ)^{1−λ}.
func discreteLaplaceRenyiSum(lambda float64, delta int, b float64) float64 {
	lo := -int(60*b*lambda) - 60 - delta
	hi := int(60*b*lambda) + 60 + delta
	var num, den []float64
	for k := lo; k <= hi; k++ {
		ak, ad := math.Abs(float64(k)), math.Abs(float64(k-delta))
		num = append(num, -(lambda*ak+(1-lambda)*ad)/b)
		den = append(den, -ak/b)
	}
	return (logSumExp(num) - logSumExp(den)) / (lambda - 1)
}

// TestDiscreteLaplaceRDPExact checks the closed form of discreteLaplaceRDP
// against direct summation.
func TestDiscreteLaplaceRDPExact(t *testing.T) {
	for _, b := range []float64{0.2, 0.5, 1, 1.7, 4, 20} {
		for _, lambda := range []float64{1.01, 1.5, 2, 3.3, 10, 100} {
			for _, delta := range []int{0, 1, 2, 3, 6} {
				got := discreteLaplaceRDP(lambda, float64(delta), b)
				want := discreteLaplaceRenyiSum(lambda, delta, b)
				if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
					t.Errorf("b=%g λ=%g Δ=%d: closed form %.15g, sum %.15g", b, lambda, delta, got, want)
				}
			}
		}
	}
}

// TestDiscreteLaplaceRDPNearOne: as λ → 1 the closed form must approach the
// KL divergence Σ_k p(k)·(|k−Δ| − |k|)/b (computed by summation) without
// cancellation: at λ = 1 + 1e-9 the two agree to 1e-6 relative.
func TestDiscreteLaplaceRDPNearOne(t *testing.T) {
	for _, b := range []float64{0.3, 1, 10, 1000} {
		for _, delta := range []int{1, 3} {
			w := int(80*b) + 80
			var z, kl float64
			for k := -w; k <= w+delta; k++ {
				p := math.Exp(-math.Abs(float64(k)) / b)
				z += p
				kl += p * (math.Abs(float64(k-delta)) - math.Abs(float64(k))) / b
			}
			kl /= z
			got := discreteLaplaceRDP(1+1e-9, float64(delta), b)
			if math.Abs(got-kl) > 1e-6*kl {
				t.Errorf("b=%g Δ=%d: D_(1+1e-9) = %.12g, KL = %.12g", b, delta, got, kl)
			}
		}
	}
}

// TestDiscreteLaplaceVersusMironov documents why the mechanism does not use
// Mironov 2017's continuous-Laplace RDP for the discrete noise it samples:
// on this whole grid the discrete Laplace's exact divergence is larger.
func TestDiscreteLaplaceVersusMironov(t *testing.T) {
	mironov := func(lambda, b float64) float64 { // sensitivity 1
		return math.Log(lambda/(2*lambda-1)*math.Exp((lambda-1)/b)+(lambda-1)/(2*lambda-1)*math.Exp(-lambda/b)) / (lambda - 1)
	}
	for _, b := range []float64{0.1, 0.5, 1, 3, 10, 100, 1000} {
		for _, lambda := range []float64{1.1, 2, 5, 50} {
			d, c := discreteLaplaceRDP(lambda, 1, b), mironov(lambda, b)
			if !(d > c) {
				t.Errorf("b=%g λ=%g: discrete %.15g <= continuous %.15g", b, lambda, d, c)
			}
		}
	}
}

// TestLaplaceConvexity verifies numerically what the doc of
// discreteLaplaceRDP proves: the per-coordinate loss is convex in Δ (second
// differences ≥ 0 on a fine real grid) and increasing on the integers.
func TestLaplaceConvexity(t *testing.T) {
	for _, b := range []float64{0.3, 1, 5, 50} {
		for _, lambda := range []float64{1.05, 2, 8, 64} {
			f := func(x float64) float64 { return discreteLaplaceRDP(lambda, x, b) }
			h := 0.01
			for x := h; x < 20; x += h {
				if dd := f(x+h) - 2*f(x) + f(x-h); dd < -1e-12*math.Max(1, f(x)) {
					t.Fatalf("b=%g λ=%g: second difference at %g = %g < 0", b, lambda, x, dd)
				}
			}
			for k := 0.0; k < 20; k++ {
				if !(f(k+1) > f(k)) {
					t.Fatalf("b=%g λ=%g: f(%g) = %g not > f(%g) = %g", b, lambda, k+1, f(k+1), k, f(k))
				}
			}
		}
	}
}

// TestLaplaceWorstCase checks laplaceVectorRDP's closed-form maximum
// (⌊D1/D∞⌋ coordinates at D∞, the remainder in one more) by enumerating all
// integer change vectors |Δ_i| ≤ D∞, Σ|Δ_i| ≤ D1 in d = 5 coordinates (when
// the worst vector needs more than 5 bins the formula must still be ≥).
func TestLaplaceWorstCase(t *testing.T) {
	const d = 5
	for _, b := range []float64{0.4, 2} {
		for _, lambda := range []float64{1.5, 4} {
			for d1 := 1; d1 <= 7; d1++ {
				for dinf := 1; dinf <= d1; dinf++ {
					best := 0.0
					var rec func(i, left int, acc float64)
					rec = func(i, left int, acc float64) {
						if i == d {
							best = math.Max(best, acc)
							return
						}
						for v := 0; v <= min(dinf, left); v++ {
							rec(i+1, left-v, acc+discreteLaplaceRDP(lambda, float64(v), b))
						}
					}
					rec(0, d1, 0)
					got := laplaceVectorRDP(lambda, float64(d1), float64(dinf), b)
					if (d1+dinf-1)/dinf > d { // worst vector needs more bins: formula is an upper bound
						if !(got >= best) {
							t.Errorf("b=%g λ=%g D1=%d D∞=%d: formula %.15g < enumeration %.15g", b, lambda, d1, dinf, got, best)
						}
						continue
					}
					if math.Abs(got-best) > 1e-12*best {
						t.Errorf("b=%g λ=%g D1=%d D∞=%d: formula %.15g, enumeration %.15g", b, lambda, d1, dinf, got, best)
					}
				}
			}
		}
	}
}

// TestGroupSplitLaplace: changes spread over several groups' vectors with
// total Σ|Δ| ≤ Δ1 and every |Δ_i| ≤ Δ∞: the sum of the exact per-coordinate
// divergences (direct summation) is ≤ RDP(λ′).
func TestGroupSplitLaplace(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, s := range []Sensitivity{{L1: 1, LInf: 1}, {L1: 2, LInf: 1}, {L1: 5, LInf: 2}, {L1: 9, LInf: 4}, {L1: 3.7, LInf: 2.2}} {
		m := mustNew(t, Spec{Kind: Laplace, Order: 2, RDPEpsilon: 1.3, Sensitivity: s})
		b := m.Params().Scale
		for trial := 0; trial < trials(100); trial++ {
			left := int(s.L1)
			var deltas []int
			for left > 0 {
				v := 1 + rng.IntN(min(left, int(s.LInf)))
				deltas = append(deltas, v)
				left -= v
			}
			for _, o := range []float64{1.2, 2, 6} {
				sum := 0.0
				for _, v := range deltas {
					sum += discreteLaplaceRenyiSum(o, v, b)
				}
				if bound := m.RDP(o); !(sum <= bound*(1+1e-9)) {
					t.Fatalf("%+v changes %v order %g: sum %.15g > RDP %.15g", s, deltas, o, sum, bound)
				}
			}
		}
	}
}

// TestLaplaceScaleMonotone: the vector loss is decreasing in the scale b
// (so the calibrated scale is the unique root), and the calibrated scale
// meets the target.
func TestLaplaceScaleMonotone(t *testing.T) {
	for _, lambda := range []float64{1.01, 2, 10, 128} {
		for _, sens := range [][2]float64{{1, 1}, {2, 1}, {7, 3}} {
			prev := math.Inf(1)
			for e := -3.0; e <= 5; e += 0.01 {
				v := laplaceVectorRDP(lambda, sens[0], sens[1], math.Pow(10, e))
				if !(v < prev) {
					t.Fatalf("λ=%g sens=%v: loss at b=1e%g is %g, not < %g", lambda, sens, e, v, prev)
				}
				prev = v
			}
		}
	}
	for _, eps := range []float64{1e-4, 0.01, 0.5, 3, 100, 1e6} {
		m := mustNew(t, Spec{Kind: Laplace, Order: 2.5, RDPEpsilon: eps, Sensitivity: Sensitivity{L1: 2, LInf: 1}})
		got := m.RDP(2.5)
		if !(got <= eps) {
			t.Errorf("eps=%g: RDP %.17g > eps", eps, got)
		}
		if m.Params().Scale > minLaplaceB && got < eps*(1-1e-9) {
			t.Errorf("eps=%g: RDP %.17g well below target", eps, got)
		}
	}
}

func TestGaussianCalibration(t *testing.T) {
	for _, c := range []struct{ order, eps, l2sq float64 }{{2, 1, 2}, {1.5, 0.01, 1}, {32, 5, 4}, {2, 1e9, 1}} {
		m := mustNew(t, Spec{Kind: Gaussian, Order: c.order, RDPEpsilon: c.eps, Sensitivity: Sensitivity{L2Sq: c.l2sq}})
		s := m.Params().Sigma
		got := m.RDP(c.order)
		if !(got <= c.eps) {
			t.Errorf("%+v: RDP %.17g > eps", c, got)
		}
		want := math.Sqrt(c.order * c.l2sq / (2 * c.eps))
		if want >= 0x1p-20 && (s < want || s > want*(1+1e-9)) {
			t.Errorf("%+v: sigma %.17g, want %.17g rounded up by ≤ 1e-9 relative", c, s, want)
		}
		if want < 0x1p-20 && s < 0x1p-20 {
			t.Errorf("%+v: sigma %g below the clamp", c, s)
		}
		if got2 := m.RDP(2 * c.order); math.Abs(got2-2*got) > 1e-12*got {
			t.Errorf("%+v: RDP not linear in the order", c)
		}
		if !math.IsInf(m.MaxOrder(), 1) {
			t.Errorf("MaxOrder = %g", m.MaxOrder())
		}
	}
}
