// Package source reads the input topic for the stage: the consumer group
// membership (GroupConfig.Join, Member, Standby: joining, leaving and
// standing by with bounded waits; the all-to-one balancer in
// source/allone), the per-partition fetch loop (Fetcher: read_committed
// Fetch requests on kmsg over a connection of its own), the input topic's
// partition count (PartitionCounter), offsets (OffsetTracker: the commit
// point of a partition) and the output topic's message count for the
// continuity check (TopicMessages). With sink, it is the only step of the
// data flow that speaks Kafka: kafka-go, kgo and kmsg are imported here,
// in sink and in pipeline's wiring, and nowhere below.
//
// Invariant: a partition is read in offset order, records of aborted
// transactions and control records are never returned, and an offset is
// committed only once every record before it belongs to a released window
// or was dropped (OffsetTracker).
package source
