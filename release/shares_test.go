package release_test

import (
	"fmt"
	"testing"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/mechanism"
)

// TestViewSharesRelease (issue 29 item 3): with histograms[].budget_share
// each view releases with its own calibration — the releases of pages and
// devices carry their own view's σ and per-release RDP, not one shared
// calibration — and each view's first unit charges its own reservation
// (K′_h copies of its own per-window curve); the period's spend is the two
// reservations and converts to at most the budget.
func TestViewSharesRelease(t *testing.T) {
	cfg := viewsConfig(t, 1, t.TempDir())
	cfg.Histograms[1].BudgetShare = 0.8 // devices: 1 curve, 80 % of the budget; pages: 2 curves, 20 %
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, cfg)
	cp := p.Count
	sigmas := map[string]float64{"pages": cp.For(0).Mechanism.Params().Sigma, "devices": cp.For(1).Mechanism.Params().Sigma}
	if !(sigmas["devices"] < sigmas["pages"]) {
		t.Fatalf("σ %v: devices (80 %% over 1 curve) should be less noisy than pages (20 %% over 2)", sigmas)
	}
	f := newFixture(t, cfg)
	w0 := 4_833_333 * 6 * minute // a period start
	counts := fixedCounts{0: {3, 1}, 1: {1, 2}}
	seen := map[string]bool{}
	releaseThree(t, f, w0, counts, func(u *ledger.Unit) {
		h := map[string]int{"pages": 0, "devices": 1}[u.Histogram]
		if u.Reservation != "" {
			if got, want := fmt.Sprint(u.Charge.Epsilons), fmt.Sprint(cp.ReservationOf(h).Epsilons()); got != want {
				t.Errorf("%s reserved %v, want its own view's %v", u.Histogram, got, want)
			}
		}
		order := cp.For(h).Mechanism.Spec().Order
		rdp, _ := cp.For(h).Charge.At(order)
		for g, r := range releases(t, u) {
			seen[u.Histogram] = true
			if r.Params.Sigma != sigmas[u.Histogram] || r.Privacy.RDPEpsilon != rdp {
				t.Errorf("%s/%s: σ %v, RDP %v; want its view's σ %v, RDP %v", u.Histogram, g, r.Params.Sigma, r.Privacy.RDPEpsilon, sigmas[u.Histogram], rdp)
			}
		}
	})
	if !seen["pages"] || !seen["devices"] {
		t.Fatalf("released %v, want both views", seen)
	}
	want, _ := budget.ZeroCurve(p.Orders)
	want = want.Add(cp.ReservationOf(0)).Add(cp.ReservationOf(1))
	if got := spentCurve(t, f.led, w0); fmt.Sprint(got.Epsilons()) != fmt.Sprint(want.Epsilons()) {
		t.Fatalf("spend %v, want the two views' reservations %v", got.Epsilons(), want.Epsilons())
	}
	if st, err := f.rel.Book().Status(w0); err != nil || !(st.Epsilon <= cfg.Privacy.Budget.Epsilon) {
		t.Fatalf("period total %+v (%v), want within ε = %v", st, err, cfg.Privacy.Budget.Epsilon)
	}
}

// TestViewSharesReleaseWithoutTheBound: without max_windows_per_user every
// window charges its own curve (no reservation), and each view's charge is
// its own view's curve — at least its own mechanism's RDP rounded up at
// every order — not another view's (a review found that charging every
// view the first view's curve here passed the whole package).
func TestViewSharesReleaseWithoutTheBound(t *testing.T) {
	cfg := viewsConfig(t, 1, t.TempDir())
	cfg.Contribution.MaxWindowsPerUser = 0
	cfg.Histograms[1].MaxWindowsPerUser = 0
	cfg.Histograms[1].BudgetShare = 0.8
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, cfg)
	cp := p.Count
	f := newFixture(t, cfg)
	w0 := 4_833_333 * 6 * minute
	counts := fixedCounts{0: {3, 1}, 1: {1, 2}}
	seen := map[string]bool{}
	releaseThree(t, f, w0, counts, func(u *ledger.Unit) {
		if u.Reservation != "" {
			t.Fatalf("%s: reservation %q, want none without the bound", u.Histogram, u.Reservation)
		}
		seen[u.Histogram] = true
		h := map[string]int{"pages": 0, "devices": 1}[u.Histogram]
		own := cp.For(h)
		if got, want := fmt.Sprint(u.Charge.Epsilons), fmt.Sprint(own.Charge.Epsilons()); got != want {
			t.Errorf("%s charged %v, want its own view's curve %v", u.Histogram, got, want)
		}
		for i, o := range p.Orders {
			if i < len(u.Charge.Epsilons) && u.Charge.Epsilons[i] < mechanism.UpperRDPOf(own.Mechanism, o) {
				t.Errorf("%s charged %v at λ=%v, below its own mechanism's %v", u.Histogram, u.Charge.Epsilons[i], o, mechanism.UpperRDPOf(own.Mechanism, o))
				break
			}
		}
	})
	if !seen["pages"] || !seen["devices"] {
		t.Fatalf("released %v, want both views", seen)
	}
	if st, err := f.rel.Book().Status(w0); err != nil || !(st.Epsilon <= cfg.Privacy.Budget.Epsilon) {
		t.Fatalf("period total %+v (%v), want within ε = %v", st, err, cfg.Privacy.Budget.Epsilon)
	}
}
