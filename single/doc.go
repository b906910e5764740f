// Package single runs the single-process stage: one active member of the
// consumer group owns every input partition, counts them (package
// consume), closes windows as the watermark passes them, releases them
// (record, publish, mark published: node.Node) and commits offsets.
//
// single.go holds the generation lifecycle (Run, runGeneration), release.go
// the release loop (releaseLoop: watermark → release.Record → sink →
// ledger mark → commit).
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
// waits on the ledger's lock before it joins the group (node.Node.OpenLedger); it
// takes over, from the ledger and the committed offsets, when the active one
// exits.
package single
