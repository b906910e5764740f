package interval

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mathext"
)

// family gives the Beta shapes (a, b) of one bin's released share given
// its true share s ∈ [0, 1] and the nuisance n (the window's total). For a
// fixed n, a is non-decreasing and b non-increasing in s, so
// Beta(a, b) is stochastically non-decreasing in s (gamma coupling, as in
// mechanism/average.go's δ proof).
type family func(s, n float64) (a, b float64)

// Dirichlet computes the per-bin intervals of a Dirichlet release
// y ~ Dir(r·x + α) over d = len(y) bins, rounded to the grid 1/grid
// (grid 0: not rounded), for the shares x_i/N, N = Σ x_j, given the
// release's private total noisyTotal = N + Z, Z ~ N_Z(0, totalSigma²): the
// raw noisy count, before the clamping of its published estimate. Bin i's
// marginal is y_i ~ Beta(r·x_i + α, r·(N − x_i) + (d−1)·α) (the Dirichlet's
// aggregation property); see the package doc ("Dirichlet releases").
func Dirichlet(y []float64, grid int64, r, alpha, noisyTotal, totalSigma, level float64, low, high []float64) error {
	if err := checkBeta(y, grid, noisyTotal, totalSigma, level, low, high); err != nil {
		return err
	}
	if !(r > 0) || !(alpha > 0) || math.IsInf(r, 1) || math.IsInf(alpha, 1) {
		return fmt.Errorf("%w: dirichlet: r %v, alpha %v", ErrInvalid, r, alpha)
	}
	d := float64(len(y))
	fam := func(s, n float64) (float64, float64) {
		return r*s*n + alpha, r*(1-s)*n + (d-1)*alpha
	}
	ns := nuisance(noisyTotal, totalSigma, math.Inf(1))
	invertAll(y, grid, fam, ns, level, low, high)
	return nil
}

// Average computes the per-bin intervals of an average histogram's release
// y ~ Dir(k·p), p = (1 − dη)·p̄ + η, p̄ = (n·a + (users − n)·(1/d))/users
// the padded average of the n kept users' mean vectors a, for the shares
// a_i, given the release's private kept-user count noisyKept = n + Z,
// Z ~ N_Z(0, totalSigma²). Bin i's marginal is y_i ~ Beta(k·p_i, k·(1−p_i));
// see the package doc ("Average releases").
func Average(y []float64, grid int64, k, eta float64, users int, noisyKept, totalSigma, level float64, low, high []float64) error {
	if err := checkBeta(y, grid, noisyKept, totalSigma, level, low, high); err != nil {
		return err
	}
	d := float64(len(y))
	if !(k > 0) || math.IsInf(k, 1) || !(eta >= 0) || !(eta*d < 1) || users < 1 {
		return fmt.Errorf("%w: average: k %v, eta %v, users %d", ErrInvalid, k, eta, users)
	}
	u := float64(users)
	fam := func(s, n float64) (float64, float64) {
		p := (1-d*eta)*((n/u)*s+(u-n)/(u*d)) + eta
		return k * p, k * (1 - p)
	}
	ns := nuisance(noisyKept, totalSigma, u)
	invertAll(y, grid, fam, ns, level, low, high)
	return nil
}

func checkBeta(y []float64, grid int64, noisy, sigma, level float64, low, high []float64) error {
	if err := CheckLevel(level); err != nil {
		return err
	}
	if len(y) < 2 || len(low) != len(y) || len(high) != len(y) || grid < 0 {
		return fmt.Errorf("%w: %d bins, %d lows, %d highs, grid %d", ErrInvalid, len(y), len(low), len(high), grid)
	}
	for _, v := range y {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("%w: released share %v not in [0, 1]", ErrInvalid, v)
		}
	}
	if math.IsNaN(noisy) || math.IsInf(noisy, 0) || !(sigma > 0) || math.IsInf(sigma, 1) {
		return fmt.Errorf("%w: noisy total %v, sigma %v", ErrInvalid, noisy, sigma)
	}
	return nil
}

// weighted is a nuisance value with its weight.
type weighted struct{ n, w float64 }

// nuisance is the quadrature of the total's confidence distribution
// (noisy − σ·Z, Z ~ N(0, 1)): the values noisy + σ·z_k of the
// Gauss–Hermite rule (symmetric nodes), clamped to the possible totals
// [0, max], equal values merged.
func nuisance(noisy, sigma, max float64) []weighted {
	out := make([]weighted, 0, len(normalNodes))
	for _, nd := range normalNodes {
		n := math.Min(math.Max(noisy+sigma*nd.z, 0), max)
		if l := len(out); l > 0 && out[l-1].n == n {
			out[l-1].w += nd.w
			continue
		}
		out = append(out, weighted{n, nd.w})
	}
	return out
}

func invertAll(y []float64, grid int64, fam family, ns []weighted, level float64, low, high []float64) {
	step := 0.0
	if grid > 0 {
		step = 1 / float64(grid)
	}
	if !slices.ContainsFunc(ns, func(x weighted) bool { return x.n > 0 }) {
		// Every plausible total is 0: the release carries no information
		// on the shares (and a share of an empty window is undefined).
		for i := range y {
			low[i], high[i] = 0, 1
		}
		return
	}
	tail := (1 - level) / 2
	// Bins with the same released value have the same interval (the
	// family depends on the bin only through y): with many bins the grid's
	// values repeat (d = 10,000 bins of shares near 10⁻⁴ take about a
	// hundred distinct values of 1/Q), so each is inverted once.
	done := make(map[float64][2]float64)
	for i, yi := range y {
		iv, ok := done[yi]
		if !ok {
			iv[0], iv[1] = invertBeta(yi, step, fam, ns, tail)
			done[yi] = iv
		}
		low[i], high[i] = iv[0], iv[1]
	}
}

// invertBeta is the interval of one bin's share s from its released value
// y (within step of the unrounded draw): the s whose mixture tails
//
//	up(s)   = Σ_k w_k·P(Y ≥ y − step | s, n_k),
//	down(s) = Σ_k w_k·P(Y ≤ y + step | s, n_k)
//
// both exceed tail: lo = inf{s : up(s) > tail} (up is non-decreasing in
// s), hi = sup{s : down(s) > tail} (down is non-increasing).
//
// Each end is first found for the plug-in total alone (the middle node,
// one Beta tail per step), then, unless the mixture's tail there is within
// 10⁻³ (relative) of tail already, by regula falsi on the mixture from a
// bracket grown around it.
func invertBeta(y, step float64, fam family, ns []weighted, tail float64) (lo, hi float64) {
	yl, yh := y-step, y+step
	mean := 0.0
	for _, nd := range ns {
		mean += nd.w * nd.n
	}
	mid := []weighted{{mean, 1}} // the plug-in total
	// The tails are compared on the probit scale, z = Φ⁻¹(p), on which they
	// are close to linear in s, so that regula falsi converges in a few
	// steps; tol is 10⁻³·tail in probability.
	zt := probit(tail)
	tol := 1e-3 * tail / normalDensity(zt)
	up := func(ns []weighted) func(float64) float64 {
		return func(s float64) float64 {
			if yl <= 0 {
				return math.Inf(1)
			}
			p := 0.0
			for _, nd := range ns {
				a, b := fam(s, nd.n)
				p += nd.w * mathext.RegIncBeta(b, a, 1-yl) // P(Y ≥ yl) = I_{1−yl}(b, a)
			}
			return probit(p) - zt
		}
	}
	down := func(ns []weighted) func(float64) float64 {
		return func(s float64) float64 {
			if yh >= 1 {
				return math.Inf(-1)
			}
			p := 0.0
			for _, nd := range ns {
				a, b := fam(s, nd.n)
				p += nd.w * mathext.RegIncBeta(a, b, yh)
			}
			return zt - probit(p) // non-decreasing in s
		}
	}
	// lo: the first s with up(s) − tail > 0; hi: the last with
	// tail − down(s) < 0.
	lo = endpoint(up(ns), up(mid), tol)
	hi = endpoint(down(ns), down(mid), tol)
	if lo > hi { // not for a continuous family; guards rounding
		lo, hi = hi, lo
	}
	return lo, hi
}

// endpoint is where the non-decreasing f (the mixture) crosses 0 on
// [0, 1] — 0 if f(0) > 0, 1 if f(1) ≤ 0 — starting from the crossing of
// guess (the plug-in: the mean of the nuisance nodes).
func endpoint(f, guess func(float64) float64, tol float64) float64 {
	f0 := f(0)
	if f0 > 0 {
		return 0
	}
	f1 := f(1)
	if f1 <= 0 {
		return 1
	}
	s := 0.5
	if g0, g1 := guess(0), guess(1); g0 <= 0 && g1 > 0 {
		s = root(guess, 0, g0, 1, g1, tol)
	}
	fs := f(s)
	if math.Abs(fs) <= tol {
		return s
	}
	// Grow a bracket from s towards the crossing.
	a, fa, b, fb := 0.0, f0, 1.0, f1
	for h := 1e-6; ; h *= 4 {
		if fs > 0 {
			b, fb = s, fs
			if t := s - h; t > a {
				if ft := f(t); ft <= 0 {
					a, fa = t, ft
					break
				} else {
					s, fs = t, ft
				}
				continue
			}
		} else {
			a, fa = s, fs
			if t := s + h; t < b {
				if ft := f(t); ft > 0 {
					b, fb = t, ft
					break
				} else {
					s, fs = t, ft
				}
				continue
			}
		}
		break
	}
	return root(f, a, fa, b, fb, tol)
}

// root finds the s ∈ [a, b] where the non-decreasing f changes sign
// (fa = f(a) ≤ 0 < fb = f(b)) by the Illinois variant of regula falsi,
// until |f| ≤ tol or the bracket is below 10⁻⁹.
func root(f func(float64) float64, a, fa, b, fb, tol float64) float64 {
	side := 0
	for range 200 {
		if b-a < 1e-9 {
			break
		}
		c := (a*fb - b*fa) / (fb - fa)
		if !(c > a && c < b) {
			c = (a + b) / 2
		}
		fc := f(c)
		if math.Abs(fc) <= tol {
			return c
		}
		if fc > 0 {
			b, fb = c, fc
			if side == -1 {
				fa /= 2
			}
			side = -1
		} else {
			a, fa = c, fc
			if side == 1 {
				fb /= 2
			}
			side = 1
		}
	}
	return (a + b) / 2
}

// probit is Φ⁻¹(p), ±Inf at 0 and 1.
func probit(p float64) float64 {
	switch {
	case p <= 0:
		return math.Inf(-1)
	case p >= 1:
		return math.Inf(1)
	}
	return normalQuantile(p)
}

// normalDensity is φ(z).
func normalDensity(z float64) float64 { return math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) }
