package selection

import (
	"fmt"
	"math"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/mechanism"
)

// Plan is a calibrated selection: its threshold, the period it was
// calibrated for, and what that period costs.
type Plan struct {
	Threshold Threshold
	Period    Period
	// Guarantee is the period's (ε, δ): Epsilon ≤ the budget's ε and
	// Delta() ≤ its δ.
	Guarantee Guarantee
	// Curve is the period's composed RDP curve (what the budget book
	// reserves for the selections of a period, converted at
	// Guarantee.ConversionDelta).
	Curve budget.Curve
	// Orders is the grid the curve is on.
	Orders []float64

	// noiseArg and keyNoiseArg are the arguments of Noiser that give the
	// samplers of Threshold.Sigma and KeySigma (Noisers): Noiser rounds σ²
	// up, so Noiser(Threshold.Sigma) may give a slightly larger σ.
	noiseArg, keyNoiseArg float64
}

// Noisers returns the samplers of the plan's threshold: noise of
// N_Z(0, Threshold.Sigma²) and, with a key limit, keyNoise of
// N_Z(0, Threshold.KeySigma²) (nil without). Their σ are exactly the
// threshold's, as Keys requires.
func (p Plan) Noisers() (noise, keyNoise mechanism.CountNoiser, err error) {
	if noise, err = Noiser(p.noiseArg); err != nil {
		return nil, nil, err
	}
	if p.Threshold.KeyLimit > 0 {
		if keyNoise, err = Noiser(p.keyNoiseArg); err != nil {
			return nil, nil, err
		}
	}
	if noise.Params().Sigma != p.Threshold.Sigma || (keyNoise != nil && keyNoise.Params().Sigma != p.Threshold.KeySigma) {
		return nil, nil, fmt.Errorf("selection: the samplers' σ differ from the plan's (%v, %v)", p.Threshold.Sigma, p.Threshold.KeySigma)
	}
	return noise, keyNoise, nil
}

// Calibrate returns the selection of a period p with l0 keys per user per
// window that fits (eps, delta) with the smallest threshold T, at the
// order grid of budget.DefaultOrders with order (see the package doc,
// "Calibration"). Arguments are checked centrally: eps and delta finite,
// eps > 0, delta ∈ (0, 1), l0 ≥ 1, p with at least one window.
//
// keyLimit > 0 adds the key-count test (Threshold.KeyLimit, σ_k =
// KeySigmaFor(keyLimit, σ, l0)) to every window's curve; 0 leaves it out.
func Calibrate(eps, delta float64, l0 int, p Period, order float64, keyLimit int) (Plan, error) {
	switch {
	case !(eps > 0) || math.IsInf(eps, 0):
		return Plan{}, fmt.Errorf("selection: ε must be finite and > 0, got %v", eps)
	case !(delta > 0 && delta < 1):
		return Plan{}, fmt.Errorf("selection: δ must be in (0, 1), got %v", delta)
	case l0 < 1:
		return Plan{}, fmt.Errorf("selection: max_groups_per_user must be ≥ 1, got %d", l0)
	case keyLimit < 0:
		return Plan{}, fmt.Errorf("selection: the key limit must be ≥ 0, got %d", keyLimit)
	case p.Units < 1 || p.DeltaUnits < 1:
		return Plan{}, fmt.Errorf("selection: a period composes at least one window, got %d (δ: %d)", p.Units, p.DeltaUnits)
	}
	orders, err := budget.WithOrder(budget.DefaultOrders(), order)
	if err != nil {
		return Plan{}, fmt.Errorf("selection: %w", err)
	}
	var best Plan
	found := false
	for i := 1; i <= 19; i++ {
		f := float64(i) / 20 // the threshold's share of δ
		pl, err := calibrateSplit(eps, delta, f, l0, p, orders, keyLimit)
		if err != nil {
			continue // infeasible at this split (σ out of the sampler's range)
		}
		if !found || pl.Threshold.T < best.Threshold.T ||
			(pl.Threshold.T == best.Threshold.T && pl.Threshold.Sigma < best.Threshold.Sigma) {
			best, found = pl, true
		}
	}
	if !found {
		return Plan{}, fmt.Errorf("selection: no threshold fits ε=%g, δ=%g over %d windows (the noise would exceed the sampler's range): raise the selection's share of the budget or lower the windows a user counts in", eps, delta, p.Units)
	}
	return best, nil
}

// calibrateSplit calibrates with the fraction f of delta for the
// threshold: σ the smallest whose composed curve converts to at most eps
// at (1−f)·delta (bisection on log σ), then T the smallest whole number
// with DeltaUnits·δ_w ≤ f·delta.
func calibrateSplit(eps, delta, f float64, l0 int, p Period, orders []float64, keyLimit int) (Plan, error) {
	conv := (1 - f) * delta
	target := budget.Planned(eps)
	fits := func(sigma float64) bool {
		th := Threshold{Sigma: sigma, T: 1, L0: l0, KeyLimit: int64(keyLimit), KeySigma: KeySigmaFor(keyLimit, sigma, l0)}
		c, _, err := th.Charge(p, orders)
		if err != nil {
			return false
		}
		e, _, err := c.Epsilon(conv)
		return err == nil && e <= target
	}
	lo, hi := 1e-3, 1.0
	for !fits(hi) {
		lo, hi = hi, hi*2
		if hi > 1<<23 {
			return Plan{}, fmt.Errorf("selection: σ beyond the sampler's range")
		}
	}
	for i := 0; i < 100 && hi/lo > 1+1e-12; i++ {
		mid := math.Sqrt(lo * hi)
		if fits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	// The sampler rounds σ² up (mechanism.New); the threshold is computed
	// for the σ it samples.
	n, err := Noiser(hi)
	if err != nil {
		return Plan{}, err
	}
	sigma := n.Params().Sigma
	budgetW := f * delta / float64(p.DeltaUnits) // δ_w allowed per window
	th := Threshold{Sigma: sigma, L0: l0}
	keyArg := KeySigmaFor(keyLimit, sigma, l0)
	if keyLimit > 0 {
		kn, err := Noiser(keyArg)
		if err != nil {
			return Plan{}, err
		}
		th.KeyLimit, th.KeySigma = int64(keyLimit), kn.Params().Sigma
	}
	// Start from the continuous estimate and walk to the smallest T.
	q := -math.Expm1(math.Log1p(-budgetW) / float64(l0))
	th.T = max(1, int64(math.Floor(1+sigma*normalTailInv(q)))-2)
	for th.WindowDelta() > budgetW {
		th.T++
	}
	for th.T > 1 {
		prev := th
		prev.T--
		if prev.WindowDelta() > budgetW {
			break
		}
		th = prev
	}
	g, err := th.GuaranteeOf(p, orders, conv)
	if err != nil {
		return Plan{}, err
	}
	if g.Epsilon > eps || g.Delta() > delta {
		return Plan{}, fmt.Errorf("selection: calibrated (%g, %g) exceeds (%g, %g)", g.Epsilon, g.Delta(), eps, delta)
	}
	c, _, err := th.Charge(p, orders)
	if err != nil {
		return Plan{}, err
	}
	return Plan{Threshold: th, Period: p, Guarantee: g, Curve: c, Orders: orders, noiseArg: hi, keyNoiseArg: keyArg}, nil
}

// Noiser is the exact discrete Gaussian sampler of N_Z(0, σ'²), σ' ≥ sigma
// the smallest σ it represents (mechanism.New rounds σ² up to a dyadic
// rational): the selection's noise. Its RDP at order 2 with Δ2² = 1 is
// 1/σ'², which is how it is specified.
func Noiser(sigma float64) (mechanism.CountNoiser, error) {
	if !(sigma > 0) || math.IsInf(sigma, 0) {
		return nil, fmt.Errorf("selection: σ must be finite and > 0, got %v", sigma)
	}
	for try := 0; try < 4; try++ {
		m, err := mechanism.New(mechanism.Spec{Kind: mechanism.Gaussian, Order: 2, RDPEpsilon: 1 / (sigma * sigma), Sensitivity: mechanism.Sensitivity{L2Sq: 1}})
		if err != nil {
			return nil, fmt.Errorf("selection: %w", err)
		}
		if m.Params().Sigma >= sigma {
			return m.(mechanism.CountNoiser), nil
		}
		sigma = math.Nextafter(sigma, math.Inf(1)) * (1 + 1e-12)
	}
	return nil, fmt.Errorf("selection: no sampler for σ=%g", sigma)
}

// Batch is the batch optimum: the keep probabilities π_n of the optimal
// selection of partitions with at most l0 per user at (ε, δ) (package
// doc, "The batch optimum").
type Batch struct {
	Epsilon, Delta float64
	L0             int
}

// Keep is π_n, n ≥ 0.
func (b Batch) Keep(n int) float64 {
	e := b.Epsilon / float64(b.L0)
	d := -math.Expm1(math.Log1p(-b.Delta) / float64(b.L0)) // 1 − (1−δ)^{1/l0}
	pi := 0.0
	for i := 1; i <= n; i++ {
		pi = math.Min(1, math.Min(math.Exp(e)*pi+d, 1-math.Exp(-e)*(1-pi-d)))
		if pi >= 1 {
			return 1
		}
	}
	return pi
}

// UsersAt is the smallest n with π_n ≥ p (p ≤ 1; p = 1: kept always). It
// returns -1 if no n up to 10⁷ reaches p.
func (b Batch) UsersAt(p float64) int {
	e := b.Epsilon / float64(b.L0)
	d := -math.Expm1(math.Log1p(-b.Delta) / float64(b.L0))
	pi := 0.0
	for n := 1; n <= 10_000_000; n++ {
		pi = math.Min(1, math.Min(math.Exp(e)*pi+d, 1-math.Exp(-e)*(1-pi-d)))
		if pi >= p {
			return n
		}
	}
	return -1
}
