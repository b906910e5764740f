package release_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/release"
)

// TestBudgetCutCoveredUnits is the review's probe (issue #21, item 2): 2
// count histograms, 5 one-minute windows per period, K = 2 and a fixed
// privacy.rdp_epsilon, so that a change of privacy.budget leaves the
// per-unit curve — and the reservation keys — unchanged. Window 0 is
// released under a budget that holds both reservations; then the budget is
// cut below what the period has spent (a restart with the new config).
// Every later unit of the period is covered by a reservation already held,
// and must still be checked against the period's current limit: budget_
// exhausted, visibly (OnExhausted, a status message stating the cut
// budget), nothing charged. A cut of δ alone does the same. Raising the
// budget back in the same period does not lift the cut (a raised budget
// takes effect from the next period); the next period releases again.
func TestBudgetCutCoveredUnits(t *testing.T) {
	period := int64(29_000_000) * minute
	for _, tc := range []struct {
		name string
		cut  func(spentEpsilon float64) (epsilon, delta float64)
	}{
		{"epsilon", func(spent float64) (float64, float64) { return 0.8 * spent, 1e-6 }},
		{"delta", func(float64) (float64, float64) { return 2, 1e-12 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "  rdp_epsilon: 0.03\n")
			cfg.Contribution.MaxWindowsPerUser = 2
			cfg.Contribution.MaxTrackedUsers = 0
			cfg.Privacy.Budget.Epsilon = 2
			f := newFixture(t, cfg)
			for _, u := range f.window(t, period, oneEvent) {
				if u.Status != ledger.StatusReleased || u.Reservation == "" {
					t.Fatalf("window 0 %s: %s reservation %q; want the reservation charged", u.Histogram, u.Status, u.Reservation)
				}
			}
			spent, err := f.rel.Book().Status(period)
			if err != nil {
				t.Fatal(err)
			}
			if !(spent.Epsilon > 1 && spent.Epsilon <= 2) {
				t.Fatalf("period spend ε %v after window 0; the probe needs it in (1, 2]", spent.Epsilon)
			}
			before := spentCurve(t, f.led, period)

			// The cut: same rdp_epsilon, so the same per-unit curve and keys.
			cut := *cfg
			cut.Privacy.Budget.Epsilon, cut.Privacy.Budget.Delta = tc.cut(spent.Epsilon)
			g := reopen(t, &fixture{cfg: &cut, led: f.led, agg: f.agg, dec: f.dec}, nil)
			if tot, err := g.rel.Book().Status(period); err != nil || tot.Epsilon <= tot.LimitEpsilon {
				t.Fatalf("after the cut: period total ε %v of %v (%v); the probe needs it above", tot.Epsilon, tot.LimitEpsilon, err)
			}
			for k := int64(1); k < 3; k++ {
				for _, u := range g.window(t, period+k*minute, oneEvent) {
					if u.Status != ledger.StatusBudgetExhausted || u.CoveredBy != "" || len(u.Charge.Epsilons) != 0 {
						t.Errorf("window %d %s after the cut: %s covered by %q; want budget_exhausted", k, u.Histogram, u.Status, u.CoveredBy)
						continue
					}
					var st release.Status
					if err := json.Unmarshal(u.Messages[0].Value, &st); err != nil {
						t.Fatal(err)
					}
					if st.Privacy.BudgetEpsilon != cut.Privacy.Budget.Epsilon || st.Privacy.Delta != cut.Privacy.Budget.Delta {
						t.Errorf("window %d %s: status states budget (%v, %v), want the cut (%v, %v)", k, u.Histogram,
							st.Privacy.BudgetEpsilon, st.Privacy.Delta, cut.Privacy.Budget.Epsilon, cut.Privacy.Budget.Delta)
					}
				}
			}
			if g.exh != 4 {
				t.Errorf("OnExhausted %d times after the cut, want 4", g.exh)
			}

			// The budget raised back in the same period: still exhausted.
			h := reopen(t, &fixture{cfg: cfg, led: f.led, agg: f.agg, dec: f.dec}, nil)
			for k := int64(3); k < 5; k++ {
				for _, u := range h.window(t, period+k*minute, oneEvent) {
					if u.Status != ledger.StatusBudgetExhausted {
						t.Errorf("window %d %s after raising the budget back: %s; want budget_exhausted until the period ends", k, u.Histogram, u.Status)
					}
				}
			}
			if after := spentCurve(t, f.led, period); fmt.Sprint(after.Epsilons()) != fmt.Sprint(before.Epsilons()) {
				t.Errorf("period spend changed: %v → %v", before.Epsilons(), after.Epsilons())
			}
			// The next period starts over under the raised budget.
			for _, u := range h.window(t, period+5*minute, oneEvent) {
				if u.Status != ledger.StatusReleased || u.Reservation == "" {
					t.Errorf("next period %s: %s reservation %q; want released", u.Histogram, u.Status, u.Reservation)
				}
			}
		})
	}
}
