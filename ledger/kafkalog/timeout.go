package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrTimedOut: a transaction of the log ran longer than the transaction
// timeout (Config.TransactionTimeout) — its owner paused, or the broker
// was slow — and the broker aborted it, bumping the producer's epoch. The
// broker then refuses the producer as it refuses a fenced one
// (InvalidProducerEpoch, ProducerFenced), but no newer owner exists: the
// Log is dead as after ErrUnusable (reopen it to restore from the topic).
// A releaser reports it as a timeout, not as "fenced by a newer owner".
var ErrTimedOut = errors.New("kafkalog: transaction aborted by the broker after the transaction timeout")

// txnStart is what transact notes before it begins a transaction, for
// classifyTxn: when, and the producer id and epoch it runs under.
type txnStart struct {
	at    time.Time
	id    int64
	epoch int16
	known bool // id and epoch were had
}

// epochRefused reports whether err is the broker refusing the producer's
// epoch: a newer owner fenced it, or the broker aborted its transaction
// after the timeout and bumped the epoch.
func epochRefused(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

// timeoutLike reports whether err is how the broker answers a producer
// whose transaction it aborted after the timeout: an epoch refusal before
// transactions v2 (KIP-890); with it, the commit of the aborted
// transaction is refused as INVALID_TXN_STATE (the epoch was bumped by
// the abort, and the last outcome was an abort), or TRANSACTION_ABORTABLE.
func timeoutLike(err error) bool {
	return epochRefused(err) || errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.TransactionAbortable)
}

// newerOwner reports whether the coordinator's view of the transactional
// id shows an owner after the transaction started at st: another producer
// id, an epoch bumped more than once (the timeout's abort bumps it once, a
// new owner's InitProducerID again), or a transaction at the bumped epoch
// that is not the aborted one (ongoing, or committing or committed).
func newerOwner(st txnStart, dt kadm.DescribedTransaction) bool {
	if dt.ProducerID != st.id || dt.ProducerEpoch > st.epoch+1 {
		return true
	}
	switch dt.State {
	case "Ongoing", "PrepareCommit", "CompleteCommit", "PrepareEpochFence":
		return dt.ProducerEpoch > st.epoch
	}
	return false
}

// classifyTxn is classify for a failure inside the transaction started at
// st: a refusal the broker gives after aborting a transaction at its
// timeout (timeoutLike) is a timeout (ErrTimedOut), not a fence, when the
// transaction had run for the transaction timeout and the coordinator
// shows no newer owner (newerOwner). When the coordinator cannot be asked
// (DescribeTransactions refused or unsupported), the elapsed time alone
// decides. l.mu held.
func (l *Log) classifyTxn(ctx context.Context, st txnStart, err error) error {
	if !timeoutLike(err) || st.at.IsZero() {
		return l.classify(err)
	}
	ran := time.Since(st.at)
	if ran < l.cfg.TransactionTimeout {
		return l.classify(err)
	}
	if st.known {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		d, derr := kadm.NewClient(l.cl).DescribeTransactions(dctx, l.cfg.TransactionalID)
		cancel()
		if derr == nil {
			if dt, ok := d[l.cfg.TransactionalID]; ok && dt.Err == nil && newerOwner(st, dt) {
				return l.classify(err) // a newer owner initialised the id
			}
		}
	}
	return fmt.Errorf("%w (transactional id %q: the transaction ran %v, the timeout is %v; raise kafka.distributed.transaction_timeout if the broker or this process is that slow): %w",
		ErrTimedOut, l.cfg.TransactionalID, ran.Round(time.Millisecond), l.cfg.TransactionTimeout, err)
}
