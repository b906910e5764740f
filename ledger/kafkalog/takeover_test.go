package kafkalog

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/ledger"
)

// The Kafka release log under takeover (found by the review of issue #14;
// the first test failed before transact stopped aborting after a failed
// commit).

// TestZombieUnconfirmedCommitDoesNotFenceNewOwner: the zombie A's commit is
// cut short (its context ends while EndTxn is sent: outcome unknown, kgo
// marks the producer id for a KIP-360 reload) right after the new owner B
// opened. A's Log goes dead (ErrUnusable). A used to call
// EndTransaction(TryAbort) then, which re-ran InitProducerID at A's old
// (id, epoch); the embedded broker (kfake) accepts a stale epoch on a
// KIP-360 re-init, so B's next write was refused with ErrFenced although B
// opened last. Values stayed single (A is dead), but the owner stopped.
// A sends no abort after a failed commit now: B keeps writing.
func TestZombieUnconfirmedCommitDoesNotFenceNewOwner(t *testing.T) {
	c := newCluster(t)
	a := openLog(t, c)
	must(t, a.RecordWindow(ctxT(t), []*ledger.Unit{released("pages", 0, 0.5, "a-w0")}, curve(0.5, 1)))

	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	var b *Log
	a.beforeCommit = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var err error
		if b, err = Open(ctx, testConfig(c)); err != nil {
			t.Errorf("open B: %v", err)
		}
		acancel() // A's commit: outcome unknown to A
	}
	err := a.RecordWindow(actx, []*ledger.Unit{released("pages", minute, 0.5, "zombie")}, curve(1, 2))
	if b == nil {
		t.Fatal("B did not open")
	}
	defer b.Close()
	t.Logf("zombie RecordWindow: %v", err)
	if err == nil {
		t.Fatal("zombie RecordWindow succeeded after B opened")
	}
	if _, _, err := a.Lookup("pages", 0); err == nil {
		t.Fatal("zombie still usable")
	}
	// B opened last: it must still own the log.
	err = b.RecordWindow(ctxT(t), []*ledger.Unit{released("pages", minute, 0.5, "owner")}, curve(1, 2))
	if err != nil {
		t.Fatalf("the owner that opened last was fenced by the dead zombie's abort: %v", err)
	}
	if v := values(readRaw(t, c, true)); strings.Contains(v, "zombie") {
		t.Fatalf("read_committed sees the zombie's draw:\n%s", v)
	}
}

// TestZombieRecordedThenTakeoverSameValues: A recorded (committed) a
// window and has not published it when B takes over. Both may publish it:
// the values must be byte-identical, B must find it recorded (never redraw
// it), A's MarkPublished is refused, and after B's own MarkPublished is
// lost (B dies before it) the next owner still has it pending with the same
// bytes. The period's spend, limit and approx spend after takeover are A's.
func TestZombieRecordedThenTakeoverSameValues(t *testing.T) {
	c := newCluster(t)
	a := openLog(t, c)
	units := []*ledger.Unit{released("pages", 0, 0.5, "a-draw"), averaged("avg", 0, 0.1, 1e-7)}
	must(t, a.RecordWindow(ctxT(t), units, curve(0.5, 1)))
	aU, ok, err := a.Lookup("pages", 0)
	if err != nil || !ok {
		t.Fatalf("A lookup: %v %v", ok, err)
	}

	b := openLog(t, c)
	bU, ok, err := b.Lookup("pages", 0)
	if err != nil || !ok {
		t.Fatalf("B does not find A's committed window: ok=%v err=%v", ok, err)
	}
	if string(aU.Messages[0].Value) != string(bU.Messages[0].Value) || string(aU.Messages[0].Key) != string(bU.Messages[0].Key) {
		t.Fatalf("A would publish %s, B republishes %s", aU.Messages[0].Value, bU.Messages[0].Value)
	}
	if bU.Published {
		t.Fatal("restored as published")
	}
	// B never records the window again.
	if err := b.RecordWindow(ctxT(t), []*ledger.Unit{released("pages", 0, 0.5, "b-draw")}, curve(1, 2)); !errors.Is(err, ledger.ErrAlreadyRecorded) {
		t.Fatalf("B re-record: %v, want ErrAlreadyRecorded", err)
	}
	// A (zombie) publishes, then its MarkPublished is refused.
	if err := a.MarkPublished(ctxT(t), "pages", 0); !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie MarkPublished: %v, want ErrFenced", err)
	}
	for _, l := range []*Log{b} {
		sp, ok, err := l.Spent(0)
		if err != nil || !ok || sp.Epsilons[0] != 0.5 || sp.Epsilons[1] != 1 {
			t.Fatalf("spend after takeover %v ok=%v err=%v", sp, ok, err)
		}
		ap, ok, err := l.ApproxSpent(0)
		if err != nil || !ok || ap.Epsilon != 0.1 || ap.Delta != 1e-7 || ap.Releases != 1 {
			t.Fatalf("approx after takeover %+v ok=%v err=%v", ap, ok, err)
		}
		if lim, ok, err := l.PeriodLimit(0); err != nil || !ok || lim.Epsilon != 1 {
			t.Fatalf("limit after takeover %+v ok=%v err=%v", lim, ok, err)
		}
	}
	// B dies before MarkPublished: the next owner still has it pending,
	// with the same bytes.
	must(t, b.Close())
	d := openLog(t, c)
	dU, ok, err := d.Lookup("pages", 0)
	if err != nil || !ok || dU.Published || string(dU.Messages[0].Value) != string(aU.Messages[0].Value) {
		t.Fatalf("third owner: %+v ok=%v err=%v", dU, ok, err)
	}
}
