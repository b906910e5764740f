package plan_test

import (
	"math"
	"strings"
	"testing"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/plan"
)

// sharesConfig is viewsPlanConfig (pages 5 of 1,440 minutes, devices 24 of
// 24 hours, a daily average) with budget shares for the count histograms
// (0: none of its own).
func sharesConfig(t *testing.T, neighbour, privacy string, pages, devices float64) *config.Config {
	t.Helper()
	cfg := viewsPlanConfig(t, neighbour, privacy)
	cfg.Histograms[0].BudgetShare, cfg.Histograms[1].BudgetShare = pages, devices
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// independentEpsilon converts an RDP curve given as a function of the
// order to (ε, δ) on its own grid of orders (1.25 to 512 by 1/8 up to 16,
// then by 1/2) with 000 Lemma 1 eq. (2), ε = ρ(λ) + log(1 − 1/λ) −
// (log δ + log λ)/(λ − 1), written out here rather than read from budget.
func independentEpsilon(rho func(order float64) float64, delta float64) float64 {
	best := math.Inf(1)
	for o := 1.25; o <= 512; {
		if e := rho(o) + math.Log(1-1/o) - (math.Log(delta)+math.Log(o))/(o-1); e < best {
			best = e
		}
		if o < 16 {
			o += 0.125
		} else {
			o += 0.5
		}
	}
	return best
}

// TestSharesReservationsFitTheBudget (issue 29 item 3): with budget shares
// every count histogram has its own calibration, and the reservations of
// all views — each K′_h copies of its own per-window curve — never exceed
// the period budget. Checked two ways, neither through the planner's own
// composition: (1) for the Gaussian, recomputed from scratch from each
// view's σ (the curve λ·Δ2²/(2σ²) with the replace Δ2² = 2m² — the
// any-pair curve the cross-window bound composes — times K′_h, summed over
// the views, plus the daily average's (ε, δ) added) and converted on a grid
// of this test's own; (2) for every mechanism, the budget book (exact
// checks) accepts every reservation and then refuses a further one. It
// also checks the shares are what was asked: view h's part of the
// calibration target is s_h, the rest split over the others.
func TestSharesReservationsFitTheBudget(t *testing.T) {
	for _, sh := range []struct {
		name           string
		pages, devices float64
	}{
		{"hour leads", 0, 0.7},
		{"both set", 0.25, 0.75},
		{"decimal sum", 0.1 + 0.2, 0.7}, // 1.0000000000000002 — within the tolerance
		{"minute tiny", 0.001, 0},
	} {
		for _, nb := range []string{"replace", "add_remove"} {
			for _, mc := range boundMechanisms {
				t.Run(sh.name+"/"+nb+"/"+mc.name, func(t *testing.T) {
					cfg := sharesConfig(t, nb, mc.privacy, sh.pages, sh.devices)
					p, err := plan.DerivePlan(cfg)
					if err != nil {
						t.Fatal(err)
					}
					cp := p.Count
					if cp.Views == nil || cp.For(0) == cp || cp.For(1) == cp || cp.For(2) != cp {
						t.Fatalf("views %v: want one calibration per count histogram", cp.Views)
					}
					// The shares asked for (the rest to the histogram without one).
					want := []float64{sh.pages, sh.devices}
					for i := range want {
						if want[i] == 0 {
							want[i] = 1 - sh.pages - sh.devices
						}
					}
					for i, w := range want {
						if got := cp.For(i).Share; math.Abs(got-w) > 1e-9 {
							t.Errorf("histogram %d share %v, want %v", i, got, w)
						}
					}
					// Each view's calibration target is its share of the
					// same composed target (the totals' part taken off).
					t0 := cp.For(0).Mechanism.Spec().RDPEpsilon * float64(cp.For(0).Units) / want[0]
					t1 := cp.For(1).Mechanism.Spec().RDPEpsilon * float64(cp.For(1).Units) / want[1]
					if math.Abs(t0-t1) > 1e-9*t0 {
						t.Errorf("views calibrated to targets %v and %v per unit of share, want equal", t0, t1)
					}
					// (2) The book accepts every reservation and refuses more.
					book, err := budget.NewBook(p.Orders, p.Epsilon, p.Delta, noStore{})
					if err != nil {
						t.Fatal(err)
					}
					a := p.Averages[0]
					avg := p.AverageReserveCharge(&a)
					avg.Reservation = "interests"
					for _, c := range []budget.Charge{
						{RDP: cp.ReservationOf(0), Reservation: "pages"},
						{RDP: cp.ReservationOf(1), Reservation: "devices"},
						avg,
					} {
						// Check first: Commit does not check the budget again
						// (a review found this step could not fail without it).
						if _, err := book.Check(0, c); err != nil {
							t.Fatalf("reservation %s refused: %v", c.Reservation, err)
						}
						if _, err := book.Commit(0, c); err != nil {
							t.Fatalf("reservation %s refused: %v", c.Reservation, err)
						}
					}
					tiny := budget.Charge{RDP: cp.For(0).Charge, Reservation: "one more window"}
					if _, err := book.Check(0, tiny); err == nil && cp.For(0).Share > 0.01 {
						t.Errorf("the book accepts one more window of pages: the budget was not used up")
					}
					if mc.name != "gaussian" {
						return
					}
					// (1) From scratch: the Gaussian's curve per view.
					m := float64(cfg.Contribution.MaxEventsPerUser)
					l2sq := 2 * m * m // replace, and the any-pair curve under add_remove's bound argument ≤ this
					if nb == "add_remove" {
						l2sq = m * m
					}
					var rhos []func(float64) float64
					for i := 0; i < 2; i++ {
						s := cp.For(i).Mechanism.Params().Sigma
						k := float64(p.HistBounds[i].CountWindows)
						rhos = append(rhos, func(o float64) float64 { return k * o * l2sq / (2 * s * s) })
						// The plan's reservation charges at least this at every order.
						for j, o := range cp.ReservationOf(i).Orders() {
							if r := cp.ReservationOf(i).Epsilons()[j]; r < rhos[i](o)*(1-1e-12) {
								t.Fatalf("histogram %d reservation %v at order %v, below K′·λΔ2²/(2σ²) = %v", i, r, o, rhos[i](o))
							}
						}
					}
					// The count part's (ε, δ): what the average histogram
					// left (basic composition: the two parts add).
					eps := independentEpsilon(func(o float64) float64 {
						t := 0.0
						for _, r := range rhos {
							t += r(o)
						}
						return t
					}, p.Delta-a.ReserveDelta)
					if total := eps + a.ReserveEpsilon; !(total <= cfg.Privacy.Budget.Epsilon) {
						t.Errorf("views' reservations recomposed from scratch: ε = %v (count part %v + average %v) > the budget %v",
							total, eps, a.ReserveEpsilon, cfg.Privacy.Budget.Epsilon)
					}
				})
			}
		}
	}
}

// TestSharesProportionalIsToday: shares equal to each view's per-window
// curves over all (K′_h / Σ K′) calibrate every view as the plan without
// shares does (to a relative 10⁻⁶: both searches are bisections).
func TestSharesProportionalIsToday(t *testing.T) {
	for _, mc := range boundMechanisms {
		t.Run(mc.name, func(t *testing.T) {
			base, err := plan.DerivePlan(viewsPlanConfig(t, "replace", mc.privacy))
			if err != nil {
				t.Fatal(err)
			}
			p, err := plan.DerivePlan(sharesConfig(t, "replace", mc.privacy, 0, 24.0/29))
			if err != nil {
				t.Fatal(err)
			}
			want := base.Count.Mechanism.Spec().RDPEpsilon
			for i := 0; i < 2; i++ {
				if got := p.Count.For(i).Mechanism.Spec().RDPEpsilon; math.Abs(got-want) > 1e-6*want {
					t.Errorf("histogram %d calibrated to %v, without shares %v", i, got, want)
				}
			}
		})
	}
}

// TestBudgetShareValidation: the errors say what to fix.
func TestBudgetShareValidation(t *testing.T) {
	for _, tc := range []struct {
		name           string
		pages, devices float64
		rdp            float64
		want           string // "" = valid
	}{
		{"one share", 0, 0.5, 0, ""},
		{"all shares", 0.4, 0.6, 0, ""},
		{"all shares below 1", 0.4, 0.4, 0, ""},
		{"decimal tolerance", 0.1 + 0.2, 0.7, 0, ""},
		{"negative", -0.1, 0, 0, "histograms[0].budget_share: must be a share of the count histograms' budget in (0, 1]"},
		{"above 1", 0, 1.5, 0, "histograms[1].budget_share: must be a share"},
		{"NaN", math.NaN(), 0, 0, "histograms[0].budget_share: must be a share"},
		{"Inf", 0, math.Inf(1), 0, "histograms[1].budget_share: must be a share"},
		{"sum above 1", 0.6, 0.5, 0, "sum to 1.1, more than 1"},
		{"nothing left", 0, 1, 0, "leave nothing for the count histograms without one (pages)"},
		{"with rdp_epsilon", 0, 0.5, 0.001, "privacy.rdp_epsilon: fixes one calibration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := viewsPlanConfig(t, "replace", "  mechanism: gaussian")
			cfg.Histograms[0].BudgetShare, cfg.Histograms[1].BudgetShare = tc.pages, tc.devices
			cfg.Privacy.RDPEpsilon = tc.rdp
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !containsAll(err.Error(), strings.Split(tc.want, ": ")...)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	cfg := viewsPlanConfig(t, "replace", "  mechanism: gaussian")
	cfg.Histograms[2].BudgetShare = 0.5
	if err := cfg.Validate(); err == nil || !containsAll(err.Error(), "histograms[2].budget_share", "applies to count histograms only") {
		t.Errorf("a share on an average histogram: %v", err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestSharesWithoutTheWindowBound: without max_windows_per_user a view's
// units are its windows per period (every window charged), and the shares
// split those: devices with 0.5 of the count budget over its 1,440 minutes,
// pages the rest over its 1,440 — so both calibrate to the same per-window
// target here — and with 0.9 devices is less noisy than pages; the count
// histograms' composition (Composed: 1,440 of each view's own curve)
// converts within the count part of the budget.
func TestSharesWithoutTheWindowBound(t *testing.T) {
	for _, tc := range []struct {
		devices float64
		less    bool // devices calibrated to a larger target than pages
	}{{0.5, false}, {0.9, true}} {
		cfg := boundConfig(t, 0, "replace", "  mechanism: gaussian", 1)
		cfg.Contribution.MaxTrackedUsers = 0
		cfg.Histograms = cfg.Histograms[:2] // the average histogram's 1,440 releases alone exceed ε = 1
		cfg.Histograms[1].BudgetShare = tc.devices
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		p, err := plan.DerivePlan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cp := p.Count
		if cp.For(0).Units != 1440 || cp.For(1).Units != 1440 || cp.Reservations != nil {
			t.Fatalf("units %d, %d (want 1440 each), reservations %v (want none)", cp.For(0).Units, cp.For(1).Units, cp.Reservations)
		}
		e0, e1 := cp.For(0).Mechanism.Spec().RDPEpsilon, cp.For(1).Mechanism.Spec().RDPEpsilon
		if tc.less != (e1 > e0*(1+1e-9)) || (!tc.less && math.Abs(e1-e0) > 1e-9*e0) {
			t.Errorf("devices share %v: targets pages %v, devices %v", tc.devices, e0, e1)
		}
		if eps, _ := budget.ToEpsilon(cp.Composed(), cp.RDPDelta); !(eps <= cp.RDPEpsilon) {
			t.Errorf("devices share %v: the views compose to ε %v > the count part %v", tc.devices, eps, cp.RDPEpsilon)
		}
	}
}
