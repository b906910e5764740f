package plan_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/plan"
)

// viewsPlanConfig is boundConfig (K = 5 for the 1-minute histograms, a
// day of 1,440 windows) with devices in hourly windows of its own
// (histograms[].max_windows_per_user = 24) and the average histogram in a
// daily window (1).
func viewsPlanConfig(t *testing.T, neighbour, privacy string) *config.Config {
	t.Helper()
	cfg := boundConfig(t, 5, neighbour, privacy, 1)
	cfg.Contribution.MaxTrackedUsers = 0
	cfg.Histograms[1].Window, cfg.Histograms[1].MaxWindowsPerUser = config.Duration(time.Hour), 24
	cfg.Histograms[2].Window, cfg.Histograms[2].MaxWindowsPerUser = config.Duration(24*time.Hour), 1
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestViewsPlan (issue #23 item 2): each histogram's view composes its own
// bound over its own windows — pages 5 of 1,440, devices 24 of 24, the
// daily average 1 release (add_remove) or min(2, 1) = 1 (replace) — the
// count calibration spreads the budget over 5 + 24 = 29 per-window curves,
// each count histogram's reservation is its own K′_h copies of the
// per-window curve, and the book accepts the three reservations (the
// period then within ε) and refuses any further one. With privacy.
// rdp_epsilon fixed, FitUnits counts whole reservations in the order
// their first units come (pages at its first minute, devices at its first
// hour).
func TestViewsPlan(t *testing.T) {
	for _, nb := range []string{"replace", "add_remove"} {
		for _, mc := range boundMechanisms {
			t.Run(nb+"/"+mc.name, func(t *testing.T) {
				p, err := plan.DerivePlan(viewsPlanConfig(t, nb, mc.privacy))
				if err != nil {
					t.Fatal(err)
				}
				want := []plan.WindowBound{
					{K: 5, Windows: 1440, CountWindows: 5, AverageReleases: map[string]int{"replace": 10, "add_remove": 5}[nb]},
					{K: 24, Windows: 24, CountWindows: 24, AverageReleases: 24},
					{K: 1, Windows: 1, CountWindows: 1, AverageReleases: 1},
				}
				for i, w := range want {
					if p.HistBounds[i] != w {
						t.Errorf("histogram %d bound %+v, want %+v", i, p.HistBounds[i], w)
					}
				}
				if p.Count.Units != 29 || p.Charges() != 3 {
					t.Fatalf("%d units, %d charges; want 5 + 24 = 29, 3", p.Count.Units, p.Charges())
				}
				for h, n := range map[int]float64{0: 5, 1: 24} {
					if got, w := p.Count.ReservationOf(h).Epsilons(), p.Count.Charge.Scale(n).Epsilons(); !equalFloats(got, w) {
						t.Errorf("histogram %d reservation %v, want %g × the curve %v", h, got, n, w)
					}
				}
				a := p.Averages[0]
				if a.ReserveEpsilon != a.Epsilon || a.ReserveDelta != a.Delta {
					t.Errorf("daily average reservation (%v, %v), want one release (%v, %v)", a.ReserveEpsilon, a.ReserveDelta, a.Epsilon, a.Delta)
				}
				book, err := budget.NewBook(p.Orders, p.Epsilon, p.Delta, noStore{})
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range []budget.Charge{
					{RDP: p.Count.ReservationOf(0), Reservation: "pages"},
					{RDP: p.Count.ReservationOf(1), Reservation: "devices"},
					{Epsilon: a.ReserveEpsilon, Delta: a.ReserveDelta, Reservation: "interests"},
				} {
					if _, err := book.Commit(0, c); err != nil {
						t.Fatalf("reservation %s refused: %v", c.Reservation, err)
					}
				}
				if st, _ := book.Status(0); !(st.Epsilon <= p.Epsilon) {
					t.Errorf("the three reservations compose to ε %v > %v", st.Epsilon, p.Epsilon)
				}
				if _, err := book.Check(0, budget.Charge{RDP: p.Count.ReservationOf(0), Reservation: "again"}); !errors.Is(err, budget.ErrBudgetExceeded) {
					t.Errorf("a further reservation: %v, want refused", err)
				}
			})
		}
	}
	// privacy.rdp_epsilon: the budget covers pages' reservation (5
	// curves) but not devices' 24 more: FitUnits 5, not a multiple of
	// one histogram's windows.
	cfg := viewsPlanConfig(t, "add_remove", "  mechanism: gaussian")
	for _, tc := range []struct {
		eps float64
		fit int
	}{{0.001, 29}, {0.003, 5}, {0.005, 5}} {
		cfg.Privacy.RDPEpsilon = tc.eps
		p, err := plan.DerivePlan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if p.Count.FitUnits != tc.fit {
			t.Errorf("rdp_epsilon %g: FitUnits %d, want %d (whole reservations)", tc.eps, p.Count.FitUnits, tc.fit)
		}
	}
	if order := plan.ReservationOrder(cfg); order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Errorf("reservation order %v, want pages (1m), devices (1h), interests (1d)", order)
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
