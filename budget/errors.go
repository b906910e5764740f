package budget

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinel errors. Every error the package returns matches one of them with
// errors.Is.
var (
	// ErrInvalidArgument: an argument is out of its valid range (see
	// [ArgumentError] for which and why).
	ErrInvalidArgument = errors.New("budget: invalid argument")
	// ErrEmptyCurve: a curve has no orders (the zero Curve).
	ErrEmptyCurve = errors.New("budget: empty rdp curve")
	// ErrGridMismatch: two curves (or a curve and an accountant) are on
	// different grids of orders.
	ErrGridMismatch = errors.New("budget: rdp curves are on different order grids")
	// ErrBudgetExceeded: a spend would push the total past the limit (see
	// [ExceededError]).
	ErrBudgetExceeded = errors.New("budget: privacy budget exceeded")
	// ErrInfeasible: no calibration meets the requested (ε, δ) (see
	// [InfeasibleError]).
	ErrInfeasible = errors.New("budget: privacy target infeasible")
)

// ArgumentError reports an argument outside its valid range.
type ArgumentError struct {
	Name  string  // the argument, e.g. "delta"
	Value float64 // what was given
	Want  string  // the valid range, e.g. "in (0, 1)"
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("budget: %s = %s: must be %s", e.Name, fmtFloat(e.Value), e.Want)
}

// Is makes errors.Is(err, ErrInvalidArgument) true.
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

// ExceededError is returned by [Accountant.Spend] (and [Accountant.CanSpend],
// [Accountant.Restore]) when the spend would make the period's total exceed
// its (ε, δ) limit. errors.Is(err, ErrBudgetExceeded) is true.
type ExceededError struct {
	// Epsilon is the ε (at Delta) the total would have converted to after the
	// spend; +Inf if no order of the grid has a finite total.
	Epsilon float64
	// Order is the RDP order at which Epsilon is attained (0 if +Inf).
	Order float64
	// Spent is the ε (at Delta) of what was already spent before the refused
	// spend.
	Spent float64
	// Limit and Delta are the accountant's (ε, δ) budget.
	Limit float64
	Delta float64
	// Restored is true when the error comes from Restore: the ledger's total
	// already exceeds the limit (the state was restored anyway).
	Restored bool
}

func (e *ExceededError) Error() string {
	what := "release refused: it would bring the period's total"
	if e.Restored {
		what = "restored ledger already exceeds the budget: the period's total is"
	}
	at := ""
	if e.Order > 0 {
		at = " (rdp order " + fmtFloat(e.Order) + ")"
	}
	return fmt.Sprintf("budget: %s to ε = %s at δ = %s%s, over the limit ε = %s "+
		"(spent before: ε = %s); to allow it raise privacy.budget.epsilon or privacy.budget.delta, "+
		"lengthen window.size or shorten privacy.budget.period (fewer releases per period), "+
		"or lower contribution bounds (smaller sensitivity)",
		what, fmtFloat(e.Epsilon), fmtFloat(e.Delta), at, fmtFloat(e.Limit), fmtFloat(e.Spent))
}

// Is makes errors.Is(err, ErrBudgetExceeded) true.
func (e *ExceededError) Is(target error) bool { return target == ErrBudgetExceeded }

// InfeasibleError is returned by [NewPlan] when no per-release calibration
// meets the requested (ε, δ). errors.Is(err, ErrInfeasible) is true.
type InfeasibleError struct {
	Epsilon  float64 // requested total ε
	Delta    float64 // requested δ
	Releases int     // composed releases per period
	// MinEpsilon is the smallest ε the conversion can reach at Delta on the
	// grid, whatever the noise (0 if not the reason).
	MinEpsilon float64
	Reason     string
}

func (e *InfeasibleError) Error() string {
	return fmt.Sprintf("budget: cannot meet ε = %s at δ = %s over %d releases: %s",
		fmtFloat(e.Epsilon), fmtFloat(e.Delta), e.Releases, e.Reason)
}

// Is makes errors.Is(err, ErrInfeasible) true.
func (e *InfeasibleError) Is(target error) bool { return target == ErrInfeasible }

func fmtFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
