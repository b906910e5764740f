package plan_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/plan"
)

// TestTotalsArePlanned: which releases carry charged totals, and that the
// totals take privacy.total_share of the composed RDP at the calibration
// order — for every mechanism, with and without the cross-window bound,
// with and without an average histogram — while the whole period still
// fits (TestWindowBoundScheduleFitsTheBook, TestPlanComposesEachHistogramsWindows).
func TestTotalsArePlanned(t *testing.T) {
	for _, mc := range append(boundMechanisms, struct{ name, privacy string }{"laplace-posterior", "  mechanism: laplace-posterior"}) {
		for _, k := range []int{0, 5} {
			for _, avg := range []bool{true, false} {
				name := fmt.Sprintf("%s/K=%d/average=%v", mc.name, k, avg)
				cfg := boundConfig(t, k, "replace", mc.privacy+"\n  total_share: 0.2", 40)
				if !avg {
					cfg.Histograms = cfg.Histograms[:2]
				}
				p, err := plan.DerivePlan(cfg)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				dir := strings.Contains(mc.name, "dirichlet")
				tp := p.Totals
				if !dir && !avg {
					if tp != nil {
						t.Errorf("%s: totals planned, but the additive totals are free", name)
					}
					continue
				}
				if tp == nil || (tp.Count != nil) != dir || (tp.Average != nil) != avg {
					t.Fatalf("%s: totals %+v", name, tp)
				}
				if dir && tp.Sensitivity != p.Count.Sensitivity {
					t.Errorf("%s: totals' sensitivity %+v, the counts' %+v", name, tp.Sensitivity, p.Count.Sensitivity)
				}
				// The share at λ: totals vs everything composed in RDP.
				lambda := cfg.Privacy.Order
				var tot, all float64
				if dir {
					c, _ := tp.CountCharge.At(lambda)
					tot += float64(p.Count.Units) * c
				}
				if avg {
					c, _ := tp.AverageCharge.At(lambda)
					tot += float64(tp.AverageUnits) * c
					if c2 := lambda / (2 * tp.AverageSigma() * tp.AverageSigma()); math.Abs(c-c2) > 1e-12*c2 {
						t.Errorf("%s: average total curve %v at λ, want λ/(2σ²) = %v (Δ2² = 1)", name, c, c2)
					}
				}
				u, _ := p.Count.Charge.At(lambda)
				all = float64(p.Count.Units) * u
				if avg {
					c, _ := tp.AverageCharge.At(lambda)
					all += float64(tp.AverageUnits) * c
				}
				// The Dirichlet's per-unit charge also holds the grid
				// residual (≈ 6·10⁻⁵ per unit), outside the split.
				if got := tot / all; math.Abs(got-0.2) > 0.02 {
					t.Errorf("%s: the totals take %.4f of the RDP at λ, want privacy.total_share 0.2", name, got)
				}
				if k > 0 && avg {
					want := tp.AverageCharge.Scale(float64(p.HistBounds[2].AverageReleases))
					if got := p.AverageReserveCharge(&p.Averages[0]); !sameCurve(got.RDP, want) {
						t.Errorf("%s: the average reservation's curve is not its releases' totals", name)
					}
				}
			}
		}
	}
}

func sameCurve(a, b budget.Curve) bool {
	ae, be := a.Epsilons(), b.Epsilons()
	if len(ae) != len(be) || len(ae) == 0 {
		return false
	}
	for i := range ae {
		if ae[i] != be[i] {
			return false
		}
	}
	return true
}

// TestTotalShareTradesOff: a larger privacy.total_share gives the totals
// less noise and the Dirichlet histogram more (a larger α), at the same
// budget.
func TestTotalShareTradesOff(t *testing.T) {
	var lastSigma, lastAlpha float64
	for i, s := range []float64{0.02, 0.1, 0.3, 0.5} {
		cfg := boundConfig(t, 5, "replace", fmt.Sprintf("  mechanism: dirichlet\n  calibration: concentrated\n  total_share: %v", s), 1)
		p, err := plan.DerivePlan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		sigma, alpha := p.Totals.CountSigma(), p.Count.Mechanism.Params().Alpha
		if i > 0 && !(sigma < lastSigma && alpha > lastAlpha) {
			t.Errorf("share %v: σ_T %v (was %v), α %v (was %v)", s, sigma, lastSigma, alpha, lastAlpha)
		}
		lastSigma, lastAlpha = sigma, alpha
		t.Logf("total_share %v: σ_T %.4g, α %.4g", s, sigma, alpha)
	}
}

// TestTotalsExplicit: with privacy.rdp_epsilon a Dirichlet unit's target
// is split between its histogram and its totals, and the average totals
// are planned on their own.
func TestTotalsExplicit(t *testing.T) {
	cfg := boundConfig(t, 0, "replace", "  mechanism: dirichlet\n  rdp_epsilon: 0.01", 1000)
	p, err := plan.DerivePlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := p.Count.Mechanism.Spec().RDPEpsilon
	c, _ := p.Totals.CountCharge.At(cfg.Privacy.Order)
	if math.Abs(h-0.01*(1-config.DefaultTotalShare)) > 1e-15 || math.Abs(c-0.01*config.DefaultTotalShare) > 1e-9 {
		t.Errorf("histogram %v, totals %v; want %v and %v", h, c, 0.01*(1-config.DefaultTotalShare), 0.01*config.DefaultTotalShare)
	}
	if p.Totals.Average == nil {
		t.Error("no average totals")
	}
}
