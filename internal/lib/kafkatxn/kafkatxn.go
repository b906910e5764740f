// Package kafkatxn tells a transaction the broker aborted at its timeout
// from one a newer owner fenced: the one rule the release log
// (ledger/kafkalog) and the distributed mode's bounders
// (partial/kafkapartial) share. Both answer a producer the same way (an
// epoch refusal, or with transactions v2 an INVALID_TXN_STATE or
// TRANSACTION_ABORTABLE commit), so the coordinator's view of the
// transactional id decides (DescribeTransactions).
package kafkatxn

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// EpochRefused reports whether err is the broker refusing the producer's
// epoch: a newer owner fenced it, or the broker aborted its transaction
// after the timeout and bumped the epoch.
func EpochRefused(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

// TimeoutLike reports whether err is how the broker answers a producer
// whose transaction it aborted after the timeout: an epoch refusal before
// transactions v2 (KIP-890); with it, the commit of the aborted
// transaction is refused as INVALID_TXN_STATE (the epoch was bumped by the
// abort, and the last outcome was an abort), or TRANSACTION_ABORTABLE. A
// newer owner's fence looks the same (NewerOwner).
func TimeoutLike(err error) bool {
	return EpochRefused(err) || errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.TransactionAbortable)
}

// NewerOwner reports whether the coordinator's view dt of the
// transactional id shows an owner after a transaction started under
// producer id and epoch: another producer id; an epoch bumped more than
// once (the timeout's abort bumps it once, a new owner's InitProducerID
// again); or, at the once-bumped epoch, a transaction that is not the
// aborted one (ongoing, committing or committed).
//
// Ambiguous, and read as a timeout: an Empty or CompleteAbort state at the
// once-bumped epoch. The timeout's abort leaves one of them (kfake, the
// embedded broker, leaves Empty), and so does a new owner's InitProducerID
// when the old owner's transaction never reached the coordinator (a
// network cut while its AddPartitions was retried: the second privacy
// review). The old owner then reopens at once and fences the new one,
// which fences back after a session timeout, until the group revokes the
// partition from the old owner: churn, not a double release — every owner
// restores the committed progress, and fencing keeps one partial per
// (window, partition).
func NewerOwner(id int64, epoch int16, dt kadm.DescribedTransaction) bool {
	if dt.ProducerID != id || dt.ProducerEpoch > epoch+1 {
		return true
	}
	switch dt.State {
	case "Ongoing", "PrepareCommit", "CompleteCommit", "PrepareEpochFence":
		return dt.ProducerEpoch > epoch
	}
	return false
}
