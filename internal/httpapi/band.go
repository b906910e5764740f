package httpapi

import (
	"math"

	"gonum.org/v1/gonum/mathext"
)

// The noise band of the dashboard (computed by the page's script; this is
// its Go twin, which the tests check the statistics of and compare the page
// against).
//
// A Dirichlet release of one (histogram, group, window) is one draw
// y ~ Dir(r·x + α) over d bins, where x are the window's private counts (N in
// total) and α, r are public (they are in every release message). Bin i's
// share y_i is Beta(m_i·C, (1−m_i)·C) with
//
//	m_i = (r·x_i + α)/(r·N + d·α)   the centre of the draw, and
//	C   = r·N + d·α                  its concentration.
//
// m_i is what the release would show without noise: the true share x_i/N
// blended with the even split 1/d, with weight d·α/C on the even split. Both
// m_i and C depend on N, which is private, so no band around the true share
// can be computed from public information. What can be: C is at least
// C₀ = d·α (a window without events), whatever N is (also if counts are
// raised to a lower bound b, which only adds r·b to every shape).
//
// For one known C, inverting the Beta test gives the exact interval
// {m : y_i lies in the central `level` part of Beta(m·C, (1−m)·C)}, which
// contains m_i with probability ≥ level. The band is the union of these
// intervals over every C ≥ C₀: it contains the interval for the true C, so it
// covers m_i with probability ≥ level for every N — from y, α and d alone.
// Where the Beta tails are regular the union is the C₀ interval (the widest),
// so the band is the spread of the noise in the worst case (few users); with
// many users the actual noise is smaller than the band.
//
// The union is computed on a geometric grid of C (ratio bandGridRatio, plus
// C₀ itself), cut where Chebyshev's inequality shows a tail below the level
// for every larger C; the endpoints by bisection on m (the tail probabilities
// are monotone in m: Beta(m·C, (1−m)·C) increases with m in likelihood
// ratio).
//
// For the gaussian and laplace baselines the spread of a share is σ/N or b/N
// with N private: there is no public band, and the page says so.

// BandLevel is the coverage of the page's band: each bar's band contains the
// centre of its draw with probability at least BandLevel.
const BandLevel = 0.90

const (
	bandGridRatio = 1.25
	bandMaxRatio  = 1e12 // C/C₀ beyond which the grid stops in any case
	bandBisect    = 50
)

// DirichletBand returns the band [lo[i], hi[i]] of every bin of the
// Dirichlet release y made with prior alpha, at coverage level (e.g.
// BandLevel). It uses only public inputs: the released vector, α and the
// number of bins.
func DirichletBand(y []float64, alpha, level float64) (lo, hi []float64) {
	d := float64(len(y))
	c0 := d * alpha
	tail := (1 - level) / 2
	lo = make([]float64, len(y))
	hi = make([]float64, len(y))
	for i, yi := range y {
		lo[i] = bisect(0, yi, func(m float64) bool { return supTail(m, yi, c0, tail, true) >= tail }, true)
		hi[i] = bisect(yi, 1, func(m float64) bool { return supTail(m, yi, c0, tail, false) >= tail }, false)
	}
	return lo, hi
}

// supTail returns max over the C grid of P(Y ≥ y) (upper: m < y) or
// P(Y ≤ y) (m > y) for Y ~ Beta(m·C, (1−m)·C), stopping once the maximum is
// known to reach tail or Chebyshev shows no larger C can.
func supTail(m, y, c0, tail float64, upper bool) float64 {
	best := 0.0
	for c := c0; c <= c0*bandMaxRatio; c *= bandGridRatio {
		p := mathext.RegIncBeta(m*c, (1-m)*c, y)
		if upper {
			p = 1 - p
		}
		best = math.Max(best, p)
		if best >= tail {
			return best
		}
		// Chebyshev: P(|Y − m| ≥ |y − m|) ≤ m(1−m)/((C+1)(y−m)²), which
		// only decreases as C grows.
		if dev := y - m; m*(1-m)/((c+1)*dev*dev) < tail {
			return best
		}
	}
	return best
}

// bisect finds the boundary in [a, b] of the set where in(m) holds, which is
// [boundary, b] when lower (in is increasing in m) and [a, boundary]
// otherwise.
func bisect(a, b float64, in func(float64) bool, lower bool) float64 {
	for range bandBisect {
		mid := (a + b) / 2
		if in(mid) == lower {
			b = mid
		} else {
			a = mid
		}
	}
	if lower {
		return b
	}
	return a
}
