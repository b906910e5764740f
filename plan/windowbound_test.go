package plan_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
)

// boundConfig is a broker-less config with the cross-window bound k: 1m
// windows, a 1-day period (1,440 windows), two count histograms and one
// average histogram; privacy holds the mechanism lines.
func boundConfig(t *testing.T, k int, neighbour, privacy string, eps float64) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1m, start: 2026-01-01T00:00:00Z}
histograms:
  - {name: pages, field: page, bins: [a, b, c, d, e], group_by: country, groups: [x, y, z]}
  - {name: devices, field: device, bins: [m, d]}
  - name: interests
    kind: average
    field: interests
    bins: [news, sport, music]
    average: {users: 1000000, k: 1000, eta: 0.01}
contribution: {max_windows_per_user: %d}
privacy:
%s
  neighbour: %s
  budget: {epsilon: %v, delta: 1.0e-6, period: 24h}
state: {dir: %q}
`, k, privacy, neighbour, eps, t.TempDir())
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var boundMechanisms = []struct{ name, privacy string }{
	{"gaussian", "  mechanism: gaussian"},
	{"dirichlet concentrated", "  mechanism: dirichlet\n  calibration: concentrated"},
	{"dirichlet exact", "  mechanism: dirichlet\n  calibration: exact"},
	{"dirichlet optimal", "  mechanism: dirichlet\n  calibration: optimal\n  expected_events_per_release: 10000"},
	{"laplace", "  mechanism: laplace"},
}

// TestWindowBoundScheduleFitsTheBook: with max_windows_per_user = 5 a
// day's plan charges one period reservation per histogram — the count
// histograms' 5 windows of the per-window curve, the average histogram's 5
// (add_remove) or 10 (replace) releases — and the budget book accepts all
// of them; a further reservation is refused. The period's total is
// recomposed from scratch — every count histogram's 5 per-window curves
// (the mechanism's own RDP, and for the Gaussian the closed form
// max(c_r, 2c_a) = λ·2m²/(2σ²) from the released σ) — and converted at the
// δ the average releases leave: within the budget.
func TestWindowBoundScheduleFitsTheBook(t *testing.T) {
	const k = 5
	for _, nb := range []string{"replace", "add_remove"} {
		for _, mc := range boundMechanisms {
			t.Run(nb+"/"+mc.name, func(t *testing.T) {
				cfg := boundConfig(t, k, nb, mc.privacy, 1)
				p, err := plan.DerivePlan(cfg)
				if err != nil {
					t.Fatal(err)
				}
				avgN := k
				if nb == "replace" {
					avgN = 2 * k
				}
				if p.Bound != (plan.WindowBound{K: k, Windows: 1440, CountWindows: k, AverageReleases: avgN}) || p.Count.Units != 2*k || p.Charges() != 3 {
					t.Fatalf("bound %+v units %d charges %d", p.Bound, p.Count.Units, p.Charges())
				}
				book, err := budget.NewBook(p.Orders, p.Epsilon, p.Delta, noStore{})
				if err != nil {
					t.Fatal(err)
				}
				a := p.Averages[0]
				charges := []budget.Charge{
					{RDP: p.Count.ReservationOf(0), Reservation: "pages"},
					{RDP: p.Count.ReservationOf(1), Reservation: "devices"},
					p.AverageReserveCharge(&a), // its (ε, δ) and its totals' curve
				}
				charges[2].Reservation = "interests"
				for _, c := range charges {
					if _, err := book.Check(0, c); err != nil {
						t.Fatalf("reservation %s refused: %v", c.Reservation, err)
					}
					if _, err := book.Commit(0, c); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := book.Check(0, budget.Charge{RDP: p.Count.ReservationOf(0), Reservation: "third"}); !errors.Is(err, budget.ErrBudgetExceeded) {
					t.Errorf("a third count reservation: %v, want refused", err)
				}
				if !(a.ReserveEpsilon >= float64(avgN)*a.Epsilon && a.ReserveDelta >= float64(avgN)*a.Delta) {
					t.Errorf("average reservation (%v, %v) below %d × (%v, %v)", a.ReserveEpsilon, a.ReserveDelta, avgN, a.Epsilon, a.Delta)
				}
				st, _ := book.Status(0)

				// Recomposition from the mechanism.
				m := p.Count.Mechanism
				per := budget.CurveOf(m, p.Orders)
				if pr := m.Params(); pr.Sigma > 0 {
					eps := make([]float64, len(p.Orders))
					for i, o := range p.Orders {
						c := o * float64(cfg.Contribution.MaxEventsPerUser*cfg.Contribution.MaxEventsPerUser) / (2 * pr.Sigma * pr.Sigma)
						if nb == "replace" {
							c *= 2 // max(c_r, 2c_a), both 2·c_a
						}
						eps[i] = c
					}
					if per, err = budget.NewCurve(p.Orders, eps); err != nil {
						t.Fatal(err)
					}
				}
				// The totals (totals.go), from their σ_T: each count unit's
				// group totals λ·Δ2²/(2σ²) with the count vector's Δ2² (m² or
				// 2m²), only under dirichlet (the additive totals are free);
				// the average histogram's avgN kept-user counts λ/(2σ²).
				m2 := float64(cfg.Contribution.MaxEventsPerUser * cfg.Contribution.MaxEventsPerUser)
				if nb == "replace" {
					m2 *= 2
				}
				gauss := func(l2sq, sigma float64) budget.Curve {
					eps := make([]float64, len(p.Orders))
					for i, o := range p.Orders {
						eps[i] = o * l2sq / (2 * sigma * sigma)
					}
					c, err := budget.NewCurve(p.Orders, eps)
					if err != nil {
						t.Fatal(err)
					}
					return c
				}
				if s := p.Totals.CountSigma(); s > 0 {
					per = per.Add(gauss(m2, s))
				} else if cfg.Privacy.Mechanism == "dirichlet" {
					t.Fatal("dirichlet units without charged totals")
				}
				total := gauss(float64(avgN), p.Totals.AverageSigma())
				for i := 0; i < 2*k; i++ {
					total = total.Add(per)
				}
				rdp, _ := budget.ToEpsilon(total, p.Delta-st.ApproxDelta)
				if e := rdp + st.ApproxEpsilon; !(e <= p.Epsilon) {
					t.Errorf("recomposed period ε %v (rdp %v + approx %v) over the budget %v", e, rdp, st.ApproxEpsilon, p.Epsilon)
				}
				if !(st.Epsilon <= p.Epsilon) {
					t.Errorf("book total ε %v over the budget %v", st.Epsilon, p.Epsilon)
				}
				t.Logf("ε %.6g of %g (rdp per release %.4g at λ=%g, params %+v)", st.Epsilon, p.Epsilon, m.Spec().RDPEpsilon, m.Spec().Order, m.Params())
			})
		}
	}
}

// TestWindowBoundCounts pins what a period composes with the bound: min(K,
// W) windows per count histogram, min(K, W) (add_remove) or min(2K, W)
// (replace) average releases, and without the bound every window.
func TestWindowBoundCounts(t *testing.T) {
	for _, tc := range []struct {
		k         int
		neighbour string
		count     int
		avg       int
		charges   int
	}{
		{0, "replace", 0, 0, 3 * 1440},
		{5, "replace", 5, 10, 3},
		{5, "add_remove", 5, 5, 3},
		{1000, "replace", 1000, 1440, 3},
		{1000, "add_remove", 1000, 1000, 3},
		{5000, "replace", 1440, 1440, 3},
	} {
		p, err := plan.DerivePlan(boundConfig(t, tc.k, tc.neighbour, boundMechanisms[0].privacy, 100))
		if err != nil {
			t.Fatal(err)
		}
		if p.Bound.CountWindows != tc.count || p.Bound.AverageReleases != tc.avg || p.Charges() != tc.charges {
			t.Errorf("K=%d %s: bound %+v charges %d; want %d windows, %d average releases, %d charges", tc.k, tc.neighbour, p.Bound, p.Charges(), tc.count, tc.avg, tc.charges)
		}
		units := 2 * 1440
		if tc.k > 0 {
			units = 2 * tc.count
		}
		if p.Count.Units != units {
			t.Errorf("K=%d: %d units, want %d", tc.k, p.Count.Units, units)
		}
		if (tc.k > 0) != (p.Count.ReservationOf(1).Len() > 0) || (tc.k > 0) != (p.Averages[0].ReserveEpsilon > 0) {
			t.Errorf("K=%d: reservation %v, average reservation %v", tc.k, p.Count.ReservationOf(1), p.Averages[0].ReserveEpsilon)
		}
	}
}

// TestWindowBoundExactChargesTheLargerCurve: under replace the exact
// calibration's per-window curve under replace, c_r = h₊ + h₋, is below
// max(c_r, 2c_a) = 2·max(h₊, h₋) (a user's two versions admitted to
// disjoint windows make 2K add/remove-shaped changes), so with the bound
// the plan charges and calibrates the latter: at λ = 2, unit
// contributions, h₊ = log((α+1)/α), h₋ = log(α/(α−1)) (mechanism/exact.go),
// the charge at λ = 2 is 2·log(α/(α−1)) — not log((α+1)/(α−1)), what the
// same α costs one window under replace. Without the bound the plan
// charges c_r.
func TestWindowBoundExactChargesTheLargerCurve(t *testing.T) {
	priv := "  mechanism: dirichlet\n  calibration: exact\n  order: 2"
	for _, tc := range []struct {
		k   int
		eps float64
	}{{0, 100}, {5, 3}} {
		k := tc.k
		p, err := plan.DerivePlan(boundConfig(t, k, "replace", priv, tc.eps))
		if err != nil {
			t.Fatal(err)
		}
		alpha := p.Count.Mechanism.Params().Alpha
		cr := math.Log((alpha + 1) / (alpha - 1))
		ca2 := 2 * math.Log(alpha/(alpha-1))
		got, _ := p.Count.Charge.At(2)
		want := cr
		if k > 0 {
			want = ca2
		}
		want += gridResidual(2, 2) // issue #21 item 1: k = Δ1 = 2 changed coordinates
		tot, _ := p.Totals.CountCharge.At(2)
		want += tot // the unit's totals (Gaussian: c_r = 2c_a)
		if math.Abs(got-want) > 1e-9*want {
			t.Errorf("K=%d: charge at λ=2 %v, want %v (c_r %v, 2c_a %v, α %v)", k, got, want, cr, ca2, alpha)
		}
		if k > 0 && p.Count.Mechanism.Spec().Neighbour != mechanism.AnyNeighbour {
			t.Errorf("K=%d: spec neighbour %q, want the any-pair relation", k, p.Count.Mechanism.Spec().Neighbour)
		}
		t.Logf("K=%d: α=%.6g, charge at λ=2 %.6g (c_r %.6g, 2c_a %.6g)", k, alpha, got, cr, ca2)
	}
}
