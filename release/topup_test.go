package release_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/plan"
)

// TestReservationTopUp (issue 28's review: charges rounded up in the
// middle of a period): the reservations of viewsConfig (pages K = 2 of 6
// minute windows, devices K = 1 of 2 three-minute windows) fill the
// period's budget. They are made under curves lowered by a relative
// 10⁻¹² at every order — the curves a version that did not round charges
// up recorded — and the stage restarts under the plan's own, rounded-up
// curves: every key changes and no held reservation dominates the new
// one. Each histogram's first unit after the restart tops its held
// reservation up by the difference R_new − R_old at every order (a hair,
// recorded as the unit's charge, with ledger.TopUp naming the held key
// and covering R_new), and its later units are covered by the top-up;
// the period's spend grows by the two differences only, stays within the
// budget, and a second restart makes the same decisions. Before the
// top-up the new reservations were charged in full and refused: pages and
// devices budget_exhausted for the rest of the period.
func TestReservationTopUp(t *testing.T) {
	const hair = 1e-12
	counts := fixedCounts{0: {3, 1}, 1: {1, 2}}
	w0 := 4_833_333 * 6 * minute // a period start
	cfg := viewsConfig(t, 1, t.TempDir())
	p := mustPlan(t, cfg)
	old := make([]budget.Curve, len(p.Count.Reservations))
	for h, c := range p.Count.Reservations {
		eps := c.Epsilons()
		for i := range eps {
			eps[i] *= 1 - hair
		}
		var err error
		if old[h], err = budget.NewCurve(c.Orders(), eps); err != nil {
			t.Fatal(err)
		}
	}
	f := reopen(t, newFixture(t, cfg), func(p *plan.Plan) { p.Count.Reservations = old })
	keys := reserveThree(t, f, w0, counts)
	before := spentCurve(t, f.led, w0)

	g := reopen(t, &fixture{cfg: cfg, led: f.led, agg: f.agg, dec: f.dec}, nil)
	if refs, err := g.rel.Refusals(w0); err != nil || len(refs) != 0 {
		t.Errorf("refusals at start %+v (%v); want none: the top-ups fit", refs, err)
	}
	newKeys := map[string]string{}
	topUps := map[string]ledger.Curve{}
	var got []string
	run := func(g *fixture, bs ...int64) {
		t.Helper()
		for _, b := range bs {
			for _, u := range recordAt(t, g, w0+b*minute, counts) {
				st := string(u.Status)
				switch {
				case u.TopUp != nil:
					st = "topped-up"
					newKeys[u.Histogram], topUps[u.Histogram] = u.Reservation, u.Charge
					if u.TopUp.Of != keys[u.Histogram] || u.Reservation == "" || u.Reservation == keys[u.Histogram] {
						t.Errorf("%s tops up %q with %q; want its held %q with a key of its own", u.Histogram, u.TopUp.Of, u.Reservation, keys[u.Histogram])
					}
					for grp, r := range releases(t, u) {
						if r.Privacy.ChargeID != u.Reservation {
							t.Errorf("%s/%s: charge id %q, want the top-up's %q", u.Histogram, grp, r.Privacy.ChargeID, u.Reservation)
						}
					}
				case u.CoveredBy != "":
					st = "covered"
					if u.CoveredBy != newKeys[u.Histogram] {
						t.Errorf("%s covered by %q, want its top-up %q", u.Histogram, u.CoveredBy, newKeys[u.Histogram])
					}
				}
				got = append(got, u.Histogram+":"+st)
			}
		}
	}
	run(g, 3)
	h := reopen(t, &fixture{cfg: cfg, led: f.led, agg: f.agg, dec: f.dec}, nil) // the same decisions from the ledger
	run(h, 4, 5)
	if s, want := strings.Join(got, " "), "pages:topped-up pages:covered pages:covered devices:topped-up"; s != want {
		t.Fatalf("after the upgrade: %s\nwant               %s", s, want)
	}
	// Each top-up is the difference at every order, rounded up: a hair.
	for hi, name := range []string{"pages", "devices"} {
		newR, oldR := p.Count.ReservationOf(hi).Epsilons(), old[hi].Epsilons()
		tu := topUps[name].Epsilons
		for i, o := range p.Count.ReservationOf(hi).Orders() {
			d := newR[i] - oldR[i]
			if math.IsInf(newR[i], 1) {
				continue
			}
			if !(tu[i] >= d) || tu[i] > d+4*ulp(newR[i]) {
				t.Errorf("%s top-up at order %g: %g; want R_new − R_old = %g (rounded up)", name, o, tu[i], d)
			}
		}
	}
	after := spentCurve(t, f.led, w0)
	be, ae := before.Epsilons(), after.Epsilons()
	pt, dt := topUps["pages"].Epsilons, topUps["devices"].Epsilons
	np, nd := p.Count.ReservationOf(0).Epsilons(), p.Count.ReservationOf(1).Epsilons()
	for i, o := range after.Orders() {
		if math.IsInf(ae[i], 1) {
			continue
		}
		if ae[i] > be[i]+pt[i]+dt[i]+4*ulp(ae[i]) || ae[i] < np[i]+nd[i]-2*ulp(ae[i]) {
			t.Errorf("order %g: spend %g → %g; want + the top-ups %g + %g, at least the new reservations' %g", o, be[i], ae[i], pt[i], dt[i], np[i]+nd[i])
		}
	}
	if rs, err := f.led.Reservations(w0); err != nil || len(rs) != 4 {
		t.Errorf("reservations %v (%v), want 2 made before and 2 top-ups", rs, err)
	}
	if st, _ := h.rel.Book().Status(w0); !(st.Epsilon <= 1) {
		t.Errorf("period total ε %v over the budget", st.Epsilon)
	}
}

// TestReservationTopUpChain: two upgrades in one period, each raising
// the curves by a hair (pages' reservation made under curves lowered by
// 2·10⁻¹², topped up under 10⁻¹², then under the plan's own): the second
// top-up tops up the first — the running maximum, not the reservation made
// in full — by R_new − R_mid, and a restart under the last plan is
// covered by it. devices, whose first window ends at boundary 2, reserves
// in full under the last plan.
func TestReservationTopUpChain(t *testing.T) {
	counts := fixedCounts{0: {3, 1}, 1: {1, 2}}
	w0 := 4_833_333 * 6 * minute // a period start
	cfg := viewsConfig(t, 1, t.TempDir())
	lowered := func(by float64) func(*plan.Plan) {
		return func(p *plan.Plan) {
			for h, c := range p.Count.Reservations {
				eps := c.Epsilons()
				for i := range eps {
					eps[i] *= 1 - by
				}
				var err error
				if p.Count.Reservations[h], err = budget.NewCurve(c.Orders(), eps); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	f := newFixture(t, cfg)
	var got []string
	keys := map[string]string{}
	g := f
	for b, mutate := range []func(*plan.Plan){lowered(2e-12), lowered(1e-12), nil, nil} {
		g = reopen(t, f, mutate)
		for _, u := range recordAt(t, g, w0+int64(b)*minute, counts) {
			st := string(u.Status)
			switch {
			case u.TopUp != nil:
				st = "top-up of " + keys[u.TopUp.Of]
			case u.CoveredBy != "":
				st = "covered by " + keys[u.CoveredBy]
			}
			if u.Reservation != "" {
				keys[u.Reservation] = fmt.Sprintf("%s@%d", u.Histogram, b)
			}
			got = append(got, fmt.Sprintf("%d %s: %s", b, u.Histogram, st))
		}
	}
	want := "0 pages: released; 1 pages: top-up of pages@0; 2 pages: top-up of pages@1; 2 devices: released; 3 pages: covered by pages@2"
	if s := strings.Join(got, "; "); s != want {
		t.Errorf("units:\n%s\nwant\n%s", s, want)
	}
	if st, _ := g.rel.Book().Status(w0); !(st.Epsilon <= 1) {
		t.Errorf("period total ε %v over the budget", st.Epsilon)
	}
}

// recordAt records the base boundary w with g's releaser.
func recordAt(t *testing.T, g *fixture, w int64, counts fixedCounts) []*ledger.Unit {
	t.Helper()
	units, err := g.rel.Record(w, counts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return units
}

// reserveThree records the boundaries w0, w0 + 1m and w0 + 2m of
// viewsConfig, each unit released, and returns the reservation key each
// histogram made.
func reserveThree(t *testing.T, f *fixture, w0 int64, counts fixedCounts) map[string]string {
	t.Helper()
	keys := map[string]string{}
	releaseThree(t, f, w0, counts, func(u *ledger.Unit) {
		if u.Reservation != "" {
			keys[u.Histogram] = u.Reservation
		}
	})
	return keys
}

// releaseThree records the boundaries w0, w0 + 1m and w0 + 2m, requires
// every unit released and hands each to check.
func releaseThree(t *testing.T, f *fixture, w0 int64, counts fixedCounts, check func(*ledger.Unit)) {
	t.Helper()
	for b := range int64(3) {
		units, err := f.rel.Record(w0+b*minute, counts, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range units {
			if u.Status != ledger.StatusReleased {
				t.Fatalf("boundary %d %s: %s", b, u.Histogram, u.Status)
			}
			check(u)
		}
	}
}

func ulp(x float64) float64 { return math.Nextafter(math.Abs(x), math.Inf(1)) - math.Abs(x) }
