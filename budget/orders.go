package budget

import (
	"math"
	"slices"
)

// DefaultOrders returns (a fresh copy of) the RDP orders Google's
// dp_accounting uses by default (DEFAULT_RDP_ORDERS in
// python/dp_accounting/dp_accounting/rdp/rdp_privacy_accountant.py:
// [1 + x/10 for x in 1..99] + [11..63] + [128, 256, 512, 1024]), i.e.
// 1.1, 1.2, …, 10.9 (computed as 1 + x/10 exactly as there), the integers 11
// to 63, then 128, 256, 512 and 1024: 156 orders, strictly increasing.
//
// Add the calibration order with [WithOrder].
func DefaultOrders() []float64 {
	out := make([]float64, 0, 99+53+4)
	for x := 1; x < 100; x++ {
		out = append(out, 1+float64(x)/10)
	}
	for i := 11; i < 64; i++ {
		out = append(out, float64(i))
	}
	return append(out, 128, 256, 512, 1024)
}

// WithOrder returns a sorted copy of orders with order added (once: if it is
// already there, the copy is just orders). orders must be a valid grid
// (strictly increasing, every order finite and > 1) and order finite and > 1;
// otherwise an [*ArgumentError].
func WithOrder(orders []float64, order float64) ([]float64, error) {
	if err := validateOrders(orders); err != nil {
		return nil, err
	}
	if !(order > 1) || math.IsInf(order, 0) {
		return nil, &ArgumentError{Name: "order", Value: order, Want: "a finite rdp order > 1"}
	}
	i, found := slices.BinarySearch(orders, order)
	out := make([]float64, 0, len(orders)+1)
	out = append(out, orders[:i]...)
	if !found {
		out = append(out, order)
	}
	return append(out, orders[i:]...), nil
}

// validateOrders checks a grid: non-empty, strictly increasing, every order
// finite and > 1 (the conversion of 000 eq. (2) needs λ > 1).
func validateOrders(orders []float64) error {
	if len(orders) == 0 {
		return ErrEmptyCurve
	}
	for i, o := range orders {
		if !(o > 1) || math.IsInf(o, 0) {
			return &ArgumentError{Name: "order", Value: o, Want: "a finite rdp order > 1"}
		}
		if i > 0 && !(o > orders[i-1]) {
			return &ArgumentError{Name: "order", Value: o, Want: "strictly greater than the previous order " + fmtFloat(orders[i-1]) + " (grids are strictly increasing)"}
		}
	}
	return nil
}

// sameGrid reports whether a and b are the same grid of orders.
func sameGrid(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
