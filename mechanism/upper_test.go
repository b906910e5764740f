package mechanism

import (
	"math"
	"math/big"
	"testing"
)

// These tests check UpperRDP (upper.go) against 300-bit evaluations of the
// formulas RDP evaluates, at the calibrated parameters, at every order of
// the budget's grid: the charge must never be below the exact value
// (issue 28 item 5). They also count the orders at which RDP itself, the
// value charged before, falls below it.

const upPrec = 300

func bf(v float64) *big.Float { return new(big.Float).SetPrec(upPrec).SetFloat64(v) }

func bAdd(a, b *big.Float) *big.Float { return new(big.Float).SetPrec(upPrec).Add(a, b) }
func bSub(a, b *big.Float) *big.Float { return new(big.Float).SetPrec(upPrec).Sub(a, b) }
func bMul(a, b *big.Float) *big.Float { return new(big.Float).SetPrec(upPrec).Mul(a, b) }
func bQuo(a, b *big.Float) *big.Float { return new(big.Float).SetPrec(upPrec).Quo(a, b) }

// bigExp is e^x: e^(x/2^k) by its Taylor series (|x/2^k| < 2⁻¹⁶), squared k
// times.
func bigExp(x *big.Float) *big.Float {
	k := 0
	y := new(big.Float).SetPrec(upPrec).Set(x)
	for new(big.Float).Abs(y).Cmp(bf(0x1p-16)) > 0 {
		y.SetMantExp(y, -1)
		k++
	}
	sum, term := bf(1), bf(1)
	for n := 1; n < 40; n++ {
		term = bQuo(bMul(term, y), bf(float64(n)))
		sum = bAdd(sum, term)
	}
	for ; k > 0; k-- {
		sum = bMul(sum, sum)
	}
	return sum
}

// bigLog is log y (y > 0) by Halley's iteration on e^z = y from the float
// logarithm.
func bigLog(y *big.Float) *big.Float {
	yf, _ := y.Float64()
	z := bf(math.Log(yf))
	for i := 0; i < 6; i++ {
		e := bigExp(z)
		z = bAdd(z, bQuo(bMul(bf(2), bSub(y, e)), bAdd(y, e)))
	}
	return z
}

// bigTrigammaF is ψ′(x) for x > 0 in 300-bit arithmetic: the recurrence up
// to x ≥ 200, then the asymptotic series through B₂₀ (truncation below
// |B₂₂|/200²³ ≈ 10⁻⁵¹ relative).
func bigTrigammaF(x *big.Float) *big.Float {
	acc := bf(0)
	bx := new(big.Float).SetPrec(upPrec).Set(x)
	for bx.Cmp(bf(200)) < 0 {
		acc = bAdd(acc, bQuo(bf(1), bMul(bx, bx)))
		bx = bAdd(bx, bf(1))
	}
	ix := bQuo(bf(1), bx)
	z := bMul(ix, ix)
	res := bAdd(ix, bQuo(z, bf(2)))
	bern := [][2]float64{{1, 6}, {-1, 30}, {1, 42}, {-1, 30}, {5, 66}, {-691, 2730}, {7, 6}, {-3617, 510}, {43867, 798}, {-174611, 330}}
	pow := bMul(ix, z)
	for _, b := range bern {
		res = bAdd(res, bQuo(bMul(pow, bf(b[0])), bf(b[1])))
		pow = bMul(pow, z)
	}
	return bAdd(res, acc)
}

// refGaussian is λ·Δ2²/(2σ²), exactly (σ² is a dyadic rational).
func refGaussian(m *gaussianMech, order float64) *big.Float {
	return bQuo(bMul(bf(order), bf(m.l2sq)), bMul(bf(2), bf(m.dg.sigma2())))
}

// refLaplaceOne is discreteLaplaceRDP's closed form for one coordinate:
// Δ/b + log(1 − B·(1 − E))/(λ−1).
func refLaplaceOne(lambda, delta, b float64) *big.Float {
	if delta == 0 {
		return bf(0)
	}
	bb := bf(b)
	q := bigExp(bQuo(bf(-1), bb))
	z := bigExp(bQuo(bf(-(2*lambda - 1)), bb)) // 2λ−1 is exact for the grid's orders
	B := bQuo(bSub(q, z), bMul(bAdd(bf(1), q), bSub(bf(1), z)))
	E := bigExp(bQuo(bMul(bf(-(2*lambda-1)), bf(delta)), bb))
	l := bigLog(bSub(bf(1), bMul(B, bSub(bf(1), E))))
	return bAdd(bQuo(bf(delta), bb), bQuo(l, bSub(bf(lambda), bf(1))))
}

func refLaplace(m *laplaceMech, order float64) *big.Float {
	b := m.scale()
	n := math.Floor(m.d1 / m.dinf)
	return bAdd(bMul(bf(n), refLaplaceOne(order, m.dinf, b)), refLaplaceOne(order, m.d1-n*m.dinf, b))
}

// refDirichlet is 000 Corollary 3's ½λr²Δ2²ψ′(α_eff − (λ−1)rΔ∞); nil where
// the argument is not positive.
func refDirichlet(order, alphaEff, r, l2sq, linf float64) *big.Float {
	arg := bSub(bf(alphaEff), bMul(bMul(bSub(bf(order), bf(1)), bf(r)), bf(linf)))
	if arg.Sign() <= 0 {
		return nil
	}
	c := bMul(bMul(bMul(bf(0.5), bf(order)), bMul(bf(r), bf(r))), bf(l2sq))
	return bMul(c, bigTrigammaF(arg))
}

// testOrders is the budget's grid (budget.DefaultOrders; budget imports
// this package) with the stage's calibration orders.
func testOrders() []float64 {
	var out []float64
	for x := 1; x < 100; x++ {
		out = append(out, 1+float64(x)/10)
	}
	for i := 11; i < 64; i++ {
		out = append(out, float64(i))
	}
	return append(out, 128, 256, 512, 1024)
}

// TestUpperRDPBoundsTheFormula: for the Gaussian, Laplace and Dirichlet
// (concentrated, closed-form, diffuse, optimal; exact's Corollary 3 cap)
// mechanisms the stage charges, calibrated over a range of per-release ε
// and both sensitivities the stage derives (unit contributions under
// add_remove and replace, and m = 3 under replace), UpperRDP(λ) is at
// least the 300-bit value of RDP's formula at every order of the grid where
// the formula is finite, and within a relative 10⁻⁹ of RDP (the
// allowances are rounding-sized, not a second budget: the largest, the
// Laplace's at large scales where its two terms cancel, is about 10⁻¹⁰;
// its observed error is below a hundredth of its allowance). It logs how many
// orders RDP itself falls below the reference: what was charged before.
func TestUpperRDPBoundsTheFormula(t *testing.T) {
	sens := []Sensitivity{
		{L1: 1, L2Sq: 1, LInf: 1},
		{L1: 2, L2Sq: 2, LInf: 1},
		{L1: 6, L2Sq: 18, LInf: 3},
	}
	epsilons := []float64{1e-6, 5.2443925550163006e-05, 0.0164663, 0.1, 5}
	type kindCal struct {
		kind Kind
		cal  Calibration
	}
	kinds := []kindCal{{Gaussian, ""}, {Laplace, ""}, {Dirichlet, Concentrated}, {Dirichlet, ClosedForm}, {Dirichlet, Diffuse}, {Dirichlet, Optimal}}
	below := map[string]int{}
	raised := map[string]float64{} // the largest relative raise UpperRDP/RDP − 1
	checked := 0
	for _, kc := range kinds {
		for _, s := range sens {
			for _, eps := range epsilons {
				spec := Spec{Kind: kc.kind, Calibration: kc.cal, Order: 2, RDPEpsilon: eps, Sensitivity: s}
				if kc.cal == Optimal {
					spec.ExpectedEvents, spec.Bins = 1500, 5
				}
				m, err := New(spec)
				if err != nil {
					continue // outside the calibration's range (e.g. the samplers' scale limits)
				}
				for _, o := range testOrders() {
					var ref *big.Float
					switch mm := m.(type) {
					case *gaussianMech:
						ref = refGaussian(mm, o)
					case *laplaceMech:
						ref = refLaplace(mm, o)
					case *dirichletMech:
						if o < mm.maxOrder {
							ref = refDirichlet(o, mm.alphaEff(), mm.r, mm.l2sq, mm.linf)
						}
					case *optimalMech:
						if o < mm.maxOrder && !mm.exact {
							ref = refDirichlet(o, mm.alpha, mm.r, mm.l2sq, mm.linf)
						}
					default:
						t.Fatalf("%s %s: unexpected type %T", kc.kind, kc.cal, m)
					}
					if ref == nil {
						continue
					}
					checked++
					up, rdp := m.(UpperRDP).UpperRDP(o), m.RDP(o)
					if bf(up).Cmp(ref) < 0 {
						r, _ := ref.Float64()
						t.Errorf("%s %s Δ=%+v ε=%g λ=%g: UpperRDP %.17g below the formula's %.17g", kc.kind, kc.cal, s, eps, o, up, r)
					}
					if bf(rdp).Cmp(ref) < 0 {
						below[string(kc.kind)+" "+string(kc.cal)]++
					}
					if !(up <= rdp*(1+1e-9)) && !math.IsInf(rdp, 1) {
						t.Errorf("%s %s Δ=%+v ε=%g λ=%g: UpperRDP %.17g is far above RDP %.17g", kc.kind, kc.cal, s, eps, o, up, rdp)
					}
					if k := string(kc.kind) + " " + string(kc.cal); rdp > 0 && up/rdp-1 > raised[k] {
						raised[k] = up/rdp - 1
					}
				}
			}
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d (mechanism, order) points checked", checked)
	}
	t.Logf("%d points checked; RDP (the old charge) below the 300-bit value at: %v; largest raise UpperRDP/RDP − 1: %v", checked, below, raised)
}

// TestUpperRDPExactCap: the exact calibration's and the optimal exact
// frontier's UpperRDP is at least their RDP (whose worst-case terms carry
// their own rounding margins, exact.go) and at most Corollary 3's raised
// bound, at every order.
func TestUpperRDPExactCap(t *testing.T) {
	for _, spec := range []Spec{
		{Kind: Dirichlet, Calibration: Exact, Order: 2, RDPEpsilon: 0.0164663, Sensitivity: Sensitivity{L1: 2, L2Sq: 2, LInf: 1}, Neighbour: Replace},
		{Kind: Dirichlet, Calibration: Exact, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L1: 1, L2Sq: 1, LInf: 1}, Neighbour: AddRemove},
		{Kind: Dirichlet, Calibration: Optimal, Order: 2, RDPEpsilon: 0.00164663, Sensitivity: Sensitivity{L1: 2, L2Sq: 2, LInf: 1}, Neighbour: AnyNeighbour, ExpectedEvents: 1500, Bins: 5},
	} {
		m := mustNew(t, spec)
		for _, o := range testOrders() {
			up, rdp := m.(UpperRDP).UpperRDP(o), m.RDP(o)
			if up < rdp {
				t.Errorf("%s λ=%g: UpperRDP %.17g below RDP %.17g", spec.Calibration, o, up, rdp)
			}
		}
	}
}

// TestGaussianUpperRDPIsTheRoundedUpQuotient: at σ² = 3 (ε = 2/3 at λ = 2,
// Δ2² = 2), RDP(λ) = λ/3 rounds to nearest — below λ/3 at some orders of
// the grid — and UpperRDP is the quotient rounded up: ≥ λ/3 and at most an
// ulp above RDP.
func TestGaussianUpperRDPIsTheRoundedUpQuotient(t *testing.T) {
	m := mustNew(t, Spec{Kind: Gaussian, Order: 2, RDPEpsilon: 2.0 / 3, Sensitivity: Sensitivity{L1: 2, L2Sq: 2, LInf: 1}}).(*gaussianMech)
	if m.dg.sigma2() != 3 {
		t.Fatalf("σ² = %v, want 3", m.dg.sigma2())
	}
	below := 0
	for _, o := range testOrders() {
		exact := new(big.Rat).Quo(new(big.Rat).SetFloat64(o), big.NewRat(3, 1))
		rdp, up := m.RDP(o), m.UpperRDP(o)
		if new(big.Rat).SetFloat64(rdp).Cmp(exact) < 0 {
			below++
		}
		if new(big.Rat).SetFloat64(up).Cmp(exact) < 0 || up > math.Nextafter(rdp, math.Inf(1)) {
			t.Errorf("λ=%g: UpperRDP %.17g, RDP %.17g, exact λ/3", o, up, rdp)
		}
	}
	if below == 0 {
		t.Error("RDP never rounds below λ/3 on the grid: the test no longer shows what it is for")
	}
	t.Logf("RDP = λ/3 rounds below the exact value at %d of %d orders", below, len(testOrders()))
}
