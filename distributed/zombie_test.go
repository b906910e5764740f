package distributed

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger/kafkalog"
)

// TestDistReleaserLostMidWriteExitsFenced (issue 28 item 7): the active
// releaser is paused in the commit of a ledger transaction (its EndTxn
// held by the broker) while another owner opens the release log, and on
// resuming is told by the group that its session was lost. It must learn
// that it was fenced and exit with the fenced error, within
// ZombieExitWithin of the loss; nothing of window 1 is published. The
// transaction held is
//
//   - "window record": window 1's record. Before the fix the loss cut the
//     commit in flight (its context ended): the log died with the outcome
//     unknown ("commit: context canceled"), the probe could not ask it,
//     and the zombie stood down and ran on as a standby, unaware — what
//     made TestDistributedFailover/releaser_paused fail about one run in
//     sixteen (when the SIGSTOP caught a transaction);
//   - "partition count": the record of an input partition change
//     (NotePartitions: partitions added to the input topic, seen by the
//     releaser's check every second). Issue 28's review: it ran under the
//     session's context, not the ledger writes' — the same unknown
//     outcome and the same unaware zombie ("the zombie releaser still runs
//     … after its session was lost").
func TestDistReleaserLostMidWriteExitsFenced(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trigger func(t *testing.T, e *distEnv, tr truth)
	}{
		{"window record", func(t *testing.T, e *distEnv, tr truth) {
			for p := range e.n {
				e.emit(t, tr, 1, p)
			}
		}},
		{"partition count", func(t *testing.T, e *distEnv, _ truth) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(e.b.Addrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := kadm.NewClient(cl).CreatePartitions(ctx, 1, e.cfg.Kafka.InputTopic); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { lostMidWrite(t, tc.trigger) })
	}
}

// lostMidWrite is TestDistReleaserLostMidWriteExitsFenced with the ledger
// commit that trigger causes held.
func lostMidWrite(t *testing.T, trigger func(t *testing.T, e *distEnv, tr truth)) {
	e := newDistEnv(t, 2)
	cut := make(chan struct{}) // the lead was told to stop after a lost session
	var once sync.Once
	core, logs := observer.New(zap.InfoLevel)
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range logs.FilterMessageSnippet("releas").All() {
				t.Logf("zombie log: %s %v", l.Message, l.ContextMap())
			}
		}
	})
	z := e.startWith(t, func(s *stage) {
		s.Log = zap.New(core)
		s.leadCut = func(lost bool) {
			if lost {
				once.Do(func() { close(cut) })
			}
		}
	})
	tr := truth{}
	for p := range e.n {
		e.emit(t, tr, 0, p)
	}
	e.readOut(t, unitsPerWindow, 30*time.Second, 0)
	z.s.SetFail(func(error) {}) // the fenced error is returned, checked below
	member := e.releaseHolder(t)
	time.Sleep(time.Second) // window 0's writes done (marked published)

	// Hold the releaser's next ledger commit at the broker until the test
	// wakes it.
	txid := config.LedgerTransactionalID(e.cfg.State.LedgerTopic)
	c := e.b.Cluster()
	held, wake := make(chan struct{}), make(chan struct{})
	var holding atomic.Bool // kfake may run the control again for the request it woke
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if end := req.(*kmsg.EndTxnRequest); end.TransactionalID != txid || !end.Commit || !holding.CompareAndSwap(false, true) {
			return nil, nil, false // not handled: the broker answers it
		}
		close(held)
		c.SleepControl(func() { <-wake })
		c.DropControl()
		return nil, nil, false // the broker answers it now
	})
	trigger(t, e, tr)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the releaser's write did not reach its commit")
	}
	// While the commit is held: a newer owner opens the log (fencing the
	// releaser, aborting its transaction), and the group drops the
	// releaser (kept out for good: it must exit, not come back).
	e.openLog(t)
	lostAt := time.Now()
	e.loseSession(t, member, time.Hour)
	select {
	case <-cut:
	case <-time.After(30 * time.Second):
		t.Fatal("the releaser was not told that its session was lost")
	}
	close(wake) // the commit is answered only now
	limit := ZombieExitWithin(e.cfg.Kafka.SessionTimeout.D()) + 5*time.Second
	select {
	case err := <-z.done:
		z.done <- err
		if !errors.Is(err, kafkalog.ErrFenced) {
			t.Fatalf("the zombie releaser returned %v, want ErrFenced", err)
		}
		t.Logf("the zombie exited fenced %v after the loss: %v", time.Since(lostAt).Round(time.Millisecond), err)
	case <-time.After(limit):
		t.Fatalf("the zombie releaser still runs %v after its session was lost (it stood down unaware of the fence)", limit)
	}
	out := e.readOut(t, unitsPerWindow, 5*time.Second, time.Second)
	if got := checkOnce(t, out, 1); len(out) != unitsPerWindow || len(got) != unitsPerWindow {
		t.Errorf("%d releases published, want window 0's %d only", len(out), unitsPerWindow)
	}
}
