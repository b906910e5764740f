package kafkapartial

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStableOffsetsHeld: an open transaction on the partials topic holds
// its last stable offset below the high watermark, LSOWatch sees it held
// for as long as it stays, and the commit releases it.
func TestStableOffsetsHeld(t *testing.T) {
	c := newCluster(t, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("hang"),
		kgo.TransactionTimeout(time.Minute), kgo.DefaultProduceTopic(partialsTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := ctxT(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("committed")}).FirstErr(); err == nil {
		t.Fatal("a transactional producer produced outside a transaction")
	}
	var w LSOWatch
	lso, hwm, err := StableOffsets(ctx, cl, partialsTopic, 0)
	if err != nil || lso != hwm || w.Observe(lso, hwm, time.Now()) != 0 {
		t.Fatalf("before: lso %d hwm %d err %v", lso, hwm, err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("open")}, &kgo.Record{Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var held time.Duration
	for range 3 {
		lso, hwm, err = StableOffsets(ctx, cl, partialsTopic, 0)
		if err != nil {
			t.Fatal(err)
		}
		held = w.Observe(lso, hwm, time.Now())
		time.Sleep(100 * time.Millisecond)
	}
	if lso != 0 || hwm != 2 {
		t.Fatalf("open transaction: lso %d hwm %d, want 0 2", lso, hwm)
	}
	if held < 150*time.Millisecond || held > time.Since(start) {
		t.Fatalf("held %v after %v", held, time.Since(start))
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	lso, hwm, err = StableOffsets(ctx, cl, partialsTopic, 0)
	if err != nil || lso != hwm || w.Observe(lso, hwm, time.Now()) != 0 {
		t.Fatalf("after the commit: lso %d hwm %d err %v", lso, hwm, err)
	}
}

// TestLSOWatch: only an LSO that stays at one offset below the high
// watermark counts as held; one that moves (transactions committing one
// after another) restarts the clock.
func TestLSOWatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var w LSOWatch
	for i, tc := range []struct {
		lso, hwm int64
		at       time.Duration
		want     time.Duration
	}{
		{5, 5, 0, 0},
		{5, 7, time.Second, 0},
		{5, 9, 3 * time.Second, 2 * time.Second},
		{6, 9, 4 * time.Second, 0}, // moved
		{6, 9, 10 * time.Second, 6 * time.Second},
		{9, 9, 11 * time.Second, 0}, // caught up
		{9, 10, 12 * time.Second, 0},
		{9, 10, 12*time.Second + time.Millisecond, time.Millisecond},
	} {
		if got := w.Observe(tc.lso, tc.hwm, t0.Add(tc.at)); got != tc.want {
			t.Errorf("%d: Observe(%d, %d) = %v, want %v", i, tc.lso, tc.hwm, got, tc.want)
		}
	}
}
