// Package distributed runs the distributed mode (kafka.distributed.enabled):
// N replicas of the stage share the input partitions.
//
// Every instance runs two roles, each a member of its own consumer group:
//
//   - the bounder (bounder.go) is a member of kafka.group_id on the
//     input topic, with a cooperative-sticky assignment, and reads, per
//     assigned input partition p, with the consume loop (package consume) on a
//     session of its own: decode → window rule → bound → count. When p's watermark
//     passes a window it writes, in one Kafka transaction under the
//     transactional id of p (config.Kafka.BoundTransactionalID), the
//     window's exact bounded partial counts to the partials topic and p's
//     progress (input offset, next window, admissions) to the progress
//     topic. The new owner of p fences the old one with that id, restores
//     the progress and goes on: nothing but Kafka holds a bounder's state.
//   - the releaser (releaser.go) is a member of
//     config.Kafka.ReleaseGroupID on the partials topic (one partition):
//     the member assigned it opens the release log (fencing the previous
//     releaser, ledger/kafkalog), merges the partials of a window once
//     every input partition's partial of it was read (a partition that
//     passed it without one holds it: partial.Merger, "Gaps"), and
//     records, publishes and marks
//     it as the single-process stage does (node.Node.PublishUnits), then commits its
//     partials offset.
//
// Package partial holds the wire format and its argument; the package doc
// of ledger/kafkalog the release log's fencing argument.
//
// The files: distributed.go (Run: both roles, their stop), bounder.go
// (the bounder), releaser.go (the releaser), features.go (per-histogram
// windows and average histograms across partitions), first.go (a fresh
// partition's first offset), lso.go (the partials topic's last stable
// offset), partitions.go (partitions added), progressid.go (the progress
// topic's identity).
package distributed
