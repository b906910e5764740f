// Package consume is the counting step both modes run on the input
// partitions they own: per partition, fetch (source) → decode → window
// rule → bound and count (aggregate) into the windows of every size still
// open (Consume, consume.go; windows.go), and, when the owner's watermark
// passes a window, close it (CloseWindow, close.go) with the cross-window
// bound's admissions. A Session is one ownership's state; assemble.go is
// the one place where the config becomes the aggregator's parameters.
//
// A histogram with group_by and no listed groups (config.Histogram.Selects,
// issue 30) is counted per group key (aggregate.HistSpec.Selects): a closed
// Boundary hands its keys, with their distinct users after bounding, to
// the releaser by config index (Boundary.Keys and Key, release.Keyed),
// which selects privately which of them are released.
//
// # Which events count
//
// Whether an event counts depends only on that event's own times (ground
// rule 7): the argument, the arrival watermark (the default) and the
// opt-in event-time watermark are in package window's doc (window.Rule,
// window.Watermarks); handle applies the rule; the owner's releaser closes windows
// as the watermark passes them.
//
// # What a restart re-reads
//
// An event's offset is held until the window of every size it belongs to
// is released, whether a cross-window bound dropped it there or not
// (windows.go, "Offsets"): a restart re-reads every event of every open
// window, so what it counts there — under a changed bound too — depends on
// that window's events and the config, never on where other users' events
// held the commit point.
package consume
