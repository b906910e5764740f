// Package pipeline wires the steps of the stage's data flow together and
// runs them; it holds no step of its own. Data flows one way:
//
//	source (consumer group, partition fetch) → decode → window (which
//	events count) → aggregate (bound, count, average) → window
//	(watermark closes windows) → release (draw, charge in the budget
//	book, record in the ledger) → sink (publish) → ledger (mark
//	published) → source (commit offsets)
//
// New builds a process's shared state (package node: the config's
// parameters, the clients, stats and readiness, the release log once
// attached); Run checks the input topic's record times and starts one of
// two sets of roles on it:
//
//   - package single: the single-process stage, one member of the
//     consumer group owning every input partition, counting (package
//     consume) and releasing;
//   - package distributed: the distributed mode's bounder (per input
//     partition, on N replicas) and releaser (one active, the others
//     standbys).
//
// Imports point down: pipeline → single, distributed → consume → node →
// the steps (internal/layering checks it).
//
// Invariant: every release is recorded (values and charge) before it is
// published, and an offset is committed only after every window its
// records count in is released and marked published; so a window is
// released at most once and a restart republishes what was recorded,
// never redraws it.
package pipeline
