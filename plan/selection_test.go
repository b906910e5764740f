package plan_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/selection"
)

// selectingConfig is boundConfig with the pages histogram's groups
// unlisted: its groups are selected privately.
func selectingConfig(t *testing.T, k int, neighbour, privacy string) *config.Config {
	t.Helper()
	cfg := boundConfig(t, k, neighbour, privacy, 2)
	cfg.Histograms[0].Groups = nil
	if k == 0 { // without the bound the average histogram's 1,440 releases a day take more than ε = 2
		cfg.Histograms = cfg.Histograms[:2]
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestSelectionPlanFitsTheBudget: the selections get their shares of what
// the average histograms leave, their calibrated guarantee is within
// them, the count histograms' RDP part is the rest, and the three parts
// add up to at most the period's budget — under both relations, with and
// without the cross-window bound. The period composed is the selecting
// histogram's windows (K′ for the curve; K′ or min(2K, W) for δ).
func TestSelectionPlanFitsTheBudget(t *testing.T) {
	for _, tc := range []struct {
		k         int
		neighbour string
	}{{0, "add_remove"}, {5, "add_remove"}, {5, "replace"}, {0, "replace"}} {
		cfg := selectingConfig(t, tc.k, tc.neighbour, "  mechanism: gaussian")
		p, err := plan.DerivePlan(cfg)
		if err != nil {
			t.Fatalf("K=%d %s: %v", tc.k, tc.neighbour, err)
		}
		sp := p.Selection
		if sp == nil || len(sp.Hists) != 1 || sp.Hists[0] != 0 {
			t.Fatalf("K=%d %s: selection plan %+v", tc.k, tc.neighbour, sp)
		}
		leftE, leftD := p.Epsilon-p.ApproxEpsilon, p.Delta-p.ApproxDelta
		if math.Abs(sp.Epsilon-0.25*leftE) > 1e-12 || math.Abs(sp.Delta-0.5*leftD) > 1e-18 {
			t.Errorf("K=%d %s: selection budget (%g, %g), want shares of (%g, %g)", tc.k, tc.neighbour, sp.Epsilon, sp.Delta, leftE, leftD)
		}
		g := sp.Selection.Guarantee
		if g.Epsilon > sp.Epsilon || g.Delta() > sp.Delta {
			t.Errorf("K=%d %s: guarantee (%g, %g) exceeds (%g, %g)", tc.k, tc.neighbour, g.Epsilon, g.Delta(), sp.Epsilon, sp.Delta)
		}
		// The guarantee recomputed from the curve the plan states.
		if e, _ := budget.ToEpsilon(sp.Selection.Curve, g.ConversionDelta); e > sp.Epsilon {
			t.Errorf("K=%d %s: the curve converts to ε=%g > %g", tc.k, tc.neighbour, e, sp.Epsilon)
		}
		// With the tracked-user cap (on by default without the bound) an
		// add_remove change displaces a user: replace-shaped.
		want := selection.NewPeriod(p.WindowsPerPeriod, tc.k, tc.neighbour == "replace" || cfg.Contribution.MaxTrackedUsers > 0)
		if sp.Selection.Period != want {
			t.Errorf("K=%d %s: period %+v, want %+v", tc.k, tc.neighbour, sp.Selection.Period, want)
		}
		cp := p.Count
		if math.Abs(cp.RDPEpsilon-(leftE-sp.Epsilon)) > 1e-12 || math.Abs(cp.RDPDelta-(leftD-sp.Delta)) > 1e-18 {
			t.Errorf("K=%d %s: count part (%g, %g), want the rest (%g, %g)", tc.k, tc.neighbour, cp.RDPEpsilon, cp.RDPDelta, leftE-sp.Epsilon, leftD-sp.Delta)
		}
		if tot := p.ApproxEpsilon + sp.Epsilon + cp.PlannedEpsilon; tot > p.Epsilon {
			t.Errorf("K=%d %s: the period's ε adds to %g > %g", tc.k, tc.neighbour, tot, p.Epsilon)
		}
		if tot := p.ApproxDelta + g.Delta() + cp.RDPDelta; tot > p.Delta {
			t.Errorf("K=%d %s: the period's δ adds to %g > %g", tc.k, tc.neighbour, tot, p.Delta)
		}
	}
}

// TestListedGroupsPlanNoSelection: a histogram that lists its groups is
// not selected (today's behaviour): no selection plan, the whole budget
// for the releases.
func TestListedGroupsPlanNoSelection(t *testing.T) {
	cfg := boundConfig(t, 5, "replace", "  mechanism: gaussian", 2)
	p, err := plan.DerivePlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.Selection != nil {
		t.Fatalf("selection planned for listed groups: %+v", p.Selection)
	}
	if p.Count.RDPEpsilon != p.Epsilon-p.ApproxEpsilon {
		t.Errorf("count part ε=%g, want %g", p.Count.RDPEpsilon, p.Epsilon-p.ApproxEpsilon)
	}
}

// TestSelectionWarning: privacy.expected_events_per_release below the
// users kept with probability 0.95 draws a warning on group_by.
func TestSelectionWarning(t *testing.T) {
	cfg := selectingConfig(t, 5, "replace", "  mechanism: gaussian")
	p, err := plan.DerivePlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n95 := p.Selection.Selection.Threshold.UsersAt(0.95)
	for _, tc := range []struct {
		events float64
		warn   bool
	}{{0, false}, {float64(n95) - 1, true}, {float64(n95), false}} {
		cfg.Privacy.ExpectedEventsPerRelease = tc.events
		ws := plan.SelectionWarnings(cfg, p)
		if (len(ws) > 0) != tc.warn {
			t.Errorf("%g events (0.95 at %d users): warnings %v", tc.events, n95, ws)
		}
		if tc.warn && !strings.Contains(ws[0].Message, "probability 0.95") {
			t.Errorf("warning %q", ws[0].Message)
		}
	}
}

// TestSelectionFitsTheBook: a day's selections charged to the budget book
// as one (ε_sel, δ_sel) reservation beside the count histograms' period
// reservations and the average histogram's — what the running stage will
// charge once it selects — are all accepted, and the book's total stays
// within the budget; a further count reservation is refused.
func TestSelectionFitsTheBook(t *testing.T) {
	for _, nb := range []string{"replace", "add_remove"} {
		cfg := selectingConfig(t, 5, nb, "  mechanism: gaussian")
		p, err := plan.DerivePlan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		book, err := budget.NewBook(p.Orders, p.Epsilon, p.Delta, noStore{})
		if err != nil {
			t.Fatal(err)
		}
		a := p.Averages[0]
		charges := []budget.Charge{
			p.Selection.Charge(),
			{RDP: p.Count.ReservationOf(0), Reservation: "pages"},
			{RDP: p.Count.ReservationOf(1), Reservation: "devices"},
			p.AverageReserveCharge(&a),
		}
		charges[3].Reservation = "interests"
		for _, c := range charges {
			if _, err := book.Commit(0, c); err != nil {
				t.Fatalf("%s: reservation %s refused: %v", nb, c.Reservation, err)
			}
		}
		if _, err := book.Check(0, budget.Charge{RDP: p.Count.ReservationOf(0), Reservation: "third"}); !errors.Is(err, budget.ErrBudgetExceeded) {
			t.Errorf("%s: a third count reservation: %v, want refused", nb, err)
		}
		st, _ := book.Status(0)
		if st.Epsilon > p.Epsilon || st.Delta > p.Delta {
			t.Errorf("%s: the book's total (%g, %g) exceeds the budget (%g, %g)", nb, st.Epsilon, st.Delta, p.Epsilon, p.Delta)
		}
		t.Logf("%s: selections (ε=%.4g, δ=%.3g), book total (ε=%.6g, δ=%.3g) of (%g, %g)", nb, p.Selection.Epsilon, p.Selection.Delta, st.Epsilon, st.Delta, p.Epsilon, p.Delta)
	}
}

// TestKeyTestWarning: when a day of one-second windows spreads the
// selections' budget so thin that the key-count test's σ_k exceeds a tenth
// of selection.max_keys_per_window, validate warns on that key; at a
// minute with the cross-window bound it does not.
func TestKeyTestWarning(t *testing.T) {
	for _, tc := range []struct {
		size string
		k    int
		warn bool
	}{{"1s", 0, true}, {"1m", 5, false}} {
		cfg := selectingConfig(t, tc.k, "replace", "  mechanism: gaussian")
		cfg.Histograms = cfg.Histograms[:2]
		if err := cfg.Window.Size.UnmarshalText([]byte(tc.size)); err != nil {
			t.Fatal(err)
		}
		cfg.Privacy.Budget.Epsilon = 0.1
		p, err := plan.DerivePlan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		got := false
		for _, w := range plan.SelectionWarnings(cfg, p) {
			got = got || w.Path == "selection.max_keys_per_window"
		}
		if got != tc.warn {
			t.Errorf("%s K=%d: σ_k=%g of limit %d: warned %v", tc.size, tc.k, p.Selection.Selection.Threshold.KeySigma, cfg.Selection.MaxKeysPerWindow, got)
		}
	}
}
