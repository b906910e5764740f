package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/dpstage/stage/internal/lib/kafkatxn"
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

// classifyTxn is classify for a failure inside the transaction started at
// st: a refusal the broker gives after aborting a transaction at its
// timeout (kafkatxn.TimeoutLike) is a timeout (ErrTimedOut), not a fence, when the
// transaction had run for the transaction timeout and the coordinator
// shows no newer owner (kafkatxn.NewerOwner). When the coordinator cannot be asked
// (DescribeTransactions refused or unsupported), the elapsed time alone
// decides. l.mu held.
func (l *Log) classifyTxn(ctx context.Context, st txnStart, err error) error {
	if !kafkatxn.TimeoutLike(err) || st.at.IsZero() {
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
			if dt, ok := d[l.cfg.TransactionalID]; ok && dt.Err == nil && kafkatxn.NewerOwner(st.id, st.epoch, dt) {
				return l.classify(err) // a newer owner initialised the id
			}
		}
	}
	return fmt.Errorf("%w (transactional id %q: the transaction ran %v, the timeout is %v; raise kafka.distributed.transaction_timeout if the broker or this process is that slow): %w",
		ErrTimedOut, l.cfg.TransactionalID, ran.Round(time.Millisecond), l.cfg.TransactionTimeout, err)
}
