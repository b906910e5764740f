// Package node is one stage process's shared state and what both modes do
// with it: the parameters derived from the config, the Kafka clients'
// options and sinks, the counters (Stats), readiness and lag, and the
// release log once a role attaches it (Attach: the budget book, the
// releaser, the metadata, the user-hash key, pruning; continuity.go), the
// checks of a resumed session against the log (resume.go), publishing
// recorded units (publish.go) and the checks of the input topic's record
// times (recordtime.go).
//
// The roles that use a Node live above it: package single, package
// distributed, and the counting loop of package consume.
package node
