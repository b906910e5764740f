package budget

import (
	"errors"
	"testing"
)

// reservedStore restores period 0 with a recorded spend (and
// reservations); other periods have none.
type reservedStore struct{ sp Spend }

func (s reservedStore) PeriodSpend(p int64) (Spend, bool, error) { return s.sp, p == 0, nil }

// TestBookReservations: a period reservation is charged once per period —
// Check and Commit refuse a key the period or the pending charges already
// hold, Reserved reports it — and a restored period keeps its reservations
// (and its spend), while another period holds none.
func TestBookReservations(t *testing.T) {
	orders := []float64{2, 4}
	c, err := NewCurve(orders, []float64{0.1, 0.2})
	if err != nil {
		t.Fatal(err)
	}
	res := Charge{RDP: c, Reservation: "pages"}
	for _, tc := range []struct {
		name  string
		store Store
		held  bool
	}{
		{"fresh", reservedStore{Spend{}}, false},
		{"restored", reservedStore{Spend{RDP: c, Reservations: []string{"pages"}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewBook(orders, 10, 1e-6, tc.store)
			if err != nil {
				t.Fatal(err)
			}
			if held, err := b.Reserved(0, "pages"); err != nil || held != tc.held {
				t.Fatalf("reserved %v (%v), want %v", held, err, tc.held)
			}
			if !tc.held {
				if _, err := b.Check(0, res, res); !errors.Is(err, ErrInvalidArgument) {
					t.Errorf("a reservation pending twice: %v, want refused", err)
				}
				if _, err := b.Check(0, res); err != nil {
					t.Fatal(err)
				}
				if _, err := b.Commit(0, res); err != nil {
					t.Fatal(err)
				}
			}
			if held, _ := b.Reserved(0, "pages"); !held {
				t.Error("not reserved after the commit")
			}
			if _, err := b.Check(0, res); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("Check of a held reservation: %v, want refused", err)
			}
			if _, err := b.Commit(0, res); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("Commit of a held reservation: %v, want refused", err)
			}
			other := res
			other.Reservation = "devices"
			if _, err := b.Check(0, other); err != nil {
				t.Errorf("another histogram's reservation: %v", err)
			}
			sp, _ := b.Spent(0)
			if got, _ := sp.RDP.At(2); got != 0.1 || len(sp.Reservations) != 1 {
				t.Errorf("spend %v at λ=2, reservations %v; want one reservation's", got, sp.Reservations)
			}
			if held, _ := b.Reserved(1, "pages"); held {
				t.Error("period 1 holds period 0's reservation")
			}
		})
	}
}
