package budget

import (
	"errors"
	"math"

	"github.com/dpstage/stage/mechanism"
)

// gaussCurve is a synthetic RDP curve computed by hand: the Gaussian
// mechanism's ε̂(λ) = λΔ2²/(2σ²) (Mironov 2017, Table II).
type gaussCurve struct{ l2sq, sigma float64 }

func (g gaussCurve) RDP(order float64) float64 { return order * g.l2sq / (2 * g.sigma * g.sigma) }

// fakeMech is a stand-in for mechanism.New's mechanisms in the planner tests:
// the Gaussian (σ from λΔ2²/(2σ²) = ε) and the closed-form Dirichlet (000
// eq. (9), r = 1, curve of 000 eq. (8) below MaxOrder = α/Δ∞ + 1).
type fakeMech struct {
	spec  mechanism.Spec
	sigma float64
	alpha float64
}

func fakeNew(spec mechanism.Spec) (mechanism.Mechanism, error) {
	eps, order, s := spec.RDPEpsilon, spec.Order, spec.Sensitivity
	if !(eps > 0) || !(order > 1) || math.IsInf(eps, 0) || math.IsInf(order, 0) {
		return nil, errors.New("fake: bad spec")
	}
	switch spec.Kind {
	case mechanism.Gaussian:
		return fakeMech{spec: spec, sigma: math.Sqrt(order * s.L2Sq / (2 * eps))}, nil
	case mechanism.Dirichlet:
		return fakeMech{spec: spec, alpha: order*s.L2Sq/(2*eps) + (order-1)*s.LInf + 1}, nil
	}
	return nil, errors.New("fake: unsupported kind")
}

func (f fakeMech) Spec() mechanism.Spec { return f.spec }
func (f fakeMech) Params() mechanism.Params {
	if f.spec.Kind == mechanism.Gaussian {
		return mechanism.Params{Sigma: f.sigma}
	}
	return mechanism.Params{Alpha: f.alpha, R: 1}
}
func (f fakeMech) RDP(order float64) float64 {
	if !(order > 1) || order >= f.MaxOrder() {
		return math.Inf(1)
	}
	s := f.spec.Sensitivity
	if f.spec.Kind == mechanism.Gaussian {
		return order * s.L2Sq / (2 * f.sigma * f.sigma)
	}
	return dirichletRDP(order, f.alpha, s.L2Sq, s.LInf)
}
func (f fakeMech) MaxOrder() float64 {
	if f.spec.Kind == mechanism.Gaussian {
		return math.Inf(1)
	}
	return f.alpha/f.spec.Sensitivity.LInf + 1
}
func (f fakeMech) Release(*mechanism.Rand, []float64, []float64) error {
	return errors.New("fake: no release")
}

// directEpsilon is an independent evaluation of the conversion: for each
// order it solves 000 eq. (2) for ε by bisection on the plain (non-log)
// formula δ(ε) = exp((λ−1)(ε̂−ε))/(λ−1)·(1−1/λ)^λ, which decreases in ε.
func directEpsilon(orders, rdp []float64, delta float64) float64 {
	best := math.Inf(1)
	for i, lam := range orders {
		r := rdp[i]
		if math.IsInf(r, 1) {
			continue
		}
		d := func(eps float64) float64 {
			return math.Exp((lam-1)*(r-eps)) / (lam - 1) * math.Pow(1-1/lam, lam)
		}
		lo, hi := -50.0, r+50
		if d(lo) < delta { // already below δ at ε = lo
			best = math.Min(best, lo)
			continue
		}
		for j := 0; j < 200; j++ {
			mid := (lo + hi) / 2
			if d(mid) > delta {
				lo = mid
			} else {
				hi = mid
			}
		}
		best = math.Min(best, hi)
	}
	return math.Max(best, 0)
}
