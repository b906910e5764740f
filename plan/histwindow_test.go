package plan_test

import (
	"fmt"
	"testing"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/plan"
)

// histWindowConfig: 1-minute base windows, a 1-hour period (60 base
// windows), count histograms with windows of 1m, 3m and 1h and an average
// histogram with 5m windows.
func histWindowConfig(t *testing.T, mech string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1m, start: 2026-01-01T00:00:00Z}
histograms:
  - {name: minute, field: page, bins: [a, b, c]}
  - {name: three, field: page, bins: [a, b, c], window: 3m}
  - {name: hour, field: page, bins: [a, b, c], window: 1h}
  - name: interests
    kind: average
    field: interests
    bins: [news, sport, music]
    window: 5m
    average: {users: 100000, k: 1000, eta: 0.01}
privacy:
  mechanism: %s
  neighbour: replace
  budget: {epsilon: 20, delta: 1.0e-6, period: 1h}
state: {dir: %q}
`, mech, t.TempDir())
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestPlanComposesEachHistogramsWindows: the plan composes each histogram's
// own number of units per period (W_h = period / window_h: 60 + 20 + 1
// count units, 12 average releases), and the period's schedule — base
// boundary by base boundary, the histograms whose windows end there in
// config order, as the releaser records them — recomposes exactly within
// (ε, δ) in the budget book: every planned charge is accepted, the period's
// total is within the budget, and one more charge of either kind is refused
// (the plan spread the budget over exactly these units, not over W·H).
func TestPlanComposesEachHistogramsWindows(t *testing.T) {
	for _, mech := range []string{"gaussian", "dirichlet", "laplace"} {
		t.Run(mech, func(t *testing.T) {
			cfg := histWindowConfig(t, mech)
			pl, err := plan.DerivePlan(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if pl.WindowsPerPeriod != 60 || pl.Count.Units != 60+20+1 || len(pl.Averages) != 1 || pl.Averages[0].Windows != 12 {
				t.Fatalf("windows %d, count units %d, averages %+v; want 60, 81, one with 12 windows", pl.WindowsPerPeriod, pl.Count.Units, pl.Averages)
			}
			if got := pl.Charges(); got != 81+12 {
				t.Fatalf("charges per period %d, want 93", got)
			}
			book, err := budget.NewBook(pl.Orders, pl.Epsilon, pl.Delta, noStore{})
			if err != nil {
				t.Fatal(err)
			}
			count := budget.Charge{RDP: pl.Count.Charge}
			avg := pl.AverageCharge(&pl.Averages[0]) // its (ε, δ) and its total's curve
			sizes := []int{1, 3, 60, 5}              // base windows per window, config order
			n := 0
			for b := 1; b <= pl.WindowsPerPeriod; b++ {
				for h, r := range sizes {
					if b%r != 0 {
						continue
					}
					c := count
					if h == 3 {
						c = avg
					}
					if _, err := book.Check(0, c); err != nil {
						t.Fatalf("boundary %d, histogram %d: a planned charge was refused: %v", b, h, err)
					}
					if _, err := book.Commit(0, c); err != nil {
						t.Fatal(err)
					}
					n++
				}
			}
			if n != pl.Charges() {
				t.Fatalf("schedule made %d charges, plan says %d", n, pl.Charges())
			}
			st, err := book.Status(0)
			if err != nil {
				t.Fatal(err)
			}
			if !(st.Epsilon <= pl.Epsilon) {
				t.Fatalf("period total ε=%v over the budget %v", st.Epsilon, pl.Epsilon)
			}
			for _, c := range []budget.Charge{count, avg} {
				if _, err := book.Check(0, c); err == nil {
					t.Errorf("a charge beyond the plan was accepted (total ε=%v of %v)", st.Epsilon, pl.Epsilon)
				}
			}
			t.Logf("%s: ε=%v of %v after %d charges", mech, st.Epsilon, pl.Epsilon, n)
		})
	}
}

// TestHistWindowsRefused: a window that is not a multiple of window.size or
// does not divide the period is refused by the planner too (a config built
// in Go skips validation).
func TestHistWindowsRefused(t *testing.T) {
	for _, w := range []config.Duration{config.Duration(90e9), config.Duration(7 * 60e9), config.Duration(2 * 3600e9)} {
		cfg := histWindowConfig(t, "gaussian")
		cfg.Histograms[1].Window = w
		if _, err := plan.DerivePlan(cfg); err == nil {
			t.Errorf("window %s accepted", w)
		}
	}
}
