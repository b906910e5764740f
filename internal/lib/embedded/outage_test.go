package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// readAll reads every message currently in topic (partitions 0..n-1) from
// the first offset up to each partition's high watermark.
func readAll(t *testing.T, ctx context.Context, b *Broker, topic string, n int) *collector {
	t.Helper()
	c := newCollector()
	for p := range n {
		conn, err := kafka.DialLeader(ctx, "tcp", b.Addr(), topic, p)
		if err != nil {
			t.Fatalf("dial leader of %s/%d: %v", topic, p, err)
		}
		hw, err := conn.ReadLastOffset()
		conn.Close()
		if err != nil {
			t.Fatalf("high watermark of %s/%d: %v", topic, p, err)
		}
		if hw == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers: b.Addrs(), Topic: topic, Partition: p,
			MinBytes: 1, MaxBytes: 1 << 20, MaxWait: readerMaxWait,
		})
		for {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				r.Close()
				t.Fatalf("read %s/%d: %v", topic, p, err)
			}
			c.add(m)
			if m.Offset+1 >= hw {
				break
			}
		}
		r.Close()
	}
	return c
}

func TestStopRestartSamePortKeepsMessagesAndOffsets(t *testing.T) {
	b, err := Start(Config{Topics: map[string]int{"events": 3}, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	addr := b.Addr()

	w := newWriter(b, "events")
	defer w.Close()
	first := produce(t, ctx, w, "a", 90)

	groupReader := func() *kafka.Reader {
		return kafka.NewReader(kafka.ReaderConfig{
			Brokers: b.Addrs(), GroupID: "g", Topic: "events",
			StartOffset: kafka.FirstOffset, MinBytes: 1, MaxBytes: 1 << 20,
			MaxWait: readerMaxWait, HeartbeatInterval: 100 * time.Millisecond,
			SessionTimeout: 2 * time.Second, RebalanceTimeout: 2 * time.Second,
			JoinGroupBackoff: 100 * time.Millisecond,
		})
	}
	r := groupReader()
	c := newCollector()
	for range 60 { // commit only part of the stream
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.add(m)
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()

	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if b.Running() || b.Cluster() != nil {
		t.Fatal("broker reports running after Stop")
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatal("stopped broker still accepts connections")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Logf("dial to stopped broker: %v", err)
	}
	if err := b.Restart(); err != nil {
		t.Fatal(err)
	}
	if b.Addr() != addr {
		t.Fatalf("restarted on %s, want %s", b.Addr(), addr)
	}

	all := readAll(t, ctx, b, "events", 3)
	all.check(t, first)

	// The group resumes after its committed offsets: the 30 uncommitted
	// messages, then new ones.
	second := produce(t, ctx, w, "b", 30)
	r2 := groupReader()
	defer r2.Close()
	for c.total() < len(first)+len(second) {
		m, err := r2.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("after %d messages: %v", c.total(), err)
		}
		c.add(m)
		if err := r2.CommitMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	qctx, qcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer qcancel()
	if m, err := r2.FetchMessage(qctx); err == nil {
		t.Errorf("unexpected extra message %q", m.Value)
	}
	c.check(t, append(first, second...))

	// Restart of a running broker, and a topic created after Start survive.
	if err := b.CreateTopic("late", 2); err != nil {
		t.Fatal(err)
	}
	if err := b.Restart(); err != nil {
		t.Fatal(err)
	}
	if got := len(b.Cluster().PartitionInfos("late")); got != 2 {
		t.Fatalf("topic created before restart has %d partitions after, want 2", got)
	}
}

// A kafka-go Writer (MaxAttempts and backoff as the stage sets them) keeps
// producing through a broker outage, while a ConsumerGroup member keeps
// consuming: nothing acknowledged is lost.
func TestWriterAndGroupSurviveOutage(t *testing.T) {
	b := startBroker(t, map[string]int{"events": 4})
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()

	w := newWriter(b, "events")
	w.MaxAttempts = 30
	w.WriteBackoffMin = 50 * time.Millisecond
	w.WriteBackoffMax = 200 * time.Millisecond
	defer w.Close()

	consumed := newCollector()
	errs := make(chan error, 16)
	cfg := groupConfig(b, "outage", "events")
	m := startMember(t, ctx, b, cfg, "m", consumed, errs)
	defer m.close(t)

	const total, batch = 300, 10
	var (
		// mu guards acked and writeErrs.
		mu        sync.Mutex
		acked     []string
		writeErrs []error
	)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total; i += batch {
			msgs := make([]kafka.Message, batch)
			vals := make([]string, batch)
			for j := range msgs {
				vals[j] = fmt.Sprintf("v-%d", i+j)
				msgs[j] = kafka.Message{Key: []byte(fmt.Sprintf("k%d", (i+j)%23)), Value: []byte(vals[j])}
			}
			// The application retries what the writer gives up on.
			for {
				err := w.WriteMessages(ctx, msgs...)
				if err == nil {
					break
				}
				mu.Lock()
				writeErrs = append(writeErrs, err)
				mu.Unlock()
				if ctx.Err() != nil {
					return
				}
			}
			mu.Lock()
			acked = append(acked, vals...)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	nAcked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}

	waitFor(t, 10*time.Second, "100 acknowledged writes", func() bool { return nAcked() >= 100 })
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	during := nAcked()
	time.Sleep(time.Second)
	if after := nAcked(); after > during+batch {
		t.Errorf("%d writes acknowledged while the broker was down", after-during)
	}
	if err := b.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitFor(t, 15*time.Second, "first write acknowledged after restart", func() bool { return nAcked() > during+batch })
	t.Logf("first write acknowledged %v after restart", time.Since(restarted).Round(time.Millisecond))
	waitFor(t, 15*time.Second, "all writes acknowledged", func() bool { return nAcked() == total })
	t.Logf("writer finished %v after restart; %d write errors surfaced to the caller", time.Since(restarted).Round(time.Millisecond), len(writeErrs))
	wg.Wait()
	for i, err := range writeErrs {
		if i < 3 {
			t.Logf("write error: %v", err)
		}
	}

	// Everything acknowledged is in the log (a retried write may appear
	// twice: kafka-go's producer is not idempotent).
	stored := readAll(t, ctx, b, "events", 4)
	dups := 0
	stored.mu.Lock()
	for _, v := range acked {
		switch n := stored.seen[v]; {
		case n == 0:
			t.Errorf("acknowledged %q missing from the log", v)
		case n > 1:
			dups += n - 1
		}
	}
	stored.mu.Unlock()
	t.Logf("log holds %d messages for %d acknowledged writes (%d duplicates)", stored.total(), total, dups)

	// The group member rejoined after the outage and consumed everything.
	waitFor(t, 15*time.Second, "consumer to catch up", func() bool { return consumed.total() >= stored.total() })
	consumed.mu.Lock()
	missing, redelivered := 0, 0
	for _, v := range acked {
		switch n := consumed.seen[v]; {
		case n == 0:
			missing++
		case n > stored.seen[v]:
			redelivered += n - stored.seen[v]
		}
	}
	consumed.mu.Unlock()
	if missing > 0 {
		t.Errorf("%d acknowledged messages never consumed", missing)
	}
	gen, parts := m.assignment()
	t.Logf("consumer: generation %d after outage, partitions %v, %d messages re-delivered", gen, parts, redelivered)
	select {
	case err := <-errs:
		t.Logf("member error during outage (expected while the broker is away): %v", err)
	default:
	}
}

// A broker that is up but refuses writes (kfake fault injection: every
// produce to the topic answered NOT_ENOUGH_REPLICAS, a retriable error): the
// kafka-go Writer retries inside WriteMessages and succeeds once the fault
// is lifted; the refused attempts stored nothing.
func TestWriterRetriesRefusedWrites(t *testing.T) {
	b := startBroker(t, map[string]int{"out": 1})
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	w := newWriter(b, "out")
	w.MaxAttempts = 50
	w.WriteBackoffMin = 20 * time.Millisecond
	w.WriteBackoffMax = 100 * time.Millisecond
	defer w.Close()

	fault := b.Cluster().Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Produce},
		Topic: "out",
		Err:   kerr.NotEnoughReplicas,
		Count: -1,
	})
	done := make(chan error, 1)
	go func() {
		done <- w.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte("refused-then-accepted")})
	}()
	if err := fault.Wait(ctx, 3); err != nil {
		t.Fatalf("waiting for refused produce attempts: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("write returned while every produce is refused: %v", err)
	default:
	}
	fault.Remove()
	if err := <-done; err != nil {
		t.Fatalf("write after the fault was lifted: %v", err)
	}
	t.Logf("produce refused %d times before it was accepted", fault.Hits())
	readAll(t, ctx, b, "out", 1).check(t, []string{"refused-then-accepted"})
}
