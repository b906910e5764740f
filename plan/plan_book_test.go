package plan_test

import (
	"fmt"
	"testing"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/plan"
)

// planConfig is a broker-less config: 1 s windows, a 1-day period (86,400
// windows), one count histogram and one average histogram.
func planConfig(t *testing.T, eps float64) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1s, start: 2026-01-01T00:00:00Z}
histograms:
  - {name: pages, field: page, bins: [a, b, c]}
  - name: interests
    kind: average
    field: interests
    bins: [news, sport, music]
    average: {users: 1000000, k: 1000, eta: 0.01}
privacy:
  mechanism: gaussian
  neighbour: replace
  budget: {epsilon: %v, delta: 1.0e-6, period: 24h}
state: {dir: %q}
`, eps, t.TempDir())
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

type noStore struct{}

func (noStore) PeriodSpend(int64) (budget.Spend, bool, error) { return budget.Spend{}, false, nil }

// A planned period — every count and average charge of 86,400 windows,
// interleaved as the stage makes them — is accepted by the budget book to
// its last charge, also when the average histograms take 99.9% of ε (where
// a reservation computed as W·ε_r, not as the book's sequential rounded-up
// sum, left the last count release refused). The next charge is refused.
func TestPlannedScheduleFitsTheBook(t *testing.T) {
	probe, err := plan.DerivePlan(planConfig(t, 1e6))
	if err != nil {
		t.Fatal(err)
	}
	er := probe.Averages[0].Epsilon
	for _, share := range []float64{0.5, 0.999} {
		cfg := planConfig(t, float64(probe.WindowsPerPeriod)*er/share)
		pl, err := plan.DerivePlan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		book, err := budget.NewBook(pl.Orders, pl.Epsilon, pl.Delta, noStore{})
		if err != nil {
			t.Fatal(err)
		}
		count := budget.Charge{RDP: pl.Count.Charge}
		avg := pl.AverageCharge(&pl.Averages[0]) // its (ε, δ) and its total's curve
		for w := 0; w < pl.WindowsPerPeriod; w++ {
			for _, c := range []budget.Charge{count, avg} {
				if _, err := book.Check(0, c); err != nil {
					t.Fatalf("share %v: window %d of %d: a planned charge was refused: %v", share, w, pl.WindowsPerPeriod, err)
				}
				if _, err := book.Commit(0, c); err != nil {
					t.Fatal(err)
				}
			}
		}
		st, _ := book.Status(0)
		if !(st.Epsilon <= pl.Epsilon) {
			t.Errorf("share %v: planned total ε=%v over the budget %v", share, st.Epsilon, pl.Epsilon)
		}
		for _, c := range []budget.Charge{count, avg} {
			if _, err := book.Check(0, c); err == nil {
				t.Errorf("share %v: a charge beyond the plan was accepted", share)
			}
		}
		t.Logf("share %v: ε=%v of %v after %d windows", share, st.Epsilon, pl.Epsilon, pl.WindowsPerPeriod)
	}
}
