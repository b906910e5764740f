// Package ledgertest holds checks of a release log (ledger.Store) that
// the tests of several packages share.
package ledgertest

import (
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
