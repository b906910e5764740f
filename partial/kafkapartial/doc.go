// Package kafkapartial moves the distributed mode's records (package
// partial) through Kafka with franz-go's kgo: the bounders' transactional
// writer of partials, progress and admissions, the restore of a source
// partition's progress, the releaser's read_committed reader of the
// partials topic (Reader), and the creation and check of the internal
// topics (EnsureTopics).
//
// Every internal topic is written transactionally and read with kgo,
// read_committed, only: segmentio/kafka-go returns the records of aborted
// transactions and the transaction markers as ordinary messages (its issue
// #1332), so a partial of a fenced bounder would be counted.
//
// # Topics
//
//	<prefix>partials  1 partition, cleanup.policy=delete,
//	                  retention.ms = max(7 days, 2 × privacy.budget.period)
//	<prefix>progress  one partition per input partition, cleanup.policy=compact
//	<ledger topic>    1 partition, cleanup.policy=compact, retention.ms=-1
//
// The partials topic has one partition on purpose: one releaser, one
// budget book, one order of windows. They hold exact bounded counts and
// user hashes: give them the input topic's ACLs.
package kafkapartial
