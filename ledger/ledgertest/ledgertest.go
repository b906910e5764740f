// Package ledgertest holds checks of a release log (ledger.Store) that
// the tests of several packages share.
package ledgertest

import (
	"context"
	"math"
	"testing"

	"github.com/dpstage/stage/ledger"
)

// CheckSpendIsSumOfCharges checks that l holds want units, all published,
// and that each period's RDP spend is the sum of its units' charges.
func CheckSpendIsSumOfCharges(t *testing.T, l ledger.Store, want int) {
	t.Helper()
	sum := map[int64][]float64{}
	n := 0
	if err := l.Units(func(u *ledger.Unit) bool {
		n++
		if !u.Published {
			t.Errorf("unit %s@%d not marked published", u.Histogram, u.WindowStart)
		}
		s := sum[u.Period]
		if s == nil {
			s = make([]float64, len(u.Charge.Epsilons))
		}
		for i, e := range u.Charge.Epsilons {
			s[i] += e
		}
		sum[u.Period] = s
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Errorf("the log holds %d units, want %d", n, want)
	}
	for p, s := range sum {
		spent, ok, err := l.Spent(p)
		if err != nil || !ok {
			t.Fatalf("spend of period %d: %v %v", p, ok, err)
		}
		for i := range s {
			if d := s[i] - spent.Epsilons[i]; math.Abs(d) > 1e-9*s[i] {
				t.Errorf("period %d order %g: spend %v ≠ sum of the units' charges %v", p, spent.Orders[i], spent.Epsilons[i], s[i])
			}
		}
	}
}

// CheckSelectionReservation checks how l records a unit's selection
// reservation (ledger.Unit.Selection, issue 30): the unit that makes it
// adds its (ε, δ) to the period's approximate spend and its key to the
// period's reservations, in the same record; a unit it covers adds
// neither; a second unit making the same key in the period is refused with
// its window; the spend and keys are read back after reopen (reopen:
// the same store reopened, or l itself). Windows are 1 minute, the period 5.
func CheckSelectionReservation(t *testing.T, l ledger.Store, reopen func() ledger.Store) {
	t.Helper()
	const minute = int64(60_000)
	const key = "selection-test"
	ctx := context.Background()
	unit := func(w int64, sc *ledger.SelectionCharge) *ledger.Unit {
		return &ledger.Unit{Histogram: "campaigns", WindowStart: w, WindowEnd: w + minute, Period: 0,
			Status: ledger.StatusReleased, Charge: ledger.Curve{Orders: []float64{2}, Epsilons: []float64{0.01}},
			Selection: sc, Published: true}
	}
	made := &ledger.SelectionCharge{Reservation: key, Approx: &ledger.Approx{Epsilon: 0.25, Delta: 5e-7}}
	if err := l.RecordWindowAdmitted(ctx, []*ledger.Unit{unit(0, made)}, ledger.Curve{Orders: []float64{2}, Epsilons: []float64{0.01}}, nil); err != nil {
		t.Fatalf("record the unit making the selection reservation: %v", err)
	}
	if err := l.RecordWindowAdmitted(ctx, []*ledger.Unit{unit(minute, &ledger.SelectionCharge{CoveredBy: key})}, ledger.Curve{Orders: []float64{2}, Epsilons: []float64{0.02}}, nil); err != nil {
		t.Fatalf("record a covered unit: %v", err)
	}
	if err := l.RecordWindowAdmitted(ctx, []*ledger.Unit{unit(2*minute, made)}, ledger.Curve{Orders: []float64{2}, Epsilons: []float64{0.03}}, nil); err == nil {
		t.Error("a second unit making the period's selection reservation was recorded")
	}
	if _, ok, _ := l.Lookup("campaigns", 2*minute); ok {
		t.Error("the window with the refused reservation was recorded")
	}
	if err := l.RecordWindowAdmitted(ctx, []*ledger.Unit{unit(3*minute, &ledger.SelectionCharge{Reservation: key})}, ledger.Curve{}, nil); err == nil {
		t.Error("a selection reservation without its charge was recorded")
	}
	l = reopen()
	a, ok, err := l.ApproxSpent(0)
	if err != nil || !ok || a.Epsilon != 0.25 || a.Delta != 5e-7 {
		t.Errorf("approx spend of the period: %+v %v %v, want ε 0.25, δ 5e-7 (once)", a, ok, err)
	}
	keys, err := l.Reservations(0)
	if err != nil || len(keys) != 1 || keys[0] != key {
		t.Errorf("reservations of the period: %v %v, want [%s]", keys, err, key)
	}
	u, ok, err := l.Lookup("campaigns", 0)
	if err != nil || !ok || u.Selection == nil || u.Selection.Reservation != key || u.Selection.Approx == nil || u.Selection.Approx.Epsilon != 0.25 {
		t.Errorf("the unit read back: %+v %v %v", u, ok, err)
	}
}
