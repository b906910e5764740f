package pipeline_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/plan"
)

// TestMidPeriodConfigChange (issue #15, item 2): the stage runs windows 0–4
// of a 10-window budget period under one config, stops, and runs windows 5–9
// of the same period under another. Whatever changed — an average histogram
// added or removed, the budget lowered, an average histogram recalibrated —
// the period's total, composed from every charge the ledger recorded (the
// RDP part converted at δ − Σδ_i plus the (ε, δ) part's Σε_i), stays within
// the budget the stage ran with last, and no release reports more spent.
// Before the budget book, each part was checked only against its own share
// of the current plan, so the (ε, δ) part spent on top of an RDP part
// already near the budget (and vice versa).
func TestMidPeriodConfigChange(t *testing.T) {
	t.Parallel()
	// Count histograms with privacy.rdp_epsilon fixed (rdp < 0: the largest
	// value whose plan fits all 10 count units of windows 0–4 in the
	// period, so that the first config spends its count share almost
	// entirely before the change).
	type mk func(h *e2e.Harness, rdp float64) *config.Config
	counts := func(eps float64) mk {
		return func(h *e2e.Harness, rdp float64) *config.Config {
			cfg := h.ConfigWith(fmt.Sprintf("mechanism: gaussian\n  rdp_epsilon: %g", rdp), eps)
			cfg.Privacy.Budget.Period = cfg.Window.Size * 10
			return cfg
		}
	}
	// The same with an average histogram (users as given, k = 1000).
	withAverage := func(eps float64, users int) mk {
		return func(h *e2e.Harness, rdp float64) *config.Config {
			cfg := h.ConfigExtra(fmt.Sprintf("mechanism: gaussian\n  rdp_epsilon: %g", rdp), eps, fmt.Sprintf(`  - name: interests
    kind: average
    field: interests
    bins: [news, sport, music]
    average:
      users: %d
      k: 1000
      eta: 0.01`, users))
			cfg.Privacy.Budget.Period = cfg.Window.Size * 10
			return cfg
		}
	}
	// fill returns the largest rdp_epsilon at which the plan of mk fits 10
	// count units per period: 5 windows × 2 count histograms.
	fill := func(h *e2e.Harness, m mk) float64 {
		lo, hi := 1e-4, 100.0
		for i := 0; i < 60; i++ {
			mid := math.Sqrt(lo * hi)
			p, err := plan.DerivePlan(m(h, mid))
			if err == nil && p.Count.FitUnits >= 10 {
				lo = mid
			} else {
				hi = mid
			}
		}
		return lo
	}
	tests := []struct {
		name          string
		before, after mk
	}{
		// Counts spend all of ε = 5 in windows 0–4; then an average
		// histogram appears with a reservation of its own.
		{name: "average added", before: counts(5), after: withAverage(5, 100000)},
		// Counts and averages share ε = 5; then the average goes, and the
		// counts' share becomes the whole budget.
		{name: "average removed", before: withAverage(5, 100000), after: counts(5)},
		// The budget is lowered from 5 to 3 mid-period.
		{name: "budget lowered", before: withAverage(5, 100000), after: withAverage(3, 100000)},
		// The budget is raised from 3 to 5 mid-period: the period keeps the
		// budget of its first charge (a raise takes effect next period).
		{name: "budget raised", before: withAverage(3, 100000), after: withAverage(5, 100000)},
		// The average histogram is recalibrated to cost less per release,
		// which shrinks its reservation and grows the counts' share.
		{name: "average recalibrated", before: withAverage(5, 100000), after: withAverage(5, 400000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := e2e.New(t)
			// Phase 1: windows 0–4 under the first config.
			rdp := fill(h, tc.before)
			cfgA := tc.before(h, rdp)
			h.ProduceEvents(e2e.Stream(5, 20))
			runA := h.Start(cfgA)
			h.Produce(e2e.Flush(e2e.Base.Add(5*time.Minute + time.Second)))
			want := unitsOf(cfgA, 5)
			waitRecorded(t, runA, want)
			runA.Stop(t)
			cfgB := tc.after(h, rdp)
			totalA, releasesA := periodTotal(t, h.Dir, cfgB)

			// Phase 2: windows 5–9 of the same period under the second.
			evs := e2e.Stream(10, 20)
			h.ProduceEvents(evs[len(e2e.Stream(5, 20)):])
			runB := h.Start(cfgB)
			h.Produce(e2e.Flush(e2e.Base.Add(10*time.Minute + time.Second)))
			waitRecorded(t, runB, want+unitsOf(cfgB, 5))
			runB.Stop(t)

			total, releases := periodTotal(t, h.Dir, cfgB)
			// The period's budget is the lower of the two configs' (a raise
			// waits for the next period).
			limit := math.Min(cfgA.Privacy.Budget.Epsilon, cfgB.Privacy.Budget.Epsilon)
			// What the first config released cannot be taken back: if it
			// is already over the new budget, the second must add nothing.
			if totalA.Epsilon > limit {
				if releases != releasesA {
					t.Errorf("the first config spent ε=%.6g, over the new budget %g, yet the second released %d more units (total now ε=%.6g)",
						totalA.Epsilon, limit, releases-releasesA, total.Epsilon)
				}
			} else if !(total.Epsilon <= limit) || total.Delta > cfgB.Privacy.Budget.Delta {
				t.Errorf("period total (ε=%.6g, δ=%.3g) over the budget (ε=%g, δ=%g): RDP part ε=%.6g at δ=%.3g, (ε, δ) part Σε=%.6g Σδ=%.3g",
					total.Epsilon, total.Delta, limit, cfgB.Privacy.Budget.Delta,
					total.RDPEpsilon, total.RDPDelta, total.ApproxEpsilon, total.ApproxDelta)
			}
			if releasesA == 0 {
				t.Errorf("nothing was released under the first config: the test checks nothing")
			}
			out := h.ReadOutput(0, 5*time.Second, time.Second)
			for id, vs := range out.Raw {
				for _, v := range vs[1:] {
					if v != vs[0] {
						t.Errorf("%s published with two different values:\n%s\n%s", id, vs[0], v)
					}
				}
			}
			for _, r := range out.Releases {
				// The period's budget is fixed by its first charge (config A)
				// and can only be lowered.
				if r.Privacy.SpentEpsilon > r.Privacy.BudgetEpsilon || r.Privacy.BudgetEpsilon > cfgA.Privacy.Budget.Epsilon {
					t.Errorf("release %s reports spent ε=%v of a budget %v (the first config's is %v)", r.ReleaseID, r.Privacy.SpentEpsilon, r.Privacy.BudgetEpsilon, cfgA.Privacy.Budget.Epsilon)
				}
			}
			t.Logf("period total ε=%.6g of %g (RDP %.6g at δ=%.3g + Σε %.6g), %.6g after the first config; %d units released (%d under the first config), %d budget_exhausted",
				total.Epsilon, cfgB.Privacy.Budget.Epsilon, total.RDPEpsilon, total.RDPDelta, total.ApproxEpsilon, totalA.Epsilon, releases, releasesA, len(out.Statuses))
		})
	}
}

// unitsOf is the number of (histogram, window) units n windows of cfg
// record.
func unitsOf(cfg *config.Config, n int) int { return n * len(cfg.Histograms) }

// waitRecorded waits until the stage has published n units (releases or
// budget_exhausted statuses).
func waitRecorded(t *testing.T, r *e2e.Running, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if published(r) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d units published within 60s", published(r), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// published counts the units the running stage reported as published.
func published(r *e2e.Running) int { return int(r.Units.Load()) }

// periodTotal recomposes, from the ledger alone, the total of the first
// budget period under cfg's budget: every released unit's charge — its RDP
// curve, or its (ε, δ) pair — composed as the budget book composes them.
func periodTotal(t *testing.T, dir string, cfg *config.Config) (budget.Total, int) {
	t.Helper()
	led, err := ledger.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	plan, err := plan.DerivePlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var charges []budget.Charge
	releases := 0
	err = led.Units(func(u *ledger.Unit) bool {
		if u.Status != ledger.StatusReleased || u.Period != e2e.Base.UnixMilli() {
			return true
		}
		releases++
		var c budget.Charge
		if u.Approx != nil {
			c.Epsilon, c.Delta = u.Approx.Epsilon, u.Approx.Delta
		} else {
			curve, err := budget.NewCurve(u.Charge.Orders, u.Charge.Epsilons)
			if err != nil {
				t.Fatalf("unit %s@%d: charge: %v", u.Histogram, u.WindowStart, err)
			}
			c.RDP = curve.Regrid(plan.Orders)
		}
		charges = append(charges, c)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	book, err := budget.NewBook(plan.Orders, cfg.Privacy.Budget.Epsilon, cfg.Privacy.Budget.Delta, emptyStore{})
	if err != nil {
		t.Fatal(err)
	}
	var total budget.Total
	for _, c := range charges {
		if total, err = book.Commit(0, c); err != nil {
			t.Fatal(err)
		}
	}
	return total, releases
}

type emptyStore struct{}

func (emptyStore) PeriodSpend(int64) (budget.Spend, bool, error) { return budget.Spend{}, false, nil }

// TestBudgetStatusAfterRestart (issue #16, item 3): right after a restart,
// before any window closes, the stage reports the period's spend the ledger
// holds (status, /api/budget and /metrics read it), not "nothing spent".
func TestBudgetStatusAfterRestart(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("concentrated", 20)
	h.ProduceEvents(e2e.Stream(3, 20))
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))
	waitRecorded(t, run, unitsOf(cfg, 3))
	var before []pipeline.BudgetStatus
	for _, b := range run.Stage.Budget() {
		if b.SpentEpsilon > 0 {
			before = append(before, b)
		}
	}
	run.Stop(t)
	if len(before) != 1 {
		t.Fatalf("before the restart: %d periods with a spend, want 1: %+v", len(before), run.Stage.Budget())
	}

	again := h.Start(cfg)
	deadline := time.Now().Add(20 * time.Second)
	for !again.Stage.Readiness().StateLoaded {
		if time.Now().After(deadline) {
			t.Fatal("state not loaded within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// No new window can close (no event after the flush), so whatever the
	// stage reports now comes from the ledger, not from a new release.
	got := again.Stage.Budget()
	if len(got) != 1 || got[0].PeriodStart != before[0].PeriodStart || got[0].SpentEpsilon != before[0].SpentEpsilon {
		t.Errorf("after the restart the stage reports %+v, want the ledger's %+v", got, before)
	}
}

// TestAddedHistogramStartsAfterTheLastWindow (from the review of issue #15):
// a histogram added by a config change across a restart gets its first
// release in the first window after the last recorded one — never a
// release of an already-recorded window computed from whatever events were
// still uncommitted (which depends on where other users' later events sit
// in the partitions). Its later releases are exact.
func TestAddedHistogramStartsAfterTheLastWindow(t *testing.T) {
	h := e2e.New(t)
	cfgA := h.Config("gaussian", 1e7)
	evs := e2e.Stream(4, 20)
	h.ProduceEvents(evs[:len(e2e.Stream(2, 20))])
	run := h.Start(cfgA)
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	waitRecorded(t, run, unitsOf(cfgA, 2))
	run.Stop(t)

	cfgB := h.ConfigExtra("mechanism: gaussian", 1e7, "  - name: devices2\n    field: device\n    bins: [mobile, desktop]")
	h.ProduceEvents(evs[len(e2e.Stream(2, 20)):])
	run = h.Start(cfgB)
	h.Produce(e2e.Flush(e2e.Base.Add(4*time.Minute + time.Second)))
	waitRecorded(t, run, unitsOf(cfgB, 2))
	out := h.ReadOutput(0, 5*time.Second, time.Second)
	// The first flush event (window 2) counts too.
	tr := e2e.ComputeTruth(append(evs, e2e.Event{User: "flush", At: e2e.Base.Add(2*time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"}))
	got := map[int]bool{}
	for _, r := range out.Releases {
		if r.Histogram != "devices2" {
			continue
		}
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		w := int(ws.Sub(e2e.Base) / time.Minute)
		got[w] = true
		if w < 2 {
			t.Errorf("devices2 released for window %d, recorded before it was configured: %v", w, r.Probabilities)
			continue
		}
		want := tr[e2e.Key("devices", "*", ws)]
		n := want[0] + want[1]
		for i, p := range r.Probabilities {
			if math.Abs(p-want[i]/n) > 1e-6 {
				t.Errorf("devices2@%d: %v, want the exact shares of %v", w, r.Probabilities, want)
				break
			}
		}
	}
	if !got[2] || !got[3] {
		t.Errorf("devices2 releases for windows %v, want 2 and 3", got)
	}
}
