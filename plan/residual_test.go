package plan_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/plan"
)

// residualConfig is issue #21's table: two count histograms (5 and 4 bins),
// replace, (ε, δ) = (1, 10⁻⁶) per day, windows of size, K =
// max_windows_per_user, and the privacy lines given.
func residualConfig(t *testing.T, size string, k int, privacy string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"]}
window: {size: %s}
histograms:
  - {name: pages, field: page, bins: [home, search, cart, checkout, other], overflow_bin: other, group_by: country, groups: [US, DE, FR]}
  - {name: countries, field: country, bins: [US, DE, FR, other], overflow_bin: other}
contribution: {max_events_per_user: 1, max_windows_per_user: %d}
privacy:
%s
  neighbour: replace
  order: 2
  budget: {epsilon: 1, delta: 1.0e-6, period: 24h}
`, size, k, privacy)
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestPlanChargesGridResidual (issue #21 item 1): the planner calibrates
// with the release grid's residual in every unit's charge, so
//   - the defaults (1-minute windows, K = 0, 2880 units a day) still fit
//     ε = 1, but with more noise: the same calibration without the residual
//     composes to clearly less than 1 (before: exactly 1, and 1.118 with
//     the residual);
//   - 5-second windows with K = 0 (34,560 units) cannot fit at all: the
//     residual alone composes to ε ≈ 1.39 (before: planned, 2.415 with it);
//   - the quickstart's K = 5 still fits with almost the same noise.
func TestPlanChargesGridResidual(t *testing.T) {
	conc := "  mechanism: dirichlet\n  calibration: concentrated"
	opt := "  mechanism: dirichlet\n  calibration: optimal\n  expected_events_per_release: 1500"

	if _, err := plan.DerivePlan(residualConfig(t, "5s", 0, opt)); !errors.Is(err, budget.ErrInfeasible) {
		t.Errorf("5 s windows, K = 0: err %v, want infeasible (the residual of 34,560 releases alone exceeds ε = 1)", err)
	}

	for _, tc := range []struct {
		name, size, privacy string
		k                   int
		idealBelow          float64 // the calibration's ideal composition is below this
	}{
		{"defaults", "1m", conc, 0, 0.95},
		{"quickstart", "5s", opt, 5, 0.99999},
	} {
		p, err := plan.DerivePlan(residualConfig(t, tc.size, tc.k, tc.privacy))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		cp := p.Count
		orders := cp.Charge.Orders()
		ideal := budget.CurveOf(cp.Mechanism, orders).Add(p.Totals.CountCharge) // the histogram's and its totals' (exact samplers: no residual)
		for i, pt := range cp.Charge.Points() {
			c := ideal.Points()[i].Epsilon
			if math.IsInf(c, 1) {
				continue
			}
			if want := c + gridResidual(pt.Order, 2); pt.Epsilon < want*(1-1e-15) || pt.Epsilon > want*(1+1e-11) {
				t.Errorf("%s: charge at λ=%v is %.15g, want curve %.15g + e_2(λ) = %.15g", tc.name, pt.Order, pt.Epsilon, c, want)
			}
		}
		units := float64(cp.Units)
		charged, _ := budget.ToEpsilon(cp.Charge.Scale(units), cp.RDPDelta)
		idealEps, _ := budget.ToEpsilon(ideal.Scale(units), cp.RDPDelta)
		if charged > 1 || !(idealEps < tc.idealBelow) {
			t.Errorf("%s: %v units charge ε = %.6g (want ≤ 1), the calibration without the residual ε = %.6g (want < %v)",
				tc.name, units, charged, idealEps, tc.idealBelow)
		}
		t.Logf("%s: %v units, charged ε = %.6g, without the residual ε = %.6g, α = %.6g, r = %.6g",
			tc.name, units, charged, idealEps, cp.Mechanism.Params().Alpha, cp.Mechanism.Params().R)
	}
}

// TestAverageChargesGridResidual: an average histogram's release is charged
// (ε + d·log((1+ρ)/(1−ρ)), δ·(1+ρ)^d), d its bins (issue #21: "ε + 2dρ").
func TestAverageChargesGridResidual(t *testing.T) {
	p, err := plan.DerivePlan(boundConfig(t, 5, "replace", "  mechanism: gaussian", 5))
	if err != nil {
		t.Fatal(err)
	}
	a := p.Averages[0]
	ie, id := a.Mechanism.DP()
	const rho, d = 1e-5, 3
	wantE := ie + d*(math.Log1p(rho)-math.Log1p(-rho))
	wantD := id * math.Pow(1+rho, d)
	if a.Epsilon < wantE || a.Epsilon > wantE+1e-12 || a.Delta < wantD || a.Delta > wantD*(1+1e-11) {
		t.Errorf("average charge (%.15g, %.6g), want (ε_r + 2dρ…, δ_r·(1+ρ)^d) = (%.15g, %.6g)", a.Epsilon, a.Delta, wantE, wantD)
	}
	if a.IdealEpsilon != ie || a.IdealDelta != id {
		t.Errorf("ideal (%v, %v), want the mechanism's (%v, %v)", a.IdealEpsilon, a.IdealDelta, ie, id)
	}
	// The period's reservation for the averages adds the charged values.
	if want := float64(p.Bound.AverageReleases) * a.Epsilon; math.Abs(p.ApproxEpsilon-want) > 1e-9*want {
		t.Errorf("ApproxEpsilon %v, want %d × %v", p.ApproxEpsilon, p.Bound.AverageReleases, a.Epsilon)
	}
}
