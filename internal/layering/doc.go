// Package layering holds only a test of the stage's package layout: one
// package per step of the data flow, with the Kafka clients confined to
// source, sink, ledger/kafkalog and pipeline's wiring (TestNoKafkaBelowPipeline);
// the low-level helpers under internal/lib at the bottom and the tools of
// internal/ on top, every import pointing down (TestImportsPointDown).
package layering
