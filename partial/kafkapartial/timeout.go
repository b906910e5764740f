package kafkapartial

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/dpstage/stage/internal/lib/kafkatxn"
)

// ErrTimedOut: a transaction of the Writer ran longer than the transaction
// timeout (WriterConfig.TransactionTimeout) — the bounder paused, or the
// broker was slow — and the broker aborted it, bumping the producer's
// epoch; no newer owner opened the partition's transactional id. The
// Writer refuses every later call; the partition's progress is what was
// committed before, so the owner opens a new Writer (which restores it)
// and goes on. The same rule as ledger/kafkalog's ErrTimedOut.
var ErrTimedOut = errors.New("kafkapartial: transaction aborted by the broker after the transaction timeout")

// txnStart is what transact notes before it begins a transaction: when,
// and the producer id and epoch it runs under (known: they were had).
type txnStart struct {
	at    time.Time
	id    int64
	epoch int16
	known bool
}

// timedOut reports whether the failure err of the transaction started at
// st is the broker's timeout abort rather than a newer owner's fence: the
// transaction ran for the transaction timeout, and the coordinator shows
// the transactional id with st's producer id, its epoch bumped once (by
// the abort) and no transaction of a newer owner at it. When the
// coordinator cannot be asked, the elapsed time alone decides. w.mu held.
func (w *Writer) timedOut(ctx context.Context, st txnStart, err error) (time.Duration, bool) {
	if !kafkatxn.TimeoutLike(err) || st.at.IsZero() {
		return 0, false
	}
	ran := time.Since(st.at)
	if ran < w.cfg.TransactionTimeout {
		return ran, false
	}
	if !st.known {
		return ran, true
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	d, derr := kadm.NewClient(w.cl).DescribeTransactions(dctx, w.cfg.TransactionalID)
	cancel()
	if derr != nil {
		return ran, true
	}
	dt, ok := d[w.cfg.TransactionalID]
	if !ok || dt.Err != nil {
		return ran, true
	}
	return ran, !kafkatxn.NewerOwner(st.id, st.epoch, dt)
}

// classifyTxn is classify for the failure err of the transaction started
// at st, before any abort: ErrTimedOut for the broker's timeout abort
// (timedOut). w.mu held.
func (w *Writer) classifyTxn(ctx context.Context, st txnStart, err error) error {
	if ran, ok := w.timedOut(ctx, st, err); ok {
		return fmt.Errorf("%w (transactional id %q: the transaction ran %v, the timeout is %v; raise kafka.distributed.transaction_timeout if the broker or this process is that slow): %w",
			ErrTimedOut, w.cfg.TransactionalID, ran.Round(time.Millisecond), w.cfg.TransactionTimeout, err)
	}
	return w.classify(err)
}
