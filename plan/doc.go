// Package plan derives the stage's privacy plan from its configuration:
// the sensitivities of each histogram's count vector (DeriveSensitivity,
// from the contribution bounds and the neighbour relation), the calibrated
// mechanism of every release (count histograms: CountPlan; average
// histograms: AveragePlan), and what one window charges the budget period
// (Charges). It is pure privacy arithmetic: no Kafka, no I/O; `stage
// validate`, `stage plan`, the HTTP API and the running stage all read the
// same Plan.
//
// Invariant: sensitivities are derived from the bounds, never assumed, and
// a planned period — every window's charges composed — converts to at most
// the period's (ε, δ) budget (TestPlannedScheduleFitsTheBook).
package plan
