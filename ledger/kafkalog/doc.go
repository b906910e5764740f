// Package kafkalog is the stage's release log on a compacted Kafka topic: the
// same durable memory as package ledger (which releases were made, with
// which values, and what each budget period has spent), kept in Kafka
// instead of a bbolt file, so that a new owner on any machine restores it
// from Kafka alone (issue #14). A *Log satisfies ledger.Store, as the bbolt
// *ledger.Ledger does; the stage uses it with state.ledger: kafka (the
// pipeline opens it in every consumer-group generation that is assigned
// the input partitions, under config.LedgerTransactionalID). bbolt stays
// the single-process default.
//
// # Responsibility and invariant
//
// A [Log] is one ledger partition, owned by exactly one transactional id
// (the owner's, fixed: derive it from the ledger topic and partition only,
// as config.LedgerTransactionalID does — never from the instance or the
// consumer group, whose change would give the log a second, unfenced
// writer). It has the meaning of [ledger.Ledger]: [Log.RecordWindow]
// records the units of one window and the period's spend after them, all or
// nothing; [Log.Lookup] finds a recorded unit, which the caller republishes
// with its recorded values instead of drawing again; [Log.MarkPublished]
// records that a unit's messages were acknowledged. (The methods that write
// take a context; the others read memory.) The invariant is the
// ledger's: a unit recorded is never recorded again (ledger.ErrAlreadyRecorded),
// across owners too, and a period's recorded spend is the spend of exactly
// the units recorded.
//
// # Records
//
// Every state change is a set of records written in one Kafka transaction
// by a kgo transactional producer, to the one partition of the log, keyed so
// that compaction keeps the latest state per key:
//
//	unit/<window start ms>/<histogram>  ledger.Unit as JSON (as bbolt stores it);
//	                                    MarkPublished rewrites it with Published.
//	                                    A unit over 512 KiB is split: this record
//	                                    holds it without its messages and their
//	                                    part count ("message_parts"), and
//	unitpart/<window start ms>/<i>/<h>  its messages i (JSON array, ≤ 512 KiB per
//	                                    record, in the unit's transaction; never
//	                                    rewritten, tombstoned with the unit)
//	spend/<period ms>                   the period's RDP spend (ledger.Curve), absolute
//	approx/<period ms>                  the period's (ε, δ) spend (ledger.Approx), absolute
//	limit/<period ms>                   the period's budget (ledger.Limit), absolute; only lowered (ledger.LowerLimit)
//	meta                                ledger.Meta, written once (SetMeta)
//	reservation/<period ms>/<key>       a period reservation (ledger.Unit.Reservation);
//	                                    value the key of the unit that made it
//	admit/<period ms>/<end ms>/<chunk>  the user hashes admitted to the window ending
//	                                    at end by the cross-window bound (8 bytes
//	                                    each, ascending, ≤ 65536 per record)
//	admitv/<window ms>/<period ms>/…    the same for the histograms whose own window
//	                                    is <window ms> long (histograms[].window)
//	user_hash_key                       the 16-byte user hash key, written once (a secret)
//	last_window_end                     the largest window end recorded (decimal ms)
//	input_partitions                    the input topic's partition count and its last
//	                                    change (Partitions; the distributed mode's
//	                                    completeness marker, NotePartitions)
//	open                                the barrier an owner commits when it opens
//
// A window's units, its period's spend, approx spend and budget, the
// reservations its units make, its admissions (with tombstones for the
// admissions of earlier periods) and the new last window end are one
// transaction (RecordWindowAdmitted): after a restore they are all there or
// none is, as in the bbolt ledger's one transaction. A period's admissions
// are the sum over its admit records (each written once); a tombstone of
// any of them drops the period (they are only ever tombstoned together).
//
// Every record carries the header kafkalog-format=1, except a split unit's
// records, which carry kafkalog-format=2 (a version that knows only 1
// refuses them rather than restoring a unit without its messages); a record
// without either, or a split unit without all its parts, makes Open fail
// (ErrIncompatible). Prune writes tombstones (null values).
// The in-memory state is the fold of the committed records in log order;
// after a commit the log applies to memory exactly the records it committed,
// with the code that restores them.
//
// # Opening: fence, barrier, restore
//
// [Open] (1) runs InitProducerID for the transactional id, which bumps the
// producer epoch: every older producer with this id is fenced, and the
// coordinator aborts its open transaction (writing abort markers) before
// answering, or completes a commit already prepared; (2) commits one
// barrier record (key "open") in a transaction of its own, and notes its
// offset B; (3) reads the partition from its start, read_committed, and folds
// every data record below B into the state, stopping at the first record at
// or after B. The barrier is what tells the reader it has reached the end:
// the record just below the last stable offset may be a transaction marker
// or may be compacted away, while the barrier is committed data that only a
// newer barrier can shadow (and a reader that meets a newer owner's barrier,
// at an offset above B, stops there as well: it is already fenced). An open
// transaction of another transactional id on the partition holds the last
// stable offset back, and Open waits for it to end (the broker aborts it at
// its transaction timeout) or for ctx. Open reads the whole partition:
// compaction bounds it to one record per key, Prune bounds the keys.
//
// # Why a zombie owner cannot make a different value visible (fencing)
//
// Let A be an older owner (epoch a) and B the owner that opened last (epoch
// b > a, from its InitProducerID, step 1). Readers are read_committed
// (restoring owners; nothing else reads the topic).
//
//  1. Commits are ordered by epochs. The transaction coordinator accepts
//     produce, AddPartitionsToTxn and EndTxn for the id only at the current
//     epoch. After B's InitProducerID returned, every request of A carries
//     epoch a < b and is refused (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED):
//     A commits nothing more. A transaction of A still open at that moment
//     was aborted by the coordinator before InitProducerID returned; its
//     records are in the log but behind an abort marker, and read_committed
//     readers never see them. A commit of A already prepared completes first
//     (the coordinator answers CONCURRENT_TRANSACTIONS until it has).
//  2. B's restore is complete. Everything A committed was committed before
//     B's InitProducerID returned, so it lies below B's barrier, which B
//     commits at epoch b afterwards; B reads read_committed up to the
//     barrier, so its state is exactly the fold of every transaction
//     committed before it opened, and nothing aborted.
//  3. B's state stays complete while B is the owner: only the current epoch
//     can commit, so between B's barrier and any commit of B no other
//     transaction commits, unless a newer owner C opened, in which case B's
//     commit is refused (step 1 with B as the zombie) and B's RecordWindow
//     returns ErrFenced.
//
// Therefore for every (histogram, window): either A committed its unit before
// B opened, and B restores it, finds it (Lookup), and republishes exactly
// those values (the Releaser never redraws a recorded window); or A did not,
// and A's draw sits at most in an aborted transaction that no reader ever
// sees, and A's RecordWindow fails with ErrFenced, so a caller that follows
// the write-ahead order (record, then publish) never publishes A's draw.
// B's check for ErrAlreadyRecorded is against the whole committed log, so
// no window is recorded twice with different values.
//
// A Log that met any error inside a transaction — fenced (ErrFenced), or
// anything whose outcome is unknown, such as a commit whose answer was lost
// (ErrUnusable) — refuses every later call, reads included: its memory may
// disagree with the committed log. The process must close it and exit, or
// open a new Log (which restores from the topic) only if it still owns the
// id. A fenced Log never initialises its producer id again: it sends no
// abort (the newer owner's InitProducerID aborted its transaction) and no
// later request. After an error before the commit it tries one abort.
// After a failed commit it sends none: the commit's outcome may be
// unknown, and kgo's abort would then re-initialise the producer id at the
// old epoch (its KIP-360 recovery). A Kafka coordinator refuses a stale
// epoch there, but the embedded broker (kfake) accepted it and bumped the
// epoch, fencing a newer owner that had opened meanwhile (review of issue
// #14; TestZombieUnconfirmedCommitDoesNotFenceNewOwner). A transaction left
// open that way is aborted by the next owner's InitProducerID or by the
// transaction timeout.
//
// # What this does not cover
//
//   - A zombie that committed a unit before the new owner opened: the new
//     owner restores it and republishes the same values. The zombie may
//     also still publish it (the output topic is not transactional):
//     duplicates, identical, with the same release_id. This is correct.
//   - Who owns the id is decided outside: the newest Open wins. Two
//     processes opening the same id in turn fence each other in turn (each
//     restores the other's commits, so values stay single), but they make no
//     progress; ownership must come from a group assignment (the pipeline
//     opens the log only in a generation assigned the input partitions).
//   - Two different transactional ids writing one ledger partition are not
//     fenced against each other. The id must be a function of the partition.
//   - A caller that publishes before RecordWindow returned nil, or after it
//     returned an error: the write-ahead order is the caller's part.
//   - Lost committed records: the topic must not lose acknowledged data
//     (see the settings below). The transactional producer always writes
//     with acks=all.
//   - The budget of a period whose histograms are owned by different logs:
//     each Log keeps the spend of its own units only.
//
// # Topic settings
//
// The log topic must have:
//
//   - cleanup.policy=compact, exactly: never "delete" nor "compact,delete",
//     so no record is ever time- or size-deleted (a deleted unit would be
//     drawn again after a restore). Checked at Open.
//   - unclean.leader.election.enable=false (Kafka's default): an unclean
//     election can drop committed records. Checked at Open where the broker
//     reports it.
//   - In production, replication.factor ≥ 3 and min.insync.replicas ≥ 2.
//     Checked at Open when the partition has more than one replica.
//   - max.message.bytes at least the largest unit record (a unit holds one
//     message per declared group of its histogram).
//   - delete.retention.ms: how long Prune's tombstones stay readable; a
//     restore slower than that may bring back a pruned (published, hence
//     harmless) unit. Kafka's default (1 day) is fine.
//   - min.compaction.lag.ms, segment.ms: how soon compaction runs; any
//     value is correct.
//   - transactional.id.expiration.ms (broker) longer than an owner stays
//     idle, or the broker forgets the epoch and the next Open starts a new
//     producer id (still correct: the zombie's id is then unknown to the
//     coordinator and its writes fail).
//
// [EnsureTopic] creates a topic with cleanup.policy=compact (tests, the
// embedded broker). Only the stage may write the topic and use its
// transactional ids (ACLs): a writer could record a smaller spend. Only the
// stage may read it: it holds the released values before they are
// published and the user hash key, with which a producer could predict
// which events count.
//
// Readers of the topic must be franz-go kgo clients with read_committed.
// segmentio/kafka-go returns aborted records and transaction markers as
// ordinary messages even with ReadCommitted (its issue #1332): no kafka-go
// client may read this topic.
package kafkalog
