package budget

import (
	"errors"
	"fmt"
	"testing"
)

// TestBookCovered: a unit a held reservation covers is checked against the
// period's current budget (issue #21, item 2): within it, Covered accepts
// (held, no error) and changes nothing; with the Book's budget cut below
// the restored spend — or below it only after the window's pending charges
// — it refuses with ErrBudgetExceeded (held still true); a period that does
// not hold the key reports held = false and no error, whatever its spend;
// a lower budget recorded with the period counts as a cut too.
func TestBookCovered(t *testing.T) {
	orders := []float64{2, 4}
	c, err := NewCurve(orders, []float64{0.5, 0.8})
	if err != nil {
		t.Fatal(err)
	}
	spent := Spend{RDP: c, Reservations: []string{"pages"}}
	// e: the restored spend's ε at δ = 10⁻⁶.
	b0, err := NewBook(orders, 100, 1e-6, reservedStore{spent})
	if err != nil {
		t.Fatal(err)
	}
	t0, _ := b0.Status(0)
	e := t0.Epsilon
	pending := Charge{RDP: c}
	for _, tc := range []struct {
		name     string
		budget   float64
		recorded float64 // the budget recorded with the period (0: none)
		key      string
		pending  []Charge
		held     bool
		refused  bool
	}{
		{"within", 2 * e, 0, "pages", nil, true, false},
		{"cut below the spend", e / 2, 0, "pages", nil, true, true},
		{"recorded budget below the spend", 2 * e, e / 2, "pages", nil, true, true},
		{"over only with the pending charges", e * 1.1, 0, "pages", []Charge{pending}, true, true},
		{"not held, over", e / 2, 0, "devices", nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := spent
			sp.LimitEpsilon = tc.recorded
			b, err := NewBook(orders, tc.budget, 1e-6, reservedStore{sp})
			if err != nil {
				t.Fatal(err)
			}
			before, _ := b.Spent(0)
			tot, held, err := b.Covered(0, tc.key, tc.pending...)
			if held != tc.held || errors.Is(err, ErrBudgetExceeded) != tc.refused || (err != nil && !tc.refused) {
				t.Fatalf("Covered: held %v, err %v; want held %v, refused %v", held, err, tc.held, tc.refused)
			}
			if held && !tc.refused && !(tot.Epsilon <= tot.LimitEpsilon && tot.Epsilon > 0) {
				t.Errorf("accepted with total ε %v of %v", tot.Epsilon, tot.LimitEpsilon)
			}
			if after, _ := b.Spent(0); len(after.Reservations) != len(before.Reservations) || fmt.Sprint(after.RDP.Epsilons()) != fmt.Sprint(before.RDP.Epsilons()) {
				t.Errorf("Covered changed the spend: %+v → %+v", before, after)
			}
		})
	}
}
