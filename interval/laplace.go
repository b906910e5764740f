package interval

import (
	"math"
	"sync"

	"gonum.org/v1/gonum/mathext"
)

// Quantiles of the Laplace pivot (additive.go): for unit-variance Laplace
// variables L₀, L₁, …, L_n (independent) and a weight w ∈ [0, 1],
//
//	W_w = √w·L₀ + √(1−w)·(L₁ + … + L_n)/√n    (Var W_w = 1),
//
// κ(w) is the c with P(|W_w| > c) = 1 − level. A Laplace variable is a
// normal one with an exponential variance — L = √E·G, E ~ Exp(1),
// G ~ N(0, 1) — so (L₁ + … + L_n)/√n given Γ = E₁ + … + E_n ~ Gamma(n, 1)
// is N(0, Γ/n), and
//
//	P(|W_w| > c) = E_Γ[ 2·S(c; β = √(w/2), σ² = (1−w)·Γ/n) ],
//
// S the survival function of a Laplace(β) plus an independent N(0, σ²)
// (the normal-Laplace convolution, Reed & Jorgensen 2004):
//
//	S(c) = Φ̄(c/σ) + ½·[e^{σ²/(2β²) − c/β}·Φ(c/σ − σ/β) − e^{σ²/(2β²) + c/β}·Φ(−c/σ − σ/β)],
//
// evaluated with the scaled erfc (erfcx) so that neither exponential
// overflows. The expectation over Γ is a composite Gauss–Legendre rule in
// the probability u = P(Γ ≤ γ) (gammaNodes), whose segments reach
// u = 1 − 10⁻⁹, and κ is found by bisection to 10⁻¹⁰. κ is computed on a
// grid of 65 weights w and interpolated linearly (κ varies by about 0.15
// over [0, 1] at level 0.95, smoothly: the interpolation error is below
// 10⁻⁴, TestLaplaceKappa). At w = 1, κ = −log(1 − level)/√2 exactly (the
// Laplace quantile); at w = 0 and large n it tends to the normal quantile.

// laplaceTable is κ on the grid w_j = j/kappaSteps for one (n, level).
type laplaceTable struct {
	kappa [kappaSteps + 1]float64
}

const kappaSteps = 64

// at is κ(w) by linear interpolation.
func (t *laplaceTable) at(w float64) float64 {
	w = math.Min(math.Max(w, 0), 1)
	x := w * kappaSteps
	j := int(x)
	if j >= kappaSteps {
		return t.kappa[kappaSteps]
	}
	f := x - float64(j)
	return t.kappa[j]*(1-f) + t.kappa[j+1]*f
}

type tableKey struct {
	n     int
	level float64
}

// tablesMu guards tables: the κ tables computed so far, by (n, level) —
// a handful per configuration (one per bin count and level), computed once
// in a few tens of milliseconds and read by every release after.
var (
	tablesMu sync.Mutex
	tables   = map[tableKey]*laplaceTable{}
)

// kappaTable returns the κ table of (n, level), computing it once.
func kappaTable(n int, level float64) *laplaceTable {
	k := tableKey{n, level}
	tablesMu.Lock()
	t, ok := tables[k]
	tablesMu.Unlock()
	if ok {
		return t
	}
	t = &laplaceTable{}
	nodes := gammaNodes(n)
	for j := range t.kappa {
		t.kappa[j] = laplaceKappa(float64(j)/kappaSteps, nodes, 1-level)
	}
	tablesMu.Lock()
	tables[k] = t
	tablesMu.Unlock()
	return t
}

// quadNode is a node of the expectation over Γ/n: the value and its
// weight.
type quadNode struct{ v, w float64 }

// gammaNodes is the composite Gauss–Legendre rule (8 nodes per segment)
// for E[f(Γ/n)], Γ ~ Gamma(n, 1), in the probability u: the segments'
// ends are 0, ½, 0.9, 0.99, …, 1 − 10⁻⁹, so the upper tail — where the
// large variances that make |W| large live — is resolved; the mass above
// 1 − 10⁻⁹ is dropped (an error below 10⁻⁹ in a probability bounded by 1).
func gammaNodes(n int) []quadNode {
	ends := []float64{0, 0.5, 0.9, 0.99, 0.999, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9}
	for i := 5; i < len(ends); i++ {
		ends[i] = 1 - ends[i]
	}
	var out []quadNode
	for s := 0; s+1 < len(ends); s++ {
		a, b := ends[s], ends[s+1]
		for i, x := range gl8x {
			u := (a+b)/2 + (b-a)/2*x
			g := mathext.GammaIncRegInv(float64(n), u)
			out = append(out, quadNode{v: g / float64(n), w: (b - a) / 2 * gl8w[i]})
		}
	}
	return out
}

// Gauss–Legendre nodes and weights of order 8 on [−1, 1].
var (
	gl8x = [8]float64{-0.9602898564975363, -0.7966664774136267, -0.5255324099163290, -0.1834346424956498,
		0.1834346424956498, 0.5255324099163290, 0.7966664774136267, 0.9602898564975363}
	gl8w = [8]float64{0.1012285362903763, 0.2223810344533745, 0.3137066458778873, 0.3626837833783620,
		0.3626837833783620, 0.3137066458778873, 0.2223810344533745, 0.1012285362903763}
)

// laplaceKappa is κ(w) for the tail probability tail = 1 − level.
func laplaceKappa(w float64, nodes []quadNode, tail float64) float64 {
	if w >= 1 {
		return -math.Log(tail) / math.Sqrt2
	}
	lo, hi := 0.0, 40.0
	for range 100 {
		mid := (lo + hi) / 2
		if pivotTail(mid, w, nodes) > tail {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo < 1e-10 {
			break
		}
	}
	return (lo + hi) / 2
}

// pivotTail is P(|W_w| > c).
func pivotTail(c, w float64, nodes []quadNode) float64 {
	beta := math.Sqrt(w / 2)
	p := 0.0
	for _, nd := range nodes {
		p += nd.w * 2 * normalLaplaceSurvival(c, beta, math.Sqrt((1-w)*nd.v))
	}
	return p
}

// normalLaplaceSurvival is P(X + Y > c) for c ≥ 0, X ~ Laplace(β) and
// Y ~ N(0, σ²) independent (β, σ ≥ 0, not both 0).
func normalLaplaceSurvival(c, beta, sigma float64) float64 {
	switch {
	case sigma <= 1e-12*beta:
		return math.Exp(-c/beta) / 2
	case beta <= 1e-12*sigma:
		return math.Erfc(c/(sigma*math.Sqrt2)) / 2
	}
	g := math.Exp(-c * c / (2 * sigma * sigma)) // e^{−c²/(2σ²)}
	surv := math.Erfc(c/(sigma*math.Sqrt2)) / 2
	// A = e^{σ²/(2β²) − c/β}·Φ(−a), a = σ/β − c/σ.
	a := sigma/beta - c/sigma
	var A float64
	if a >= 0 {
		A = g * erfcx(a/math.Sqrt2) / 2
	} else {
		A = math.Exp(sigma*sigma/(2*beta*beta)-c/beta) * math.Erfc(a/math.Sqrt2) / 2
	}
	// B = e^{σ²/(2β²) + c/β}·Φ(−b), b = σ/β + c/σ ≥ 0.
	b := sigma/beta + c/sigma
	B := g * erfcx(b/math.Sqrt2) / 2
	return math.Min(math.Max(surv+(A-B)/2, 0), 1)
}
