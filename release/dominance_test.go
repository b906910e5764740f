package release_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/consume"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
)

// TestReservationCoveredByDominance: the plan spreads the period's budget
// over Σ_h K′_h per-window curves, so a config change of one view in the
// middle of a period changes every histogram's per-window curve and
// reservation key. Recorded: 3 boundaries of viewsConfig (pages K = 2 of
// 6 minute windows, devices K = 1 of 2 three-minute windows; its first
// window released at boundary 2), whose reservations fill the budget; then
// a restart with a changed devices view, the plan derived normally.
//
//   - devices K 1 → 2: Units 3 → 4, pages' curve goes down: its releases
//     are covered by its held reservation (CoveredBy, ChargeID: the held
//     key), nothing is charged; devices' own new reservation (another K)
//     is refused, visibly. A second restart makes the same decisions and
//     the spend is the same.
//   - devices K 2 → 1: Units 4 → 3, pages' curve goes up: not dominated,
//     refused like devices'.
//
// Before the cover by dominance, pages was budget_exhausted at boundaries
// 3, 4 and 5 in the first case too.
func TestReservationCoveredByDominance(t *testing.T) {
	counts := fixedCounts{0: {3, 1}, 1: {1, 2}}
	w0 := 4_833_333 * 6 * minute // a period start
	for _, tc := range []struct {
		name         string
		from, to     int
		want         string // statuses at boundaries 3, 4, 5
		wantRefusals string // Refusals after the change
	}{
		{"curve down", 1, 2, "pages:covered pages:covered pages:covered devices:budget_exhausted", "[devices]"},
		{"curve up", 2, 1, "pages:budget_exhausted pages:budget_exhausted pages:budget_exhausted devices:budget_exhausted", "[pages devices]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f := newFixture(t, viewsConfig(t, tc.from, dir))
			keys := reserveThree(t, f, w0, counts)
			before := spentCurve(t, f.led, w0)
			cfg2 := viewsConfig(t, tc.to, dir)
			run := func(g *fixture, bs ...int64) []string {
				t.Helper()
				var got []string
				for _, b := range bs {
					units, err := g.rel.Record(w0+b*minute, counts, nil)
					if err != nil {
						t.Fatal(err)
					}
					for _, u := range units {
						st := string(u.Status)
						if u.CoveredBy != "" {
							st = "covered"
							if u.CoveredBy != keys[u.Histogram] || len(u.Charge.Epsilons) != 0 || u.Reservation != "" {
								t.Errorf("boundary %d %s covered by %q charge %v reservation %q; want covered by its held %q, no charge",
									b, u.Histogram, u.CoveredBy, u.Charge.Epsilons, u.Reservation, keys[u.Histogram])
							}
							for g, r := range releases(t, u) {
								if r.Privacy.ChargeID != keys[u.Histogram] || r.Privacy.ChargeWindows != 2 {
									t.Errorf("%s/%s: charge %q over %d windows, want the covering %q over 2", u.Histogram, g, r.Privacy.ChargeID, r.Privacy.ChargeWindows, keys[u.Histogram])
								}
							}
						}
						got = append(got, u.Histogram+":"+st)
					}
				}
				return got
			}
			g := reopen(t, &fixture{cfg: cfg2, led: f.led, agg: f.agg, dec: f.dec}, nil)
			refs, err := g.rel.Refusals(w0)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range refs {
				names = append(names, r.Histogram)
				if r.End != w0+6*minute {
					t.Errorf("%s: releases resume at %d, want the period's end %d", r.Histogram, r.End, w0+6*minute)
				}
			}
			if fmt.Sprint(names) != tc.wantRefusals {
				t.Errorf("refusals at start %v, want %s", names, tc.wantRefusals)
			}
			got := run(g, 3)
			// A restart in the middle: the same decisions from the ledger.
			h := reopen(t, &fixture{cfg: cfg2, led: f.led, agg: f.agg, dec: f.dec}, nil)
			got = append(got, run(h, 4, 5)...)
			if s := strings.Join(got, " "); s != tc.want {
				t.Errorf("after the change: %s\nwant                %s", s, tc.want)
			}
			if after := spentCurve(t, f.led, w0); fmt.Sprint(after.Epsilons()) != fmt.Sprint(before.Epsilons()) {
				t.Errorf("spend %v → %v; want unchanged", before.Epsilons(), after.Epsilons())
			}
			if rs, err := f.led.Reservations(w0); err != nil || len(rs) != 2 {
				t.Errorf("reservations %v (%v), want the 2 made before the change", rs, err)
			}
			if st, _ := h.rel.Book().Status(w0); !(st.Epsilon <= 1) {
				t.Errorf("period total ε %v over the budget", st.Epsilon)
			}
		})
	}
}

// TestDominates: a held reservation dominates a new one only when its
// charge is at least the new one at every order of the same grid (RDP), or
// in both ε and δ ((ε, δ)); never across kinds, grids or NaN.
func TestDominates(t *testing.T) {
	curve := func(orders []float64, eps ...float64) budget.Curve {
		c, err := budget.NewCurve(orders, eps)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	g := []float64{2, 4, 8}
	inf := math.Inf(1)
	for _, tc := range []struct {
		name     string
		old, new budget.Charge
		want     bool
	}{
		{"equal", budget.Charge{RDP: curve(g, 1, 2, 3)}, budget.Charge{RDP: curve(g, 1, 2, 3)}, true},
		{"below everywhere", budget.Charge{RDP: curve(g, 1, 2, 3)}, budget.Charge{RDP: curve(g, 0.5, 1, 3)}, true},
		{"above at one order", budget.Charge{RDP: curve(g, 1, 2, 3)}, budget.Charge{RDP: curve(g, 0.5, 2.0000001, 1)}, false},
		{"old +Inf", budget.Charge{RDP: curve(g, 1, 2, inf)}, budget.Charge{RDP: curve(g, 1, 2, 1e300)}, true},
		{"new +Inf", budget.Charge{RDP: curve(g, 1, 2, 1e300)}, budget.Charge{RDP: curve(g, 1, 2, inf)}, false},
		{"other grid", budget.Charge{RDP: curve([]float64{2, 4, 16}, 9, 9, 9)}, budget.Charge{RDP: curve(g, 1, 1, 1)}, false},
		{"approx below", budget.Charge{Epsilon: 1, Delta: 1e-7}, budget.Charge{Epsilon: 0.5, Delta: 1e-7}, true},
		{"approx δ above", budget.Charge{Epsilon: 1, Delta: 1e-7}, budget.Charge{Epsilon: 0.5, Delta: 2e-7}, false},
		{"approx ε above", budget.Charge{Epsilon: 1, Delta: 1e-7}, budget.Charge{Epsilon: 1.5, Delta: 1e-8}, false},
		{"approx NaN", budget.Charge{Epsilon: math.NaN(), Delta: 1e-7}, budget.Charge{Epsilon: 0.5, Delta: 1e-8}, false},
		{"rdp for approx", budget.Charge{RDP: curve(g, 9, 9, 9)}, budget.Charge{Epsilon: 0.5, Delta: 1e-8}, false},
		{"approx for rdp", budget.Charge{Epsilon: 9, Delta: 1e-3}, budget.Charge{RDP: curve(g, 1, 1, 1)}, false},
	} {
		if got := release.Dominates(tc.old, tc.new); got != tc.want {
			t.Errorf("%s: dominates %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestAverageReservationDominance: an average histogram's held (ε, δ)
// reservation covers a new one that is no larger in ε and δ (the release
// names the held key, the period's (ε, δ) spend is unchanged); one larger
// in ε is a reservation of its own — here refused, the budget being
// used. ("equal": the same reservation, covered by its own key.)
func TestAverageReservationDominance(t *testing.T) {
	for _, tc := range []struct {
		name         string
		scaleEpsilon float64
		scaleDelta   float64
		covered      bool
		topUp        bool
	}{
		{"smaller", 0.5, 0.5, true, false},
		{"equal", 1, 1, true, false},
		{"larger ε", 2, 1, false, false},
		{"larger ε by a hair", 1 + 1e-12, 1, false, true}, // topped up by the difference (reservation.go, "Top-up")
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1m, watermark: event, start: "2026-01-01T00:00:00Z"}
histograms:
  - {name: pages, field: page, bins: [home, cart]}
  - name: interests
    kind: average
    field: interests
    bins: [news, sport, music]
    average: {users: 1000000, k: 1000, eta: 0.01}
contribution: {max_windows_per_user: 2}
privacy:
  mechanism: gaussian
  neighbour: replace
  budget: {epsilon: 100, delta: 1.0e-6, period: 10m}
state: {dir: %q}
`, t.TempDir())
			cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			f := newFixture(t, cfg)
			ap := mustPlan(t, cfg).Averages[0]
			avg, err := aggregate.NewAverager(consume.AverageHists(cfg))
			if err != nil {
				t.Fatal(err)
			}
			period := int64(29_000_000) * minute
			record := func(f *fixture, w int64) *ledger.Unit {
				t.Helper()
				counts, err := f.agg.Close(w)
				if err != nil {
					t.Fatal(err)
				}
				defer counts.Release()
				units, err := f.rel.Record(w, counts, avg.Close(w))
				if err != nil {
					t.Fatal(err)
				}
				return units[1]
			}
			key := record(f, period).Reservation
			g := reopen(t, f, func(p *plan.Plan) {
				p.Averages[0].ReserveEpsilon *= tc.scaleEpsilon
				p.Averages[0].ReserveDelta *= tc.scaleDelta
			})
			u := record(g, period+minute)
			a, _, err := f.led.ApproxSpent(period)
			if err != nil {
				t.Fatal(err)
			}
			if tc.covered {
				if u.Status != ledger.StatusReleased || u.CoveredBy != key || u.Reservation != "" || u.Approx != nil {
					t.Errorf("%s covered by %q reservation %q approx %+v; want covered by the held %q", u.Status, u.CoveredBy, u.Reservation, u.Approx, key)
				}
				if r := releases(t, u)["*"]; r.Privacy.ChargeID != key {
					t.Errorf("charge id %q, want the held %q", r.Privacy.ChargeID, key)
				}
				if a.Epsilon != ap.ReserveEpsilon || a.Releases != 1 {
					t.Errorf("(ε, δ) spend %+v, want the one reservation ε %v", a, ap.ReserveEpsilon)
				}
			} else if tc.topUp {
				held := ap.ReserveEpsilon // the plan's, before the scale
				d := held*tc.scaleEpsilon - held
				if u.Status != ledger.StatusReleased || u.TopUp == nil || u.TopUp.Of != key || u.Approx == nil ||
					!(u.Approx.Epsilon >= d) || u.Approx.Epsilon > 2*d || u.Approx.Delta != 0 {
					t.Errorf("%s top-up %+v approx %+v; want a top-up of the held %q by ε %g, δ 0", u.Status, u.TopUp, u.Approx, key, d)
				}
				if !(a.Epsilon >= held*tc.scaleEpsilon) || a.Epsilon > held+2*d {
					t.Errorf("(ε, δ) spend %+v, want the held reservation's ε %v + the top-up %g", a, held, d)
				}
			} else if u.CoveredBy != "" || u.Status != ledger.StatusBudgetExhausted || a.Releases != 1 {
				// The plan's RDP part holds the rest of the budget: no room.
				t.Errorf("%s covered by %q reservation %q, spend %+v; want not covered: a new reservation, refused", u.Status, u.CoveredBy, u.Reservation, a)
			}
		})
	}
}
