package pipeline_test

import (
	"testing"
	"time"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger"
)

// TestBudgetCutCoveredEndToEnd (issue #21, item 2), the review's probe
// through the whole stage: 2 count histograms, 5 one-minute windows per
// period, max_windows_per_user 2 and a fixed privacy.rdp_epsilon. Window 0
// is released under a budget that holds both period reservations; the
// stage is restarted with the budget cut below what the period has spent
// (the reservations' keys unchanged). Windows 1–4 are covered by the
// reservations and must all be budget_exhausted — published as statuses,
// recorded as such — not released.
func TestBudgetCutCoveredEndToEnd(t *testing.T) {
	h := e2e.New(t)
	cfg := h.ConfigWith("mechanism: gaussian\n  rdp_epsilon: 0.03", 10)
	cfg.Privacy.Budget.Period = cfg.Window.Size * 5
	cfg.Contribution.MaxWindowsPerUser = 2
	cfg.Contribution.MaxTrackedUsers = 0
	evs := e2e.Stream(5, 20)
	first := len(e2e.Stream(1, 20))
	h.ProduceEvents(evs[:first])
	runA := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(time.Minute + time.Second)))
	waitRecorded(t, runA, unitsOf(cfg, 1))
	runA.Stop(t)
	spent, released := periodTotal(t, h.Dir, cfg)
	if released != unitsOf(cfg, 1) || !(spent.Epsilon > 0) {
		t.Fatalf("window 0: %d units released, period ε %v", released, spent.Epsilon)
	}

	cut := *cfg
	cut.Privacy.Budget.Epsilon = 0.8 * spent.Epsilon
	h.ProduceEvents(evs[first:])
	runB := h.Start(&cut)
	h.Produce(e2e.Flush(e2e.Base.Add(5*time.Minute + time.Second)))
	// The units of window 0 are handed to OnRelease again at the start.
	waitRecorded(t, runB, unitsOf(cfg, 1)+unitsOf(cfg, 4))
	runB.Stop(t)

	led, err := ledger.Open(h.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	exhausted := 0
	err = led.Units(func(u *ledger.Unit) bool {
		if u.WindowStart == e2e.Base.UnixMilli() {
			return true
		}
		if u.Status != ledger.StatusBudgetExhausted {
			t.Errorf("%s@%d after the cut: %s (covered by %q), want budget_exhausted", u.Histogram, u.WindowStart, u.Status, u.CoveredBy)
		} else {
			exhausted++
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if exhausted != unitsOf(cfg, 4) {
		t.Errorf("%d budget_exhausted units after the cut, want %d", exhausted, unitsOf(cfg, 4))
	}
	out := h.ReadOutput(0, 5*time.Second, time.Second)
	for _, r := range out.Releases {
		if r.WindowStart != e2e.Base.UTC().Format(time.RFC3339) {
			t.Errorf("released after the cut: %s (spent ε %v of %v)", r.ReleaseID, r.Privacy.SpentEpsilon, r.Privacy.BudgetEpsilon)
		}
	}
	if len(out.Statuses) != unitsOf(cfg, 4) {
		t.Errorf("%d budget_exhausted statuses published, want %d", len(out.Statuses), unitsOf(cfg, 4))
	}
}
