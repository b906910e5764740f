package mechanism

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidParameter is the sentinel every validation error of this package
// matches with errors.Is: a bad Spec given to New, bad counts or output
// buffers given to Release, bad arguments to DirichletRenyi.
var ErrInvalidParameter = errors.New("mechanism: invalid parameter")

// ParamError reports one invalid input: which field, the offending value, and
// what it must satisfy. Its message is lowercase and says what to fix, e.g.
//
//	mechanism: order must be > 1, got 0.5
//
// Field names are stable identifiers (snake_case, as in the `stage calibrate`
// JSON): "kind", "calibration", "order", "rdp_epsilon", "l1_sensitivity",
// "l2_sensitivity_sq", "linf_sensitivity", "lower_bound", "rng", "counts",
// "counts[i]", "out", "u", "u_prime", "u[i]", "u_prime[i]". Errors that concern the
// combination of several fields use the field whose change most directly fixes
// them.
type ParamError struct {
	Field  string // which input is invalid
	Value  any    // the offending value (float64, int or string)
	Reason string // what it must satisfy, e.g. "must be > 1"
}

// Error implements error.
func (e *ParamError) Error() string {
	switch v := e.Value.(type) {
	case string:
		return fmt.Sprintf("mechanism: %s %s, got %q", e.Field, e.Reason, v)
	case nil:
		return fmt.Sprintf("mechanism: %s %s", e.Field, e.Reason)
	default:
		return fmt.Sprintf("mechanism: %s %s, got %v", e.Field, e.Reason, v)
	}
}

// Is reports whether target is ErrInvalidParameter, so that
// errors.Is(err, ErrInvalidParameter) holds for every *ParamError.
func (e *ParamError) Is(target error) bool { return target == ErrInvalidParameter }

func paramErr(field string, value any, reason string) error {
	return &ParamError{Field: field, Value: value, Reason: reason}
}

// The checks below treat NaN and ±Inf explicitly, in the manner of
// google/differential-privacy go/checks: every comparison is written so that
// NaN fails it.

// checkFinitePositive: finite and > 0.
func checkFinitePositive(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || !(v > 0) {
		return paramErr(field, v, "must be finite and > 0")
	}
	return nil
}

// checkFiniteNonNegative: finite and ≥ 0.
func checkFiniteNonNegative(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || !(v >= 0) {
		return paramErr(field, v, "must be finite and >= 0")
	}
	return nil
}

// checkOrder: a finite RDP order λ > 1.
func checkOrder(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return paramErr(field, v, "must be finite and > 1")
	}
	if !(v > 1) {
		return paramErr(field, v, "must be > 1")
	}
	return nil
}
