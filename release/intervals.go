package release

import (
	"errors"
	"math"

	"github.com/dpstage/stage/interval"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
)

// Every release carries per-bin intervals and the window's private total
// (issue 29; package interval has the derivations, plan's "Totals" the
// charge). They are computed here, in the releasing goroutine, from the
// draw just made and public parameters — the additive mechanisms' noisy
// counts, or a Dirichlet or average release and its charged total — and
// recorded with the rest of the message in the window's ledger
// transaction, so a restart republishes them as they were, never
// recomputed or redrawn.

// countDraw draws one group's release of a count histogram with its
// intervals and total.
type countDraw struct {
	cp     *plan.CountPlan
	totals *plan.TotalPlan
	level  float64
	// additive: the noise mechanism (the laplace-posterior's base) and its
	// law; nil for the Dirichlet mechanism.
	base  mechanism.CountReleaser
	noise interval.Noise
	noisy []float64
}

func newCountDraw(cp *plan.CountPlan, totals *plan.TotalPlan, level float64, bins int) (*countDraw, error) {
	c := &countDraw{cp: cp, totals: totals, level: level}
	m := cp.Mechanism
	if post, ok := m.(*mechanism.CountPosterior); ok {
		m = post.Base()
	}
	if cr, ok := m.(mechanism.CountReleaser); ok {
		c.base = cr
		p := cr.Params()
		c.noise = interval.Noise{Laplace: cr.Spec().Kind == mechanism.Laplace, Sigma: p.Sigma, Scale: p.Scale}
		c.noisy = make([]float64, bins)
		return c, nil
	}
	if totals == nil || totals.Count == nil {
		return nil, errors.New("release: a count mechanism without noisy counts needs a charged total (plan.TotalPlan)")
	}
	return c, nil
}

// draw writes one release of counts into out — for laplace-posterior also
// α̃ into alpha (nil otherwise) — and returns its intervals and total.
// grid is the release grid (0 for the additive mechanisms).
func (c *countDraw) draw(rng *mechanism.Rand, counts, out, alpha []float64, grid int64) (*Intervals, *Total, error) {
	low, high := make([]float64, len(counts)), make([]float64, len(counts))
	var tot interval.Total
	if c.base != nil {
		// The same draws as the mechanism's Release (ReleaseCounts, then
		// the projection or the posterior).
		if err := c.base.ReleaseCounts(rng, counts, c.noisy); err != nil {
			return nil, nil, err
		}
		if alpha != nil {
			post := c.cp.Mechanism.(*mechanism.CountPosterior)
			for i, v := range c.noisy {
				alpha[i] = post.Prior() + max(v, 0)
			}
			if err := mechanism.PosteriorMean(alpha, out); err != nil {
				return nil, nil, err
			}
		} else {
			mechanism.Project(c.noisy, out)
		}
		var err error
		if tot, err = interval.Additive(c.noisy, c.noise, c.level, low, high); err != nil {
			return nil, nil, err
		}
	} else {
		if err := c.cp.Mechanism.Release(rng, counts, out); err != nil {
			return nil, nil, err
		}
		n := 0.0
		for _, x := range counts {
			n += x
		}
		nt, err := c.totals.Count.NoisyCount(rng, n)
		if err != nil {
			return nil, nil, err
		}
		p, sigma := c.cp.Mechanism.Params(), c.totals.CountSigma()
		if err := interval.Dirichlet(out, grid, p.R, p.Alpha, nt, sigma, c.level, low, high); err != nil {
			return nil, nil, err
		}
		if tot, err = interval.Count(nt, sigma, c.level, math.Inf(1)); err != nil {
			return nil, nil, err
		}
	}
	return newIntervals(c.level, low, high), &Total{Estimate: tot.Estimate, Low: tot.Low, High: tot.High}, nil
}

// averageExtras draws an average release's total (kept users, with the
// plan's discrete Gaussian) and computes its intervals from the release
// out.
func averageExtras(rng *mechanism.Rand, ap *plan.AveragePlan, totals *plan.TotalPlan, level float64, kept int, out []float64) (*Intervals, *Total, error) {
	if totals == nil || totals.Average == nil {
		return nil, nil, errors.New("release: an average histogram needs a charged total (plan.TotalPlan)")
	}
	nt, err := totals.Average.NoisyCount(rng, float64(kept))
	if err != nil {
		return nil, nil, err
	}
	spec, sigma := ap.Mechanism.Spec(), totals.AverageSigma()
	low, high := make([]float64, len(out)), make([]float64, len(out))
	if err := interval.Average(out, mechanism.ReleaseGrid(len(out)), spec.K, spec.Eta, spec.Users, nt, sigma, level, low, high); err != nil {
		return nil, nil, err
	}
	tot, err := interval.Count(nt, sigma, level, float64(spec.Users))
	if err != nil {
		return nil, nil, err
	}
	return newIntervals(level, low, high), &Total{Estimate: tot.Estimate, Low: tot.Low, High: tot.High}, nil
}

// intervalDigits is the precision of the published interval ends: they
// are rounded outward to multiples of 10⁻⁶ (which only widens them), so
// messages stay short.
const intervalDigits = 1e6

func newIntervals(level float64, low, high []float64) *Intervals {
	for i := range low {
		low[i] = math.Max(math.Floor(low[i]*intervalDigits)/intervalDigits, 0)
		high[i] = math.Min(math.Ceil(high[i]*intervalDigits)/intervalDigits, 1)
	}
	return &Intervals{Level: level, Low: low, High: high}
}
