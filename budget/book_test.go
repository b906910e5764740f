package budget

import (
	"errors"
	"math"
	"testing"
)

// memStore is a Store over a map (the ledger in the stage).
type memStore map[int64]Spend

func (m memStore) PeriodSpend(p int64) (Spend, bool, error) {
	s, ok := m[p]
	return s, ok, nil
}

// A Book checks each charge, of either kind, against the whole period's
// total — including what was recorded under another configuration — and
// refuses one that would take it above the budget, however little.
func TestBookChecksTheWholePeriod(t *testing.T) {
	orders := DefaultOrders()
	const eps, delta = 3.0, 1e-6
	gauss := func(l2sq, sigma float64) Curve { return CurveOf(gaussCurve{l2sq: l2sq, sigma: sigma}, orders) }
	// An RDP spend converting to ≈ 2.95 at δ (found by scaling).
	unit := gauss(1, 30)
	n := 0
	for ; ; n++ {
		if e, _ := ToEpsilon(unit.Scale(float64(n+1)), delta); e > 2.95 {
			break
		}
	}
	nearlyAll := unit.Scale(float64(n))
	spentRDP, _ := ToEpsilon(nearlyAll, delta)

	oldGrid := []float64{1.5, 2, 4, 8, 16, 32, 64, 128, 256}
	tests := []struct {
		name   string
		stored Spend
		charge Charge
		ok     bool
	}{
		{name: "empty period, rdp charge", charge: Charge{RDP: unit}, ok: true},
		{name: "empty period, approx charge", charge: Charge{Epsilon: 1, Delta: 1e-7}, ok: true},
		// Issue #15 item 2: counts spent ≈ 2.95 under a config without
		// average histograms; an average histogram added mid-period must
		// not release another 0.1 on a fresh reservation.
		{name: "rdp spent, approx charge over", stored: Spend{RDP: nearlyAll}, charge: Charge{Epsilon: 0.1, Delta: 1e-8}},
		{name: "rdp spent, approx charge fits", stored: Spend{RDP: nearlyAll}, charge: Charge{Epsilon: (eps - spentRDP) / 4, Delta: 1e-12}, ok: true},
		// The reverse: average releases spent 2.9 under an earlier config.
		{name: "approx spent, rdp charge over", stored: Spend{ApproxEpsilon: 2.9, ApproxDelta: 1e-7, ApproxReleases: 10}, charge: Charge{RDP: gauss(1, 1)}},
		{name: "approx spent, small rdp charge fits", stored: Spend{ApproxEpsilon: 1, ApproxDelta: 1e-7, ApproxReleases: 10}, charge: Charge{RDP: gauss(1, 30)}, ok: true},
		{name: "both parts, fit", stored: Spend{ApproxEpsilon: 1, ApproxDelta: 1e-7, ApproxReleases: 10}, charge: Charge{RDP: gauss(1, 30), Epsilon: 0.1, Delta: 1e-9}, ok: true},
		{name: "both parts, the approx part over", stored: Spend{ApproxEpsilon: 1, ApproxDelta: 1e-7, ApproxReleases: 10}, charge: Charge{RDP: gauss(1, 30), Epsilon: 2.9, Delta: 1e-9}},
		// δ: the (ε, δ) part took all of δ; nothing is left to convert
		// the RDP part at.
		{name: "approx delta exhausted, rdp charge", stored: Spend{ApproxEpsilon: 0.1, ApproxDelta: delta, ApproxReleases: 1}, charge: Charge{RDP: gauss(1, 1000)}},
		{name: "approx delta over", stored: Spend{ApproxEpsilon: 0.1, ApproxDelta: 0.9 * delta, ApproxReleases: 1}, charge: Charge{Epsilon: 0.1, Delta: 0.2 * delta}},
		// A recorded spend on another grid (a changed calibration order)
		// is moved onto the Book's conservatively and still counts.
		{name: "old grid, rdp charge over", stored: Spend{RDP: nearlyAll.Regrid(oldGrid)}, charge: Charge{RDP: gauss(1, 3)}},
		// Lowered budget: spent 2.95 under ε = 3, now the budget is lower
		// (tested with the budget below).
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewBook(orders, eps, delta, memStore{7: tc.stored})
			if err != nil {
				t.Fatal(err)
			}
			before, err := b.Status(7)
			if err != nil {
				t.Fatal(err)
			}
			after, err := b.Check(7, tc.charge)
			if tc.ok != (err == nil) {
				t.Fatalf("Check: ok=%v want %v (err %v; before ε=%v, after ε=%v)", err == nil, tc.ok, err, before.Epsilon, after.Epsilon)
			}
			if err != nil {
				if !errors.Is(err, ErrBudgetExceeded) {
					t.Fatalf("error %v is not ErrBudgetExceeded", err)
				}
				if got, _ := b.Status(7); got != before {
					t.Errorf("a refused check changed the period: %+v → %+v", before, got)
				}
				return
			}
			if !(after.Epsilon <= eps) || after.Delta > delta {
				t.Errorf("accepted total (%v, %v) over (%v, %v)", after.Epsilon, after.Delta, eps, delta)
			}
			got, err := b.Commit(7, tc.charge)
			if err != nil || got != after {
				t.Errorf("Commit = %+v, %v; want %+v", got, err, after)
			}
		})
	}

	// A lowered budget: what was spent under the old one counts against it.
	b, _ := NewBook(orders, 2, delta, memStore{7: {RDP: nearlyAll}})
	if _, err := b.Check(7, Charge{Epsilon: 1e-6, Delta: 1e-12}); !errors.Is(err, ErrBudgetExceeded) {
		t.Errorf("lowered budget: a charge was accepted over the spend recorded under the old one: %v", err)
	}
	if st, _ := b.Status(7); math.Abs(st.Epsilon-spentRDP) > 1e-12 {
		t.Errorf("status ε = %v, want the recorded %v", st.Epsilon, spentRDP)
	}
}

// A planned schedule — RDP releases calibrated to (ε − ε_a, δ − δ_a) and
// (ε, δ)-DP releases within the reservation (ε_a, δ_a), interleaved — is
// accepted to its last release by the whole-period check, and the next
// release of either kind is refused.
func TestBookAcceptsAPlannedSchedule(t *testing.T) {
	orders := DefaultOrders()
	const eps, delta = 2.0, 1e-6
	const windows = 100
	approxEps, approxDelta := 0.5/windows, 0.4*delta/windows
	rdpEps, rdpDelta := eps-windows*approxEps, delta-windows*approxDelta
	// The largest Gaussian per-release curve whose windows-fold
	// composition converts to Planned(rdpEps) at rdpDelta: bisect σ.
	lo, hi := 0.1, 1000.0
	for i := 0; i < 200; i++ {
		mid := math.Sqrt(lo * hi)
		e, _ := ToEpsilon(CurveOf(gaussCurve{l2sq: 2, sigma: mid}, orders).Scale(windows), rdpDelta)
		if e <= Planned(rdpEps) {
			hi = mid
		} else {
			lo = mid
		}
	}
	per := CurveOf(gaussCurve{l2sq: 2, sigma: hi}, orders)
	b, _ := NewBook(orders, eps, delta, memStore{})
	for w := 0; w < windows; w++ {
		for _, c := range []Charge{{RDP: per}, {Epsilon: approxEps, Delta: approxDelta}} {
			if _, err := b.Check(0, c); err != nil {
				t.Fatalf("window %d: planned charge refused: %v", w, err)
			}
			if _, err := b.Commit(0, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	st, _ := b.Status(0)
	if !(st.Epsilon <= eps) || st.Epsilon < eps*0.99 {
		t.Errorf("planned total ε = %v, want just under %v", st.Epsilon, eps)
	}
	for _, c := range []Charge{{RDP: per}, {Epsilon: approxEps, Delta: approxDelta}} {
		if _, err := b.Check(0, c); !errors.Is(err, ErrBudgetExceeded) {
			t.Errorf("an unplanned extra charge %+v was accepted: %v", c, err)
		}
	}
}

func TestBookInvalid(t *testing.T) {
	orders := DefaultOrders()
	if _, err := NewBook(orders, 1, 1e-6, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil store: %v", err)
	}
	if _, err := NewBook(orders, math.NaN(), 1e-6, memStore{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("NaN epsilon: %v", err)
	}
	b, _ := NewBook(orders, 1, 1e-6, memStore{})
	for _, c := range []Charge{{}, {Epsilon: math.NaN()}, {Epsilon: 1, Delta: 1}, {Epsilon: math.Inf(1)}, {RDP: CurveOf(gaussCurve{1, 1}, []float64{2, 3})}} {
		if _, err := b.Check(0, c); err == nil || errors.Is(err, ErrBudgetExceeded) {
			t.Errorf("charge %+v: %v, want an argument error", c, err)
		}
	}
}

// Sums of charges are rounded up, never down.
func TestAddUpMulUp(t *testing.T) {
	for _, c := range [][2]float64{{0.1, 0.2}, {1, 1e-17}, {1e-17, 1}, {3, 4}, {0, 0}, {1e300, 1e300}} {
		s := AddUp(c[0], c[1])
		// exact: s ≥ a + b, checked with the 2Sum error term of s.
		if rest := (c[0] - s) + c[1]; s < c[0]+c[1] || (!math.IsInf(s, 0) && rest > 0 && s-c[0] < c[1]) {
			t.Errorf("AddUp(%v, %v) = %v below the exact sum", c[0], c[1], s)
		}
		if s > math.Nextafter(c[0]+c[1], math.Inf(1)) {
			t.Errorf("AddUp(%v, %v) = %v: more than one ulp up", c[0], c[1], s)
		}
	}
	// 0.1 + 0.2 rounds up to nearest already; 1 + 1e-17 rounds down to 1.
	if AddUp(1, 1e-17) <= 1 {
		t.Errorf("AddUp(1, 1e-17) = %v, want above 1", AddUp(1, 1e-17))
	}
	if MulUp(3, 0.1) < 0.30000000000000004 || math.FMA(3, 0.1, -MulUp(3, 0.1)) > 0 {
		t.Errorf("MulUp(3, 0.1) = %v below the exact product", MulUp(3, 0.1))
	}
	if MulUp(0, math.Inf(1)) == 0 {
		t.Log("MulUp(0, +Inf) is NaN-free by contract of Scale (k = 0 handled there)")
	}
}
