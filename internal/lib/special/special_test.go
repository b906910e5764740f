package special

import (
	"math"
	"testing"
)

// The accuracy tests against high-precision references (TestTrigammaAccuracy,
// TestLgammaAccuracy, TestLbetaErr, TestLgammaDiff, TestIncBeta*) are in
// package mechanism, next to their big-float reference code; these check
// the defining identities across the recurrence shift at 12 and 16.

func TestRecurrences(t *testing.T) {
	for _, x := range []float64{0.3, 1, 2.5, 11.5, 11.999, 12, 15.5, 16, 40} {
		// ψ′(x) = ψ′(x+1) + 1/x², ψ(x+1) = ψ(x) + 1/x.
		if d := Trigamma(x) - Trigamma(x+1) - 1/(x*x); math.Abs(d) > 1e-14*Trigamma(x) {
			t.Errorf("trigamma recurrence at %g: off by %g", x, d)
		}
		p0, _ := Digamma(x)
		p1, _ := Digamma(x + 1)
		if d := p1 - p0 - 1/x; math.Abs(d) > 1e-13*(1+math.Abs(p0)) {
			t.Errorf("digamma recurrence at %g: off by %g", x, d)
		}
		// log Γ(x+1) − log Γ(x) = log x.
		if l, _ := LgammaDiff(x, 1); math.Abs(l-math.Log(x)) > 1e-13*(1+math.Abs(math.Log(x))) {
			t.Errorf("LgammaDiff(%g, 1) = %g, want log x = %g", x, l, math.Log(x))
		}
		// B(x, 1) = 1/x, within the stated bound.
		if v, e := LbetaErr(x, 1); math.Abs(v+math.Log(x)) > e {
			t.Errorf("LbetaErr(%g, 1) = %g ± %g, want %g", x, v, e, -math.Log(x))
		}
	}
	// I_x(1, 1) = x: the enclosure contains it.
	for _, x := range []float64{0.01, 0.3, 0.5, 0.9} {
		lo, hi, ok := IncBeta(x, 1, 1)
		if !ok || lo > x || hi < x {
			t.Errorf("IncBeta(%g, 1, 1) = [%g, %g] %v, want to contain %g", x, lo, hi, ok, x)
		}
	}
}
