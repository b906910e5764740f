package interval

import (
	"fmt"
	"math"
)

// Noise is the law of the integer noise an additive mechanism adds to
// every count: the discrete Gaussian N_Z(0, σ²) (Laplace false, Sigma) or
// the discrete Laplace Lap_Z(b), P[Z = z] ∝ e^{−|z|/b} (Laplace true,
// Scale). Both are public parameters of the release (params.sigma,
// params.scale).
type Noise struct {
	Laplace bool
	Sigma   float64
	Scale   float64
}

// variance is the variance of one noise draw: σ² for the discrete
// Gaussian (an upper bound of its exact variance, CKS20 Corollary 9), and
// the discrete Laplace's exact 2q/(1−q)², q = e^{−1/b}.
func (n Noise) variance() float64 {
	if n.Laplace {
		omq := -math.Expm1(-1 / n.Scale) // 1 − q
		return 2 * (1 - omq) / (omq * omq)
	}
	return n.Sigma * n.Sigma
}

func (n Noise) check() error {
	p := n.Sigma
	if n.Laplace {
		p = n.Scale
	}
	if !(p > 0) || math.IsInf(p, 1) {
		return fmt.Errorf("%w: noise parameter %v must be finite and > 0", ErrInvalid, p)
	}
	return nil
}

// quantiler is κ(s) of the per-bin pivot, and κ_T of the total.
type quantiler struct {
	d     int
	gauss float64       // the normal quantile (Gaussian noise)
	table *laplaceTable // κ by weight (Laplace noise)
}

func newQuantiler(nz Noise, d int, level float64) quantiler {
	if nz.Laplace {
		return quantiler{d: d, table: kappaTable(d-1, level)}
	}
	return quantiler{d: d, gauss: normalQuantile(0.5 + level/2)}
}

// share is κ of the pivot of bin share s: W(s) = (1−s)·Z_i − s·Σ_{j≠i} Z_j
// in units of its standard deviation; the weight of Z_i in its variance
// is w = (1−s)²/((1−s)² + (d−1)s²).
func (q quantiler) share(s float64) float64 {
	if q.table == nil {
		return q.gauss
	}
	a, b := (1-s)*(1-s), float64(q.d-1)*s*s
	return q.table.at(a / (a + b))
}

// total is κ of Σ_j Z_j (d terms) in units of its standard deviation: the
// pivot at weight 1/d.
func (q quantiler) total() float64 {
	if q.table == nil {
		return q.gauss
	}
	return q.table.at(1 / float64(q.d))
}

// Additive computes the intervals of an additive release from its noisy
// integer counts x̃ = x + Z (all d bins of one group, Z i.i.d. with law
// nz) at the given level: per bin i the interval [low[i], high[i]] ⊆
// [0, 1] for the share x_i/N, N = Σ x_j, and the total N's estimate and
// interval. See the package doc ("Additive mechanisms") for the
// derivation. noisy must hold whole numbers (possibly negative), at least
// 2 of them; low and high must have the same length.
func Additive(noisy []float64, nz Noise, level float64, low, high []float64) (Total, error) {
	if err := CheckLevel(level); err != nil {
		return Total{}, err
	}
	if err := nz.check(); err != nil {
		return Total{}, err
	}
	d := len(noisy)
	if d < 2 || len(low) != d || len(high) != d {
		return Total{}, fmt.Errorf("%w: additive: %d counts, %d lows, %d highs (want ≥ 2, all equal)", ErrInvalid, d, len(low), len(high))
	}
	s := 0.0
	for _, v := range noisy {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Total{}, fmt.Errorf("%w: additive: noisy count %v", ErrInvalid, v)
		}
		s += v
	}
	v := nz.variance()
	q := newQuantiler(nz, d, level)
	for i, a := range noisy {
		low[i], high[i] = fieller(a, s, v, q)
	}
	// t − N = Σ_j Z_j is integer: P(|Σ Z| ≤ k) for a whole k is about
	// P(|X| ≤ k + ½) for its continuous counterpart X (the continuity
	// correction), so the half-width is ⌈κ_T·sd − ½⌉
	// (TestAdditiveTotalCoverage computes the exact coverage).
	half := math.Ceil(q.total()*math.Sqrt(float64(d)*v) - 0.5)
	return countTotal(s, half, math.Inf(1)), nil
}

// fieller is the interval of bin share s from its noisy count a and the
// noisy total t = Σ x̃_j: the s ∈ [0, 1] with
//
//	(a − s·t)² ≤ κ(s)²·v·(1 − 2s + d·s²),
//
// the test of "the share is s" by the pivot a − s·t = (1−s)·Z_i −
// s·Σ_{j≠i} Z_j, whose variance is v·((1−s)² + (d−1)s²) = v·(1 − 2s + d·s²)
// (Fieller's construction for a ratio of noisy quantities). For a fixed κ
// the set is where a quadratic is ≤ 0 (quadSet); for Laplace noise κ
// depends on s, and each end is iterated to the fixed point κ = κ(end).
func fieller(a, t, v float64, q quantiler) (lo, hi float64) {
	d := float64(q.d)
	est := 1 / d
	if t > 0 {
		est = math.Min(math.Max(a/t, 0), 1)
	}
	solve := func(k float64) (float64, float64, bool) {
		kk := k * k * v
		return quadSet(t*t-kk*d, -2*(a*t-kk), a*a-kk)
	}
	lo, hi, ok := solve(q.share(est))
	if !ok {
		return est, est
	}
	if q.table == nil {
		return lo, hi
	}
	// Laplace: κ(s) varies slowly (by at most 0.15 over [0, 1] at level
	// 0.95), so each end converges in a few steps.
	for range 30 {
		l, _, ok1 := solve(q.share(lo))
		_, h, ok2 := solve(q.share(hi))
		if !ok1 || !ok2 {
			break
		}
		done := math.Abs(l-lo) < 1e-12 && math.Abs(h-hi) < 1e-12
		lo, hi = l, h
		if done {
			break
		}
	}
	return lo, hi
}

// quadSet returns the hull of {s ∈ [0, 1] : a2·s² + a1·s + a0 ≤ 0} and
// whether it is non-empty.
func quadSet(a2, a1, a0 float64) (lo, hi float64, ok bool) {
	if a2 == 0 {
		switch {
		case a1 > 0: // s ≤ −a0/a1
			r := -a0 / a1
			return 0, math.Min(r, 1), r >= 0
		case a1 < 0: // s ≥ −a0/a1
			r := -a0 / a1
			return math.Max(r, 0), 1, r <= 1
		default:
			return 0, 1, a0 <= 0
		}
	}
	disc := a1*a1 - 4*a2*a0
	if disc < 0 {
		if a2 < 0 {
			return 0, 1, true // ≤ 0 everywhere
		}
		return 0, 0, false
	}
	sq := math.Sqrt(disc)
	qq := -(a1 + math.Copysign(sq, a1)) / 2
	r1, r2 := qq/a2, a0/qq
	if qq == 0 {
		r1, r2 = 0, 0
	}
	if r1 > r2 {
		r1, r2 = r2, r1
	}
	if a2 > 0 { // [r1, r2]
		lo, hi = math.Max(r1, 0), math.Min(r2, 1)
		return lo, hi, lo <= hi
	}
	// (−∞, r1] ∪ [r2, ∞) ∩ [0, 1]: the hull of the pieces.
	left, right := r1 >= 0, r2 <= 1
	switch {
	case left && right:
		return 0, 1, true
	case left:
		return 0, math.Min(r1, 1), true
	case right:
		return math.Max(r2, 0), 1, true
	}
	return 0, 0, false
}
