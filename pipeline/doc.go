// Package pipeline wires the steps of the stage's data flow together and
// runs them; it holds no step of its own. Data flows one way:
//
//	source (consumer group, partition fetch) → decode → window (which
//	events count) → aggregate (bound, count, average) → window
//	(watermark closes windows) → release (draw, charge in the budget
//	book, record in the ledger) → sink (publish) → ledger (mark
//	published) → source (commit offsets)
//
// Options, New and Run (run.go: the session/generation lifecycle); the
// per-partition consume loop glue (consume.go: fetch → decode → window
// rule → aggregate, with the hot path batching its shared updates); the
// release loop glue (release.go: watermark → release.Record → sink →
// ledger mark → commit); the one place where the config becomes the steps'
// parameters (assemble.go); stats, status and readiness.
//
// Invariant: every release is recorded (values and charge) before it is
// published, and an offset is committed only after every window its
// records count in is released and marked published; so a window is
// released at most once and a restart republishes what was recorded,
// never redraws it.
//
// # Which events count
//
// Whether an event counts depends only on that event's own times (ground
// rule 7): the argument, the arrival watermark (the default) and the
// opt-in event-time watermark are in package window's doc (window.Rule,
// window.Watermarks); handle applies the rule, the releaser closes windows
// as the watermark passes them.
//
// # Why kafka-go's ConsumerGroup and not its Reader
//
// kafka-go's Reader with a GroupID merges all assigned partitions into one
// stream and tells its user nothing about assignment or revocation. The stage
// needs both: per-partition watermarks, per-partition commit points that
// never pass an unreleased window's first offset, and dropping every open
// window when partitions move. ConsumerGroup/Generation gives exactly that: a
// generation lists its assignments, its Start goroutines are cancelled when
// the generation ends, and CommitOffsets commits what we choose. Each
// assigned partition is then read by a fetch loop on a connection to its
// leader (source.Fetcher), which `stage bench` measured as much cheaper per message
// than a partition-bound kafka.Reader, with read_committed isolation:
// records of aborted transactions and commit/abort markers are skipped, and
// nothing at or past the last stable offset (an open transaction) is read;
// such a partition is behind, not caught up (see window.Watermarks).
// Before closing a window the releaser checks that the generation was assigned every
// partition the input topic has (allAssigned).
//
// # One active instance
//
// A release covers every event of its window, whichever partition carried
// it, so one process must own every partition of the input topic. The stage
// joins its group with a balancer that assigns all partitions to one member
// (source/allone). A standby shares the active instance's state.dir and
// waits on the ledger's lock before it joins the group (continuity.go); it
// takes over, from the ledger and the committed offsets, when the active one
// exits.
package pipeline
