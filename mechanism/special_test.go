package mechanism

import (
	"math"
	"math/big"
	"testing"

	"gonum.org/v1/gonum/mathext"

	"github.com/dpstage/stage/internal/lib/special"
)

func TestTrigammaAccuracy(t *testing.T) {
	const tol = 4e-15
	exact := []struct{ x, want float64 }{
		{1, math.Pi * math.Pi / 6},
		{0.5, math.Pi * math.Pi / 2},
		{2, math.Pi*math.Pi/6 - 1},
		{3, math.Pi*math.Pi/6 - 1 - 0.25},
		{1.5, math.Pi*math.Pi/2 - 4},
	}
	for _, c := range exact {
		if got := special.Trigamma(c.x); math.Abs(got-c.want) > tol*c.want {
			t.Errorf("special.Trigamma(%g) = %.17g, want %.17g", c.x, got, c.want)
		}
	}
	// Against gonum's Hurwitz zeta ζ(2, x) = ψ′(x) on a log grid, which also
	// checks gonum's accuracy for small x (it agrees to ~1e-16 here).
	for e := -8.0; e <= 12; e += 0.0625 {
		x := math.Pow(10, e)
		got, want := special.Trigamma(x), mathext.Zeta(2, x)
		if math.Abs(got-want) > tol*want {
			t.Errorf("special.Trigamma(%g) = %.17g, mathext.Zeta(2, x) = %.17g", x, got, want)
		}
	}
	// Around the switch to the asymptotic series.
	for x := 11.0; x < 13; x += 0.01 {
		got, want := special.Trigamma(x), bigTrigamma(x)
		if math.Abs(got-want) > tol*want {
			t.Errorf("special.Trigamma(%g) = %.17g, 200-bit value %.17g", x, got, want)
		}
	}
	for _, x := range []float64{0, -1, math.NaN(), math.Inf(-1)} {
		if got := special.Trigamma(x); !math.IsInf(got, 1) {
			t.Errorf("special.Trigamma(%g) = %g, want +Inf", x, got)
		}
	}
	if got := special.Trigamma(math.Inf(1)); got != 0 {
		t.Errorf("special.Trigamma(+Inf) = %g, want 0", got)
	}
}

// bigTrigamma evaluates ψ′(x) in 200-bit arithmetic: recurrence up to
// x ≥ 60, then the asymptotic series through B₂₀ (truncation < 1e-40).
func bigTrigamma(x float64) float64 {
	const prec = 200
	nf := func(v float64) *big.Float { return new(big.Float).SetPrec(prec).SetFloat64(v) }
	acc := nf(0)
	bx := nf(x)
	one := nf(1)
	for bx.Cmp(nf(60)) < 0 {
		sq := new(big.Float).SetPrec(prec).Mul(bx, bx)
		acc.Add(acc, new(big.Float).SetPrec(prec).Quo(one, sq))
		bx.Add(bx, one)
	}
	ix := new(big.Float).SetPrec(prec).Quo(one, bx)
	z := new(big.Float).SetPrec(prec).Mul(ix, ix)
	// 1/x + 1/(2x²) + Σ B_{2k}/x^{2k+1}
	res := new(big.Float).SetPrec(prec).Add(ix, new(big.Float).SetPrec(prec).Quo(z, nf(2)))
	bern := [][2]float64{{1, 6}, {-1, 30}, {1, 42}, {-1, 30}, {5, 66}, {-691, 2730}, {7, 6}, {-3617, 510}, {43867, 798}, {-174611, 330}}
	pow := new(big.Float).SetPrec(prec).Mul(ix, z) // x^{-3}
	for _, b := range bern {
		term := new(big.Float).SetPrec(prec).Mul(pow, nf(b[0]))
		term.Quo(term, nf(b[1]))
		res.Add(res, term)
		pow.Mul(pow, z)
	}
	res.Add(res, acc)
	v, _ := res.Float64()
	return v
}

func TestBisect(t *testing.T) {
	// Increasing predicate direction and decreasing direction.
	got := bisect(func(x float64) bool { return x*x <= 2 }, 1, 2)
	if !(got*got <= 2) || !(math.Nextafter(got, 3)*math.Nextafter(got, 3) > 2) {
		t.Errorf("bisect sqrt2 = %.17g", got)
	}
	got = bisect(func(x float64) bool { return x*x >= 2 }, 2, 1)
	if !(got*got >= 2) || !(math.Nextafter(got, 0)*math.Nextafter(got, 0) < 2) {
		t.Errorf("bisect sqrt2 from above = %.17g", got)
	}
}
