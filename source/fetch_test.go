package source

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dpstage/stage/internal/lib/embedded"
)

// fetchBroker starts a broker with topic "t" (1 partition) holding 10
// messages with values 0..9.
func fetchBroker(t *testing.T) *embedded.Broker {
	t.Helper()
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"t": 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Transport: &kafka.Transport{}, Topic: "t", RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	for i := 0; i < 10; i++ {
		if err := w.WriteMessages(context.Background(), kafka.Message{Value: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestFetchReadsInOrderThenWaits: every message in offset order; at the tail
// an empty fetch is not an error — fetch keeps polling on the same connection
// until its context ends.
func TestFetchReadsInOrderThenWaits(t *testing.T) {
	b := fetchBroker(t)
	f := NewFetcher(nil, b.Addrs(), "t", 0, kafka.FirstOffset)
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	for i := int64(0); i < 10; i++ {
		m, err := f.Fetch(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if m.Offset != i || m.Value[0] != byte(i) || m.HighWaterMark != 10 {
			t.Fatalf("message %d: offset %d value %v hwm %d", i, m.Offset, m.Value, m.HighWaterMark)
		}
	}
	conn := f.conn
	start := time.Now()
	_, err := f.Fetch(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle fetch: got %v, want the context's deadline", err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("idle fetch returned after %v: it should poll until the context ends", waited)
	}
	if conn == nil || f.conn != nil && f.conn != conn {
		t.Fatalf("idle polling re-dialled the connection")
	}
}

// TestFetchRestartsAtFirstRetainedOffset: when retention removed the next
// offset (the committed one), reading restarts at the first retained offset
// and says so, instead of failing forever.
func TestFetchRestartsAtFirstRetainedOffset(t *testing.T) {
	b := fetchBroker(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = 0, 8
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 5000
	if _, err := req.RequestWith(context.Background(), cl); err != nil {
		t.Fatal(err)
	}

	f := NewFetcher(nil, b.Addrs(), "t", 0, 5)
	var from, to int64 = -1, -1
	f.OnReset = func(a, b int64) { from, to = a, b }
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := f.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Offset != 8 || from != 5 || to != 8 {
		t.Fatalf("read offset %d after reset %d→%d, want 8 after 5→8", m.Offset, from, to)
	}
}

// TestFetchPastLogEnd: a next offset past the log's end (a truncated log) is
// an error the caller sees, not a silent hang.
func TestFetchPastLogEnd(t *testing.T) {
	b := fetchBroker(t)
	f := NewFetcher(nil, b.Addrs(), "t", 0, 50)
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := f.Fetch(ctx); !errors.Is(err, kafka.OffsetOutOfRange) {
		t.Fatalf("got %v, want OffsetOutOfRange", err)
	}
}

// txnProducer is a kgo client with a transactional id (an exactly-once
// producer such as Flink's or Kafka Streams').
func txnProducer(t *testing.T, addr, id string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID(id), kgo.DefaultProduceTopic("t"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceTxn writes values in one transaction, then commits it, aborts it,
// or (end == nil) leaves it open.
func produceTxn(t *testing.T, cl *kgo.Client, values []string, end *kgo.TransactionEndTry) {
	t.Helper()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if end != nil {
		if err := cl.EndTransaction(ctx, *end); err != nil {
			t.Fatal(err)
		}
	}
}

func vals(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// TestFetchReadCommitted: committed, aborted and open transactions of two
// transactional producers interleaved with plain records. The fetcher
// returns exactly the plain and committed records, in offset order, never a
// commit/abort marker, and nothing at or past the last stable offset until
// the open transaction ends; skipped offsets are reported, and a partition
// held at the LSO is behind, not caught up.
func TestFetchReadCommitted(t *testing.T) {
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"t": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	plain := func(vs []string) {
		w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Transport: &kafka.Transport{}, Topic: "t", RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
		defer w.Close()
		for _, v := range vs {
			if err := w.WriteMessages(context.Background(), kafka.Message{Value: []byte(v)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	commit, abort := kgo.TryCommit, kgo.TryAbort
	p1, p2 := txnProducer(t, b.Addr(), "p1"), txnProducer(t, b.Addr(), "p2")
	var want []string
	plain(vals("a", 3))
	want = append(want, vals("a", 3)...)
	produceTxn(t, p1, vals("c", 4), &commit)
	want = append(want, vals("c", 4)...)
	produceTxn(t, p2, vals("x", 5), &abort)
	plain(vals("b", 2))
	want = append(want, vals("b", 2)...)
	produceTxn(t, p1, vals("y", 3), &abort)
	produceTxn(t, p2, vals("d", 2), &commit)
	want = append(want, vals("d", 2)...)
	produceTxn(t, p1, vals("o", 3), nil) // open
	plain(vals("e", 2))                  // after the LSO: held back too

	f := NewFetcher(nil, b.Addrs(), "t", 0, kafka.FirstOffset)
	defer f.Close()
	var caughtUp, behind, skippedTo atomic.Int64
	skippedTo.Store(-1)
	f.OnCaughtUp = func(time.Time) { caughtUp.Add(1) }
	f.OnBehind = func(int64) { behind.Add(1) }
	f.OnSkipped = func(next int64) { skippedTo.Store(next) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := func(n int) ([]string, error) {
		var got []string
		last := int64(-1)
		for len(got) < n {
			m, err := f.Fetch(ctx)
			if err != nil {
				return got, err
			}
			if m.Offset <= last {
				return got, fmt.Errorf("offset %d after %d", m.Offset, last)
			}
			last = m.Offset
			got = append(got, string(m.Value))
		}
		return got, nil
	}
	if got, err := read(len(want)); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read %v (%v)\nwant %v", got, err, want)
	}
	// Nothing more while the transaction is open: the fetcher polls at the
	// LSO and says the partition is behind, never caught up.
	type result struct {
		got []string
		err error
	}
	rest := append(vals("o", 3), vals("e", 2)...)
	done := make(chan result, 1)
	go func() {
		got, err := read(len(rest))
		done <- result{got, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("read %v (%v) past the last stable offset", r.got, r.err)
	case <-time.After(1500 * time.Millisecond):
	}
	if behind.Load() == 0 || caughtUp.Load() != 0 {
		t.Fatalf("at the LSO with an open transaction: behind %d, caught up %d times; want behind, never caught up", behind.Load(), caughtUp.Load())
	}
	// The markers and aborted records before the LSO were skipped and
	// reported: the next offset is the LSO, the open transaction's first.
	lso := int64(len(want) + 4 + 5 + 3) // 4 markers, 8 aborted records
	if skippedTo.Load() != lso {
		t.Fatalf("skipped to %d, want the LSO %d", skippedTo.Load(), lso)
	}
	if err := p1.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || fmt.Sprint(r.got) != fmt.Sprint(rest) {
		t.Fatalf("after the commit read %v (%v), want %v", r.got, r.err, rest)
	}
	// Read to the end (the commit marker is skipped): caught up.
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if _, err := f.Fetch(ctx2); !errors.Is(err, context.DeadlineExceeded) || caughtUp.Load() == 0 {
		t.Fatalf("at the end: %v, caught up %d times", err, caughtUp.Load())
	}
}

// TestFetchFollowsLeaderMove: the partition's leadership moves to another
// broker mid-read (kfake: a second node, then MoveTopicPartition). The
// fetch that reaches the old leader fails (NOT_LEADER_FOR_PARTITION); the
// caller retries, as consume does, and the fetcher re-dials the new leader
// found in fresh metadata and goes on at the next offset: every record
// once, in order.
func TestFetchFollowsLeaderMove(t *testing.T) {
	b := fetchBroker(t)
	f := NewFetcher(nil, b.Addrs(), "t", 0, kafka.FirstOffset)
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []byte
	read := func(n int) (errs int) {
		for len(got) < n {
			m, err := f.Fetch(ctx)
			if err != nil {
				if ctx.Err() != nil {
					t.Fatalf("after %v: %v", got, err)
				}
				errs++
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if m.Offset != int64(len(got)) {
				t.Fatalf("offset %d after %d records", m.Offset, len(got))
			}
			got = append(got, m.Value[0])
		}
		return errs
	}
	read(10) // one response: the next records need a new fetch
	c := b.Cluster()
	node, port, err := c.AddNode(-1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MoveTopicPartition("t", 0, node); err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Transport: &kafka.Transport{}, Topic: "t", RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	for i := 10; i < 15; i++ {
		if err := w.WriteMessages(ctx, kafka.Message{Value: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if errs := read(15); errs == 0 {
		t.Log("no fetch failed: the move happened between fetches")
	}
	if fmt.Sprint(got) != fmt.Sprint([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}) {
		t.Fatalf("read %v", got)
	}
	if _, p, _ := net.SplitHostPort(f.conn.addr); p != fmt.Sprint(port) {
		t.Fatalf("reading from %s, the new leader listens on port %d", f.conn.addr, port)
	}
}
