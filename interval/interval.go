package interval

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mathext"
)

// DefaultLevel is the confidence level of the published intervals when
// output.interval_level is not set.
const DefaultLevel = 0.95

// MinLevel and MaxLevel bound output.interval_level: below 0.5 an
// "interval" is more often wrong than right; above 0.999 the tail
// probabilities the inversions solve for (≤ 5·10⁻⁴ per side) leave the
// range the coverage tests measure.
const (
	MinLevel = 0.5
	MaxLevel = 0.999
)

// ErrInvalid is wrapped by every argument error of this package.
var ErrInvalid = errors.New("interval: invalid argument")

// CheckLevel reports whether level is a confidence level this package
// computes: finite, in [MinLevel, MaxLevel].
func CheckLevel(level float64) error {
	if !(level >= MinLevel && level <= MaxLevel) {
		return fmt.Errorf("%w: level %v must be in [%v, %v]", ErrInvalid, level, MinLevel, MaxLevel)
	}
	return nil
}

// Total is a private total with its interval, on the count scale: the
// estimate and an interval [Low, High] that contains the window's true
// total with probability at least the level (see the package doc).
type Total struct {
	Estimate, Low, High float64
}

// Count is the total of a charged count: noisy = n + Z with
// Z ~ N_Z(0, σ²) (the discrete Gaussian of the exact sampler) and the true
// n a whole number in [0, max] (max = +Inf for no upper bound). The
// interval is noisy ± h over the whole numbers of [0, max], h the
// smallest whole number with P(|Z| ≤ h) ≥ level (dgaussHalf); the
// estimate is noisy clamped to [0, max]. So the interval holds n with
// probability at least the level, exactly: clamping removes no whole
// number of [0, max] that noisy ± h held (TestCountCoverage sums the
// discrete Gaussian's mass to check it).
func Count(noisy, sigma, level, max float64) (Total, error) {
	if err := CheckLevel(level); err != nil {
		return Total{}, err
	}
	if !(sigma > 0) || math.IsInf(sigma, 1) || math.IsNaN(noisy) || math.IsInf(noisy, 0) || !(max >= 0) {
		return Total{}, fmt.Errorf("%w: count: noisy %v, sigma %v, max %v", ErrInvalid, noisy, sigma, max)
	}
	return countTotal(noisy, dgaussHalf(sigma, level), max), nil
}

// dgaussHalf is the smallest whole h with P(|Z| ≤ h) ≥ level for
// Z ~ N_Z(0, σ²), P[Z = z] ∝ e^{−z²/(2σ²)}: by summing the mass for
// σ ≤ 1000 (the terms beyond 40σ are below e^{−800}), else by the normal
// quantile with the continuity correction, ⌈z·σ − ½⌉ + 1 (one more than
// the corrected quantile: at σ > 1000 the lattice's effect on the
// quantile is below 10⁻⁶·σ, and the +1 covers it).
func dgaussHalf(sigma, level float64) float64 {
	z := normalQuantile(0.5 + level/2)
	if sigma > 1000 {
		return math.Ceil(z*sigma-0.5) + 1
	}
	top := int(40*sigma) + 2
	mass := func(k int) float64 { return math.Exp(-float64(k) * float64(k) / (2 * sigma * sigma)) }
	all := 1.0
	for k := top; k >= 1; k-- { // smallest terms first
		all += 2 * mass(k)
	}
	in := mass(0)
	for h := 0; h < top; h++ {
		if in >= level*all {
			return float64(h)
		}
		in += 2 * mass(h+1)
	}
	return float64(top)
}

// countTotal is the interval noisy ± half over the whole numbers of
// [0, max], and noisy clamped to [0, max].
func countTotal(noisy, half, max float64) Total {
	clamp := func(v float64) float64 { return math.Min(math.Max(v, 0), max) }
	return Total{
		Estimate: clamp(noisy),
		Low:      clamp(math.Ceil(noisy - half)),
		High:     clamp(math.Floor(noisy + half)),
	}
}

// normalQuantile is z with Φ(z) = p.
func normalQuantile(p float64) float64 { return mathext.NormalQuantile(p) }

// erfcx is the scaled complementary error function e^{x²}·erfc(x) for
// x ≥ 0: directly below 25 (erfc's relative accuracy is kept; e^{x²} adds
// at most x²·2⁻⁵³ relative), else the asymptotic series
// 1/(x√π)·(1 − 1/(2x²) + 3/(4x⁴) − 15/(8x⁶)), whose first omitted term,
// 105/(16x⁸) < 2·10⁻¹¹, bounds its error.
func erfcx(x float64) float64 {
	if x < 25 {
		return math.Exp(x*x) * math.Erfc(x)
	}
	z := 1 / (x * x)
	return (1 - z/2 + 3*z*z/4 - 15*z*z*z/8) / (x * math.SqrtPi)
}

// normalNodes are the Gauss–Hermite rule for E[f(Z)], Z ~ N(0, 1): nodes
// z_k and weights w_k (Σ w_k = 1), exact for polynomials of degree up to
// 2·nuisanceNodes − 1. They integrate over a Gaussian total's noise in
// beta.go, where the integrand — a Beta tail probability as a function of
// the total — is smooth and bounded; TestNuisanceQuadrature compares the
// rule with a 400-point one.
var normalNodes = gaussHermite(nuisanceNodes)

// nuisanceNodes is the number of normalNodes.
const nuisanceNodes = 10

type node struct{ z, w float64 }

// gaussHermite returns the n-point Gauss–Hermite rule for the standard
// normal: the roots x_k of the physicists' Hermite polynomial H_n by
// Newton's method on the orthonormal recurrence (Numerical Recipes §4.6,
// gauher), mapped to z = √2·x with weights w/√π.
func gaussHermite(n int) []node {
	const pim4 = 0.7511255444649425 // π^(−1/4)
	x := make([]float64, n)
	w := make([]float64, n)
	var z float64
	for i := 0; i < (n+1)/2; i++ {
		switch i {
		case 0:
			z = math.Sqrt(float64(2*n+1)) - 1.85575*math.Pow(float64(2*n+1), -0.16667)
		case 1:
			z -= 1.14 * math.Pow(float64(n), 0.426) / z
		case 2:
			z = 1.86*z - 0.86*x[0]
		case 3:
			z = 1.91*z - 0.91*x[1]
		default:
			z = 2*z - x[i-2]
		}
		var pp float64
		for range 100 {
			p1, p2 := pim4, 0.0
			for j := 1; j <= n; j++ {
				p3 := p2
				p2 = p1
				p1 = z*math.Sqrt(2/float64(j))*p2 - math.Sqrt(float64(j-1)/float64(j))*p3
			}
			pp = math.Sqrt(2*float64(n)) * p2
			z1 := z
			z = z1 - p1/pp
			if math.Abs(z-z1) <= 1e-15 {
				break
			}
		}
		x[i], x[n-1-i] = z, -z
		w[i] = 2 / (pp * pp)
		w[n-1-i] = w[i]
	}
	out := make([]node, n)
	for i := range out {
		out[n-1-i] = node{z: math.Sqrt2 * x[i], w: w[i] / math.SqrtPi}
	}
	return out
}
