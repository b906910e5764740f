package release_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/plan"
)

// viewsConfig is testConfig at ε = 1 over a 6-minute period with the
// cross-window bound: pages in 1-minute windows under
// contribution.max_windows_per_user = 2, devices in 3-minute windows of its
// own (2 per period) with histograms[].max_windows_per_user = kDevices.
func viewsConfig(t *testing.T, kDevices int, dir string) *config.Config {
	t.Helper()
	cfg := testConfig(t, "")
	cfg.Privacy.Budget.Epsilon = 1
	cfg.Privacy.Budget.Period = config.Duration(6 * time.Minute)
	cfg.Contribution.MaxWindowsPerUser, cfg.Contribution.MaxTrackedUsers = 2, 0
	cfg.Histograms[1].Window = config.Duration(3 * time.Minute)
	cfg.Histograms[1].MaxWindowsPerUser = kDevices
	if dir != "" {
		cfg.State.Dir = dir
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestViewReservations: with a minute view (K = 2 of 6 windows) and a
// 3-minute view (K = 1 of 2 windows) the plan spreads the budget over
// 2 + 1 = 3 per-window curves, each histogram's first unit charges its own
// reservation (pages 2 curves at its first minute, devices 1 curve at the
// end of its first 3-minute window) and every later unit of the period is
// covered by its histogram's reservation; the period's spend is exactly
// the sum of the two reservations. A restart restores the same total from
// the ledger (same numbers), and the covered units after it charge
// nothing. A third reservation the config change makes (devices' K raised
// to 2 mid-period, same calibration) exceeds the budget: it is refused
// (budget_exhausted), while pages stays covered.
func TestViewReservations(t *testing.T) {
	dir := t.TempDir()
	cfg := viewsConfig(t, 1, dir)
	p := mustPlan(t, cfg)
	if p.Count.Units != 3 || p.HistBounds[0].CountWindows != 2 || p.HistBounds[1].CountWindows != 1 {
		t.Fatalf("plan: %d units, bounds %+v; want 2 + 1", p.Count.Units, p.HistBounds)
	}
	for h, n := range []float64{2, 1} {
		if got, want := p.Count.ReservationOf(h).Epsilons(), p.Count.Charge.Scale(n).Epsilons(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("histogram %d reservation %v, want %g × the per-window curve %v", h, got, n, want)
		}
	}
	f := newFixture(t, cfg)
	w0 := 4_833_333 * 6 * minute // a period start
	counts := fixedCounts{0: {3, 1}, 1: {1, 2}}
	record := func(f *fixture, b int64) []*ledger.Unit {
		t.Helper()
		units, err := f.rel.Record(w0+b*minute, counts, nil)
		if err != nil {
			t.Fatal(err)
		}
		return units
	}
	keys := map[string]string{}
	for b := range int64(4) {
		for _, u := range record(f, b) {
			if u.Status != ledger.StatusReleased {
				t.Fatalf("boundary %d %s: %s", b, u.Histogram, u.Status)
			}
			first := (u.Histogram == "pages" && b == 0) || (u.Histogram == "devices" && b == 2)
			if first != (u.Reservation != "") || first == (u.CoveredBy != "") {
				t.Errorf("boundary %d %s: reservation %q covered by %q", b, u.Histogram, u.Reservation, u.CoveredBy)
			}
			if first {
				keys[u.Histogram] = u.Reservation
			} else if u.CoveredBy != keys[u.Histogram] {
				t.Errorf("boundary %d %s covered by %q, want its own reservation %q", b, u.Histogram, u.CoveredBy, keys[u.Histogram])
			}
			wantWindows := map[string]int{"pages": 2, "devices": 1}[u.Histogram]
			for g, r := range releases(t, u) {
				if r.Privacy.ChargeWindows != wantWindows || r.Privacy.ChargeID != keys[u.Histogram] {
					t.Errorf("%s/%s: charge %q over %d windows, want %q over %d", u.Histogram, g, r.Privacy.ChargeID, r.Privacy.ChargeWindows, keys[u.Histogram], wantWindows)
				}
			}
		}
	}
	if len(keys) != 2 || keys["pages"] == keys["devices"] {
		t.Fatalf("reservations %v", keys)
	}
	// The spend is exactly the two reservations, composed as the book does.
	want, _ := budget.ZeroCurve(p.Orders)
	want = want.Add(p.Count.ReservationOf(0)).Add(p.Count.ReservationOf(1))
	before := spentCurve(t, f.led, w0)
	if fmt.Sprint(before.Epsilons()) != fmt.Sprint(want.Epsilons()) {
		t.Fatalf("spend %v, want pages' 2 + devices' 1 curves %v", before.Epsilons(), want.Epsilons())
	}
	stBefore, err := f.rel.Book().Status(w0)
	if err != nil {
		t.Fatal(err)
	}
	if !(stBefore.Epsilon <= 1) {
		t.Fatalf("the two reservations convert to ε %v > 1", stBefore.Epsilon)
	}

	// Restart: a new book restored from the ledger holds the same total and
	// both reservations; the period's later units are covered.
	g := reopen(t, f, nil)
	stAfter, err := g.rel.Book().Status(w0)
	if err != nil {
		t.Fatal(err)
	}
	if stAfter != stBefore {
		t.Fatalf("restored total %+v, before the restart %+v", stAfter, stBefore)
	}
	for _, h := range []string{"pages", "devices"} {
		if held, err := g.rel.Book().Reserved(w0, keys[h]); err != nil || !held {
			t.Errorf("restored book: %s's reservation held %v (%v)", h, held, err)
		}
	}
	for b := int64(4); b < 6; b++ {
		for _, u := range record(g, b) {
			if u.Status != ledger.StatusReleased || u.CoveredBy != keys[u.Histogram] || len(u.Charge.Epsilons) != 0 {
				t.Errorf("after restart, boundary %d %s: %s covered by %q charge %v", b, u.Histogram, u.Status, u.CoveredBy, u.Charge.Epsilons)
			}
		}
	}
	if after := spentCurve(t, g.led, w0); fmt.Sprint(after.Epsilons()) != fmt.Sprint(before.Epsilons()) {
		t.Fatalf("covered units charged: spend %v → %v", before.Epsilons(), after.Epsilons())
	}

	// The next period, devices' K raised to 2 at the old calibration: its
	// reservation (2 curves, a new key) on top of the earlier 3 curves
	// would exceed the budget — refused; pages, covered, is released.
	next := w0 + 6*minute
	for b := range int64(3) {
		record(g, 6+b)
	}
	cfg2 := viewsConfig(t, 2, dir)
	h := reopen(t, &fixture{cfg: cfg2, led: g.led, agg: g.agg, dec: g.dec}, func(q *plan.Plan) {
		q.Count.Mechanism, q.Count.Charge = p.Count.Mechanism, p.Count.Charge
		q.Count.Reservations[0], q.Count.Reservations[1] = p.Count.ReservationOf(0), p.Count.Charge.Scale(2)
	})
	for b := int64(3); b < 6; b++ {
		for _, u := range record(h, 6+b) {
			switch {
			case u.Histogram == "devices":
				if u.Status != ledger.StatusBudgetExhausted {
					t.Errorf("next period boundary %d: devices' second reservation %s, want budget_exhausted", b, u.Status)
				}
			case u.Status != ledger.StatusReleased || u.CoveredBy == "":
				t.Errorf("next period boundary %d: pages %s covered by %q, want covered", b, u.Status, u.CoveredBy)
			}
		}
	}
	if h.exh != 1 {
		t.Errorf("%d budget_exhausted units, want 1", h.exh)
	}
	if st, _ := h.rel.Book().Status(next); !(st.Epsilon <= 1) {
		t.Errorf("period total ε %v over the budget", st.Epsilon)
	}
}
