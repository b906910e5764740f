package release

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/plan"
)

// With contribution.max_windows_per_user = K > 0 a histogram's period is
// charged one period reservation — its own, over its own windows and bound
// K_h (plan's package doc, "Views") (plan's package doc, "Charging: the
// period reservation"): the first unit of the histogram in the period
// charges it before any of its values leaves the process, the later units
// of the period are covered by it and charge nothing (ledger.Unit.
// Reservation, CoveredBy). The book says which reservations a period holds
// (budget.Book.Reserved), restored after a restart from the ledger.

// ReservationKey names the period reservation of histogram under the
// configuration that fixes its cost: the cross-window bound k, the
// neighbour relation and the reservation's charge — its RDP curve (count
// histograms) or (ε, δ) (average histograms). A change of any of them in
// the middle of a period makes a new key, and so a new reservation; the
// same configuration after a restart gives the same key. The key is the
// hex of the first 16 bytes of a SHA-256 over a length-prefixed encoding
// of those fields (floats by their IEEE bits).
func ReservationKey(histogram string, k int, neighbour string, c budget.Charge) string {
	return ViewReservationKey(histogram, 0, k, neighbour, c)
}

// ViewReservationKey is ReservationKey for a histogram with its own window
// of windowMs (histograms[].window; 0: window.size, the key of
// ReservationKey): the window is part of the key, because the admission
// state is per window size — a histogram given another window in the
// middle of a period starts a fresh admission state, so its releases under
// the new window must be covered by a reservation of their own, not by
// the one made under the old window.
func ViewReservationKey(histogram string, windowMs int64, k int, neighbour string, c budget.Charge) string {
	h := sha256.New()
	var n [8]byte
	put := func(v uint64) {
		binary.BigEndian.PutUint64(n[:], v)
		h.Write(n[:])
	}
	str := func(s string) {
		put(uint64(len(s)))
		h.Write([]byte(s))
	}
	str("stage period reservation v1")
	str(histogram)
	put(uint64(k))
	str(neighbour)
	if windowMs > 0 {
		str("window")
		put(uint64(windowMs))
	}
	orders, eps := c.RDP.Orders(), c.RDP.Epsilons()
	put(uint64(len(orders)))
	for i := range orders {
		put(math.Float64bits(orders[i]))
		put(math.Float64bits(eps[i]))
	}
	put(math.Float64bits(c.Epsilon))
	put(math.Float64bits(c.Delta))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// releaseRDP is one count release's (λ, ε)-RDP at order as charged: the
// mechanism's curve plus, for a Dirichlet release rounded to the grid, the
// grid residual (plan.CountPlan.Charge, budget.ChargeOf; issue #21). It is
// the mechanism's own value if the charge has no point at order.
func releaseRDP(cp *plan.CountPlan, order float64) float64 {
	if v, ok := cp.Charge.At(order); ok {
		return v
	}
	return cp.Mechanism.RDP(order)
}
