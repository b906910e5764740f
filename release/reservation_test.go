package release_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/consume"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
)

// These tests run the period reservation of the cross-window bound
// (contribution.max_windows_per_user; plan's package doc, "Charging: the
// period reservation") through the real releaser, book and ledger, no
// broker. testConfig's period is 5 one-minute windows.

var oneEvent = [][4]string{{"a", "home", "US", "mobile"}}

// withK returns testConfig with the cross-window bound k.
func withK(t *testing.T, k int) *fixture {
	t.Helper()
	cfg := testConfig(t, "")
	cfg.Contribution.MaxWindowsPerUser = k
	cfg.Contribution.MaxTrackedUsers = 0
	return newFixture(t, cfg)
}

// reopen is a restart: a new book and releaser for cfg on f's ledger.
func reopen(t *testing.T, f *fixture, mutate func(*plan.Plan)) *fixture {
	t.Helper()
	p := mustPlan(t, f.cfg)
	if mutate != nil {
		mutate(p)
	}
	book, err := release.NewBook(p, f.led)
	if err != nil {
		t.Fatal(err)
	}
	g := *f
	g.rel, err = release.New(release.Options{Config: f.cfg, Plan: p, Ledger: f.led, Book: book,
		Rand: mechanism.NewSeededRand([32]byte{2}), OnExhausted: func() { g.exh++ }})
	if err != nil {
		t.Fatal(err)
	}
	return &g
}

func spentCurve(t *testing.T, led *ledger.Ledger, period int64) budget.Curve {
	t.Helper()
	c, ok, err := led.Spent(period)
	if err != nil || !ok {
		t.Fatalf("spent of period %d: %v %v", period, ok, err)
	}
	out, err := budget.NewCurve(c.Orders, c.Epsilons)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// reservationsOf is the spend of one reservation per count histogram,
// composed as the book does (rounded up, in config order).
func reservationsOf(t *testing.T, p *plan.Plan, n int) budget.Curve {
	t.Helper()
	total, _ := budget.ZeroCurve(p.Orders)
	for i := 0; i < n; i++ {
		total = total.Add(p.Count.ReservationOf(0))
	}
	return total
}

// TestReservationCoversThePeriod: with K = 2 in a period of 5 windows, the
// first window's unit of each histogram charges its period reservation
// (min(K, W) = 2 windows' curve) and records it; the other 4 windows'
// units are released, charge nothing and name the reservation; the
// period's spend is the two reservations from the first window on; every
// release names the reservation as its charge; the next period makes new
// reservations.
func TestReservationCoversThePeriod(t *testing.T) {
	f := withK(t, 2)
	p := mustPlan(t, f.cfg)
	if p.Bound.CountWindows != 2 || p.Count.Units != 2*2 {
		t.Fatalf("plan bound %+v, units %d; want 2 windows × 2 histograms", p.Bound, p.Count.Units)
	}
	want := p.Count.Charge.Scale(2)
	if fmt.Sprint(p.Count.ReservationOf(0).Epsilons()) != fmt.Sprint(want.Epsilons()) {
		t.Fatalf("reservation %v, want 2 × charge %v", p.Count.ReservationOf(0), want)
	}
	period := int64(29_000_000) * minute
	keys := map[string]string{}
	for k := int64(0); k < 6; k++ {
		units := f.window(t, period+k*minute, oneEvent)
		for _, u := range units {
			if u.Status != ledger.StatusReleased {
				t.Fatalf("window %d %s: %s", k, u.Histogram, u.Status)
			}
			first := k == 0 || k == 5
			if first {
				if u.Reservation == "" || u.CoveredBy != "" || fmt.Sprint(u.Charge.Epsilons) != fmt.Sprint(p.Count.ReservationOf(0).Epsilons()) {
					t.Errorf("window %d %s: reservation %q covered by %q charge %v; want the reservation charged", k, u.Histogram, u.Reservation, u.CoveredBy, u.Charge.Epsilons)
				}
				keys[u.Histogram] = u.Reservation
			} else if u.Reservation != "" || u.CoveredBy != keys[u.Histogram] || len(u.Charge.Epsilons) != 0 {
				t.Errorf("window %d %s: reservation %q covered by %q charge %v; want covered by %q, no charge", k, u.Histogram, u.Reservation, u.CoveredBy, u.Charge.Epsilons, keys[u.Histogram])
			}
			for _, m := range u.Messages {
				var r release.Release
				if err := json.Unmarshal(m.Value, &r); err != nil {
					t.Fatal(err)
				}
				at, _ := p.Count.ReservationOf(0).At(r.Privacy.Order)
				if r.Privacy.ChargeID != keys[u.Histogram] || r.Privacy.ChargeRDPEpsilon != at || r.Privacy.ChargeWindows != 2 {
					t.Errorf("window %d %s: charge id %s rdp %v windows %d; want %s %v 2", k, u.Histogram, r.Privacy.ChargeID, r.Privacy.ChargeRDPEpsilon, r.Privacy.ChargeWindows, keys[u.Histogram], at)
				}
			}
		}
		if k == 0 || k == 4 {
			got, want := spentCurve(t, f.led, period), reservationsOf(t, p, 2)
			if fmt.Sprint(got.Epsilons()) != fmt.Sprint(want.Epsilons()) {
				t.Errorf("after window %d: period spend %v, want the two reservations %v", k, got.Epsilons(), want.Epsilons())
			}
		}
	}
	if keys["pages"] == keys["devices"] {
		t.Error("two histograms share a reservation key")
	}
	if rs, err := f.led.Reservations(period); err != nil || len(rs) != 2 {
		t.Errorf("ledger reservations of the period: %v %v", rs, err)
	}
}

// TestReservationSurvivesRestart: a restart in the middle of the period (a
// new book and releaser on the same ledger) covers the later units with
// the reservation recorded before it — no second reservation, the spend
// unchanged — also after the units that made the reservations were pruned.
func TestReservationSurvivesRestart(t *testing.T) {
	f := withK(t, 3)
	p := mustPlan(t, f.cfg)
	period := int64(29_000_000) * minute
	first := f.window(t, period, oneEvent)
	f.window(t, period+minute, oneEvent)
	before := spentCurve(t, f.led, period)
	var keys [][]byte
	for _, u := range first {
		keys = append(keys, u.Key())
	}
	if err := f.led.MarkPublishedKeys(context.Background(), keys); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.led.SetMeta(context.Background(), ledger.Meta{WindowMs: minute, PeriodMs: 5 * minute}); err != nil {
		t.Fatal(err)
	}
	if n, _, err := f.led.Prune(context.Background(), period+minute); err != nil || n != 2 {
		t.Fatalf("prune: %d units, %v", n, err)
	}
	g := reopen(t, f, nil)
	for k := int64(2); k < 5; k++ {
		for _, u := range g.window(t, period+k*minute, oneEvent) {
			if u.Status != ledger.StatusReleased || u.Reservation != "" || u.CoveredBy == "" || len(u.Charge.Epsilons) != 0 {
				t.Errorf("after restart, window %d %s: status %s reservation %q covered by %q charge %v", k, u.Histogram, u.Status, u.Reservation, u.CoveredBy, u.Charge.Epsilons)
			}
		}
	}
	after := spentCurve(t, g.led, period)
	if fmt.Sprint(before.Epsilons()) != fmt.Sprint(after.Epsilons()) {
		t.Errorf("restart charged again: spend %v → %v", before.Epsilons(), after.Epsilons())
	}
	if want := reservationsOf(t, p, 2); fmt.Sprint(after.Epsilons()) != fmt.Sprint(want.Epsilons()) {
		t.Errorf("spend %v, want the two reservations %v", after.Epsilons(), want.Epsilons())
	}
	// The restored book refuses to make a held reservation again.
	c := budget.Charge{RDP: p.Count.ReservationOf(0)}
	c.Reservation = release.ReservationKey("pages", 3, p.Neighbour, c)
	if held, err := g.rel.Book().Reserved(period, c.Reservation); err != nil || !held {
		t.Errorf("restored book: reservation held %v (%v)", held, err)
	}
	if _, err := g.rel.Book().Check(period, c); !errors.Is(err, budget.ErrInvalidArgument) {
		t.Errorf("restored book: a second reservation of the same key: %v, want refused", err)
	}
}

// TestReservationAfterConfigChange: a config change in the middle of the
// period (K, and with it the reservation) makes new reservations with the
// next units; the period's spend is the sum of both configurations'
// reservations and stays within the budget — with a budget that holds one
// configuration's reservations only, the changed config's units are
// budget_exhausted (visibly) and the spend is unchanged.
func TestReservationAfterConfigChange(t *testing.T) {
	period := int64(29_000_000) * minute
	for _, tc := range []struct {
		name    string
		epsilon float64 // < 0: the small budget
		refused bool
	}{
		{"room for both", 0, false},
		{"room for one", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "")
			cfg.Contribution.MaxWindowsPerUser = 2
			cfg.Contribution.MaxTrackedUsers = 0
			if tc.epsilon < 0 {
				// A budget whose plan is made for K = 2: the K = 4
				// reservations calibrated on the same mechanism do not fit
				// beside those of K = 2.
				cfg.Privacy.Budget.Epsilon = 2
			} else {
				// privacy.rdp_epsilon fixes the calibration, and the budget
				// holds both configurations' reservations.
				cfg.Privacy.Budget.Epsilon = 20
				cfg.Privacy.RDPEpsilon = 0.05
			}
			f := newFixture(t, cfg)
			p2 := mustPlan(t, cfg)
			f.window(t, period, oneEvent)
			f.window(t, period+minute, oneEvent)
			cfg4 := *cfg
			cfg4.Contribution.MaxWindowsPerUser = 4
			g := reopen(t, &fixture{cfg: &cfg4, led: f.led, agg: f.agg, dec: f.dec}, func(p *plan.Plan) {
				if tc.refused {
					// Keep the K = 2 calibration (as privacy.rdp_epsilon would)
					// so that the new reservations are twice the old ones.
					p.Count.Mechanism, p.Count.Charge = p2.Count.Mechanism, p2.Count.Charge
					setReservations(p, p2.Count.Charge.Scale(4))
				}
			})
			p4 := mustPlan(t, &cfg4)
			if !tc.refused && (p2.Count.FitUnits != p2.Count.Units || p4.Count.FitUnits != p4.Count.Units) {
				t.Fatalf("rdp_epsilon: fit %d of %d (K=2), %d of %d (K=4): the test needs both whole", p2.Count.FitUnits, p2.Count.Units, p4.Count.FitUnits, p4.Count.Units)
			}
			for k := int64(2); k < 5; k++ {
				for _, u := range g.window(t, period+k*minute, oneEvent) {
					switch {
					case tc.refused:
						if u.Status != ledger.StatusBudgetExhausted || u.Reservation != "" || u.CoveredBy != "" {
							t.Errorf("window %d %s: %s reservation %q covered %q; want budget_exhausted", k, u.Histogram, u.Status, u.Reservation, u.CoveredBy)
						}
					case k == 2:
						if u.Status != ledger.StatusReleased || u.Reservation == "" {
							t.Errorf("window %d %s: %s reservation %q; want a new reservation", k, u.Histogram, u.Status, u.Reservation)
						}
					default:
						if u.Status != ledger.StatusReleased || u.CoveredBy == "" {
							t.Errorf("window %d %s: %s covered by %q; want covered", k, u.Histogram, u.Status, u.CoveredBy)
						}
					}
				}
			}
			spent := spentCurve(t, f.led, period)
			want := reservationsOf(t, p2, 2)
			if !tc.refused {
				want = want.Add(reservationsOf(t, p4, 2))
			}
			if fmt.Sprint(spent.Epsilons()) != fmt.Sprint(want.Epsilons()) {
				t.Errorf("period spend %v, want %v", spent.Epsilons(), want.Epsilons())
			}
			tot, err := g.rel.Book().Status(period)
			if err != nil || !(tot.Epsilon <= cfg.Privacy.Budget.Epsilon) {
				t.Errorf("period total ε %v of %v (%v)", tot.Epsilon, cfg.Privacy.Budget.Epsilon, err)
			}
			if rs, _ := f.led.Reservations(period); (len(rs) == 4) == tc.refused {
				t.Errorf("%d reservations recorded", len(rs))
			}
		})
	}
}

// TestReservationChargedWithTheFirstUnit: the whole reservation is charged
// before the first unit's values are drawn and recorded: with a budget
// that one window's curve fits but the K-window reservation does not, the
// first unit is budget_exhausted (nothing drawn) rather than released, and
// nothing is spent.
func TestReservationChargedWithTheFirstUnit(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.Contribution.MaxWindowsPerUser = 5
	cfg.Contribution.MaxTrackedUsers = 0
	cfg.Privacy.Budget.Epsilon = 1
	f := newFixture(t, cfg)
	p := mustPlan(t, cfg)
	// Calibrate as if K were 1: one window's curve is then a full share of
	// the budget, and 5 windows of it are not.
	cfg1 := *cfg
	cfg1.Contribution.MaxWindowsPerUser = 1
	p1 := mustPlan(t, &cfg1)
	g := reopen(t, f, func(q *plan.Plan) {
		q.Count.Mechanism, q.Count.Charge = p1.Count.Mechanism, p1.Count.Charge
		setReservations(q, p1.Count.Charge.Scale(float64(p.Bound.CountWindows)))
	})
	if e, _ := budget.ToEpsilon(p1.Count.Charge, p1.Count.RDPDelta); !(e < 1) {
		t.Fatalf("one window's curve converts to ε %v: the test needs it within the budget", e)
	}
	period := int64(29_000_000) * minute
	for _, u := range g.window(t, period, oneEvent) {
		if u.Status != ledger.StatusBudgetExhausted || len(u.Charge.Epsilons) != 0 {
			t.Errorf("%s: %s charge %v; want budget_exhausted", u.Histogram, u.Status, u.Charge.Epsilons)
		}
	}
	if _, ok, _ := f.led.Spent(period); ok {
		t.Error("a refused reservation was spent")
	}
	if g.exh != 2 {
		t.Errorf("OnExhausted called %d times, want 2", g.exh)
	}
}

// TestAverageReservation: an average histogram's period reservation is
// min(2K, W) releases' (ε_r, δ_r) under replace, charged (ε, δ) with its
// first unit of the period; the later units are covered and add nothing
// to the period's (ε, δ) spend.
// averageConfig has a count histogram and an average histogram under the
// Gaussian, K = 2 of the 10 one-minute windows of a period.
func averageConfig(t *testing.T) *config.Config {
	t.Helper()
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
	return cfg
}

func TestAverageReservation(t *testing.T) {
	cfg := averageConfig(t)
	f := newFixture(t, cfg)
	p := mustPlan(t, cfg)
	ap := p.Averages[0]
	if p.Bound.AverageReleases != 4 || !(ap.ReserveEpsilon >= 4*ap.Epsilon) {
		t.Fatalf("bound %+v, reservation ε %v for ε_r %v", p.Bound, ap.ReserveEpsilon, ap.Epsilon)
	}
	avg, err := aggregate.NewAverager(consume.AverageHists(cfg))
	if err != nil {
		t.Fatal(err)
	}
	period := int64(29_000_000) * minute // a multiple of 10m
	var key string
	for k := int64(0); k < 3; k++ {
		w := period + k*minute
		counts, err := f.agg.Close(w)
		if err != nil {
			t.Fatal(err)
		}
		units, err := f.rel.Record(w, counts, avg.Close(w))
		counts.Release()
		if err != nil {
			t.Fatal(err)
		}
		u := units[1]
		if u.Histogram != "interests" || u.Status != ledger.StatusReleased {
			t.Fatalf("unit %s %s", u.Histogram, u.Status)
		}
		var r release.Release
		if err := json.Unmarshal(u.Messages[0].Value, &r); err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			key = u.Reservation
			if key == "" || u.Approx == nil || u.Approx.Epsilon != ap.ReserveEpsilon || u.Approx.Delta != ap.ReserveDelta {
				t.Errorf("first unit: reservation %q approx %+v; want (%v, %v)", u.Reservation, u.Approx, ap.ReserveEpsilon, ap.ReserveDelta)
			}
		} else if u.CoveredBy != key || u.Approx != nil || u.Reservation != "" {
			t.Errorf("window %d: covered by %q approx %+v reservation %q", k, u.CoveredBy, u.Approx, u.Reservation)
		}
		if r.Privacy.ChargeID != key || r.Privacy.ChargeWindows != 4 || r.Privacy.ReleaseEpsilon != ap.Epsilon {
			t.Errorf("window %d: privacy %+v", k, r.Privacy)
		}
	}
	a, ok, err := f.led.ApproxSpent(period)
	if err != nil || !ok || a.Epsilon != ap.ReserveEpsilon || a.Delta != ap.ReserveDelta || a.Releases != 1 {
		t.Errorf("period (ε, δ) spend %+v (%v %v), want the one reservation (%v, %v)", a, ok, err, ap.ReserveEpsilon, ap.ReserveDelta)
	}
}

// TestReservationRefusedForThePeriod: with privacy.rdp_epsilon fixing a
// calibration whose budget holds one of the two count histograms' period
// reservations (plan: FitUnits = min(K, W), whole reservations), the first
// histogram is released in every window of the period and the second is
// budget_exhausted in every window (its reservation is tried again and
// refused each time); the next period starts over.
func TestReservationRefusedForThePeriod(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.Contribution.MaxWindowsPerUser = 2
	cfg.Contribution.MaxTrackedUsers = 0
	cfg.Privacy.Budget.Epsilon = 1
	// An rdp_epsilon that fits one reservation of 2 windows.
	fitRDPEpsilon(t, cfg, 2, func(p *plan.Plan) {
		if p.Count.FitUnits%p.Bound.CountWindows != 0 {
			t.Fatalf("FitUnits %d is not whole reservations of %d windows", p.Count.FitUnits, p.Bound.CountWindows)
		}
	})
	f := newFixture(t, cfg)
	period := int64(29_000_000) * minute
	var got []string
	for k := int64(0); k < 6; k++ {
		if k == 5 {
			got = append(got, "|")
		}
		for _, u := range f.window(t, period+k*minute, oneEvent) {
			got = append(got, u.Histogram[:1]+":"+string(u.Status)[:1])
		}
	}
	if want := "[p:r d:b p:r d:b p:r d:b p:r d:b p:r d:b | p:r d:b]"; fmt.Sprint(got) != want {
		t.Errorf("statuses %v\nwant     %s", got, want)
	}
	if f.exh != 6 {
		t.Errorf("OnExhausted %d times, want 6", f.exh)
	}
}

// setReservations makes every count histogram's period reservation c.
func setReservations(p *plan.Plan, c budget.Curve) {
	for i := range p.Count.Reservations {
		if p.Count.Reservations[i].Len() > 0 {
			p.Count.Reservations[i] = c
		}
	}
}
