package embedded

// Compatibility of github.com/segmentio/kafka-go (the stage's client) with
// the kfake broker, over real TCP on loopback. Each test is one finding the
// rest of the stage relies on.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// A Writer with acks=all and a 5ms batch timeout, then a ConsumerGroup
// generation with one kafka.Reader (partition-bound, no GroupID) per assigned
// partition reads everything exactly once, commits with
// Generation.CommitOffsets, and a second session resumes at the commits.
func TestConsumerGroupGenerationReadsExactlyOnceAndResumes(t *testing.T) {
	b := startBroker(t, map[string]int{"events": 4})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	w := newWriter(b, "events")
	defer w.Close()

	// session runs one consumer-group session: join, consume until the
	// collector holds want messages, commit, leave. It returns the
	// assignment's start offsets.
	session := func(c *collector, want int) map[int]int64 {
		t.Helper()
		cg, err := kafka.NewConsumerGroup(groupConfig(b, "g", "events"))
		if err != nil {
			t.Fatalf("new consumer group: %v", err)
		}
		defer cg.Close()
		gen, err := cg.Next(ctx)
		if err != nil {
			t.Fatalf("next generation: %v", err)
		}
		if got := partitionsOf(gen.Assignments, "events"); !slices.Equal(got, []int{0, 1, 2, 3}) {
			t.Fatalf("single member assigned partitions %v, want [0 1 2 3]", got)
		}
		start := map[int]int64{}
		errs := make(chan error, 4)
		for _, a := range gen.Assignments["events"] {
			start[a.ID] = a.Offset
			gen.Start(func(gctx context.Context) {
				errs <- consumePartition(gctx, b, "events", a.ID, a.Offset, c)
			})
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("%d messages", want), func() bool { return c.total() >= want })
		if err := gen.CommitOffsets(map[string]map[int]int64{"events": c.offsets()}); err != nil {
			t.Fatalf("commit offsets: %v", err)
		}
		if err := cg.Close(); err != nil {
			t.Fatalf("close group: %v", err)
		}
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("partition consumer: %v", err)
			}
		}
		return start
	}

	first := produce(t, ctx, w, "a", 400)
	c1 := newCollector()
	start1 := session(c1, len(first))
	for p, o := range start1 {
		if o != kafka.FirstOffset {
			t.Errorf("fresh group: partition %d starts at %d, want FirstOffset (-2)", p, o)
		}
	}
	c1.check(t, first)
	committed := c1.offsets()
	if len(committed) != 4 {
		t.Fatalf("messages landed on %d partitions, want 4: %v", len(committed), committed)
	}

	second := produce(t, ctx, w, "b", 100)
	c2 := newCollector()
	start2 := session(c2, len(second))
	for p, o := range committed {
		if start2[p] != o {
			t.Errorf("second session: partition %d starts at %d, want committed %d", p, start2[p], o)
		}
	}
	// Give stray re-reads a moment to show up before checking.
	time.Sleep(200 * time.Millisecond)
	c2.check(t, second)
}

// member is one consumer-group member that follows generations until its
// group is closed; every partition goroutine commits after each message.
type member struct {
	name string
	cg   *kafka.ConsumerGroup
	done chan struct{}

	// mu guards gen and parts.
	mu    sync.Mutex
	gen   int32
	parts []int
}

func startMember(t *testing.T, ctx context.Context, b *Broker, cfg kafka.ConsumerGroupConfig, name string, c *collector, errs chan<- error) *member {
	t.Helper()
	cg, err := kafka.NewConsumerGroup(cfg)
	if err != nil {
		t.Fatalf("%s: new consumer group: %v", name, err)
	}
	m := &member{name: name, cg: cg, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			gen, err := cg.Next(ctx)
			if errors.Is(err, kafka.ErrGroupClosed) || ctx.Err() != nil {
				return
			}
			if err != nil {
				// Join errors (e.g. RebalanceInProgress) are surfaced here
				// and retried by the group itself.
				continue
			}
			topic := cfg.Topics[0]
			m.mu.Lock()
			m.gen, m.parts = gen.ID, partitionsOf(gen.Assignments, topic)
			m.mu.Unlock()
			// commitMu guards gen's coordinator connection for commits.
			commitMu := new(sync.Mutex)
			for _, a := range gen.Assignments[topic] {
				gen.Start(func(gctx context.Context) {
					err := consumeAndCommit(gctx, b, gen, commitMu, topic, a.ID, a.Offset, c)
					if err != nil {
						select {
						case errs <- fmt.Errorf("%s: %w", name, err):
						default:
						}
					}
				})
			}
		}
	}()
	return m
}

func (m *member) assignment() (int32, []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen, slices.Clone(m.parts)
}

func (m *member) close(t *testing.T) {
	t.Helper()
	if err := m.cg.Close(); err != nil {
		t.Errorf("%s: close: %v", m.name, err)
	}
	<-m.done
}

// consumeAndCommit is consumePartition with a synchronous commit after every
// message; a commit refused because the generation ended stops the loop.
//
// commitMu serializes the commits of one generation's partition goroutines:
// they share the generation's coordinator connection, and kafka-go's Conn
// slows down by orders of magnitude under concurrent requests (see
// BenchmarkGenerationCommitOffsets).
func consumeAndCommit(ctx context.Context, b *Broker, gen *kafka.Generation, commitMu *sync.Mutex, topic string, partition int, offset int64, c *collector) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     b.Addrs(),
		Topic:       topic,
		Partition:   partition,
		MinBytes:    1,
		MaxBytes:    1 << 20, // kafka-go panics on MinBytes > 0 with MaxBytes 0
		MaxWait:     readerMaxWait,
		Logger:      kafkaLogger(fmt.Sprintf("gen%d-reader-%d", gen.ID, partition)),
		ErrorLogger: kafkaLogger(fmt.Sprintf("gen%d-reader-err-%d", gen.ID, partition)),
	})
	defer r.Close()
	if err := r.SetOffset(offset); err != nil {
		return err
	}
	for {
		msg, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		c.add(msg)
		commitMu.Lock()
		err = gen.CommitOffsets(map[string]map[int]int64{topic: {partition: msg.Offset + 1}})
		commitMu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("commit partition %d offset %d: %w", partition, msg.Offset+1, err)
		}
	}
}

// Two members with kafka-go's default balancers (range first): the second
// join splits the partitions 2/2, partitions move with their committed
// offsets, and when one member leaves the other gets all partitions back.
func TestConsumerGroupRebalanceTwoMembers(t *testing.T) {
	b := startBroker(t, map[string]int{"events": 4})
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()
	w := newWriter(b, "events")
	defer w.Close()

	c := newCollector()
	errs := make(chan error, 16)
	cfg := groupConfig(b, "rebalance", "events")

	batch1 := produce(t, ctx, w, "one", 200)
	a := startMember(t, ctx, b, cfg, "a", c, errs)
	defer a.close(t)
	waitFor(t, 10*time.Second, "member a to consume batch 1", func() bool { return c.total() >= len(batch1) })
	if _, parts := a.assignment(); !slices.Equal(parts, []int{0, 1, 2, 3}) {
		t.Fatalf("member a alone has %v, want [0 1 2 3]", parts)
	}

	joinStart := time.Now()
	bm := startMember(t, ctx, b, cfg, "b", c, errs)
	bClosed := false
	defer func() {
		if !bClosed {
			bm.close(t)
		}
	}()
	waitFor(t, 10*time.Second, "a 2/2 split", func() bool {
		ga, pa := a.assignment()
		gb, pb := bm.assignment()
		return ga == gb && len(pa) == 2 && len(pb) == 2
	})
	t.Logf("rebalance to two members took %v", time.Since(joinStart).Round(time.Millisecond))
	_, pa := a.assignment()
	_, pb := bm.assignment()
	if all := slices.Sorted(slices.Values(append(pa, pb...))); !slices.Equal(all, []int{0, 1, 2, 3}) {
		t.Fatalf("assignments a=%v b=%v do not partition [0 1 2 3]", pa, pb)
	}

	batch2 := produce(t, ctx, w, "two", 200)
	waitFor(t, 10*time.Second, "batch 2 consumed", func() bool { return c.total() >= len(batch1)+len(batch2) })

	leaveStart := time.Now()
	bm.close(t)
	bClosed = true
	waitFor(t, 10*time.Second, "a to get all partitions back", func() bool {
		_, parts := a.assignment()
		return len(parts) == 4
	})
	t.Logf("rebalance back to one member took %v", time.Since(leaveStart).Round(time.Millisecond))

	batch3 := produce(t, ctx, w, "three", 200)
	waitFor(t, 10*time.Second, "batch 3 consumed", func() bool {
		return c.total() >= len(batch1)+len(batch2)+len(batch3)
	})
	time.Sleep(200 * time.Millisecond)
	c.check(t, slices.Concat(batch1, batch2, batch3))
	select {
	case err := <-errs:
		t.Errorf("member error: %v", err)
	default:
	}
}

// kafka.Reader with GroupID (kafka-go's merged-stream consumer) against the
// embedded broker: explicit CommitMessages, then a new Reader in the same
// group resumes after the commits.
func TestGroupReaderCommitAndResume(t *testing.T) {
	b := startBroker(t, map[string]int{"events": 4})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	w := newWriter(b, "events")
	defer w.Close()

	newReader := func(commitInterval time.Duration) *kafka.Reader {
		return kafka.NewReader(kafka.ReaderConfig{
			Brokers:           b.Addrs(),
			GroupID:           "reader-group",
			Topic:             "events",
			StartOffset:       kafka.FirstOffset,
			MinBytes:          1,
			MaxBytes:          1 << 20,
			MaxWait:           readerMaxWait,
			HeartbeatInterval: 100 * time.Millisecond,
			SessionTimeout:    2 * time.Second,
			RebalanceTimeout:  2 * time.Second,
			JoinGroupBackoff:  100 * time.Millisecond,
			CommitInterval:    commitInterval,
			Logger:            kafkaLogger("group-reader"),
			ErrorLogger:       kafkaLogger("group-reader-err"),
		})
	}
	read := func(r *kafka.Reader, n int, c *collector, commit bool) {
		t.Helper()
		for range n {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				t.Fatalf("fetch after %d messages: %v", c.total(), err)
			}
			c.add(m)
			if commit {
				if err := r.CommitMessages(ctx, m); err != nil {
					t.Fatalf("commit: %v", err)
				}
			}
		}
	}
	// expectNothing checks that no further message arrives for a while.
	expectNothing := func(r *kafka.Reader) {
		t.Helper()
		qctx, qcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer qcancel()
		if m, err := r.FetchMessage(qctx); err == nil {
			t.Errorf("unexpected extra message %q at partition %d offset %d", m.Value, m.Partition, m.Offset)
		}
	}

	// Synchronous commits (CommitInterval 0).
	first := produce(t, ctx, w, "a", 400)
	r1 := newReader(0)
	c1 := newCollector()
	read(r1, len(first), c1, true)
	expectNothing(r1)
	if err := r1.Close(); err != nil {
		t.Fatalf("close reader: %v", err)
	}
	c1.check(t, first)

	second := produce(t, ctx, w, "b", 100)
	r2 := newReader(0)
	c2 := newCollector()
	read(r2, len(second), c2, true)
	expectNothing(r2)
	if err := r2.Close(); err != nil {
		t.Fatalf("close reader: %v", err)
	}
	c2.check(t, second)

	// Periodic commits (CommitInterval > 0): CommitMessages only queues the
	// offsets. With an interval of an hour nothing is committed by the timer:
	// the next reader resumes exactly only if Close flushes them.
	third := produce(t, ctx, w, "c", 100)
	r3 := newReader(time.Hour)
	c3 := newCollector()
	read(r3, len(third), c3, true)
	if err := r3.Close(); err != nil {
		t.Fatalf("close reader: %v", err)
	}
	c3.check(t, third)

	fourth := produce(t, ctx, w, "d", 50)
	r4 := newReader(0)
	c4 := newCollector()
	read(r4, len(fourth), c4, true)
	expectNothing(r4)
	if err := r4.Close(); err != nil {
		t.Fatalf("close reader: %v", err)
	}
	c4.check(t, fourth)
}

// BenchmarkGenerationCommitOffsets measures Generation.CommitOffsets against
// the embedded broker: from one goroutine, from four goroutines that take
// turns (a mutex), and from four at once (as naive per-partition goroutines
// would). kafka-go multiplexes requests on the generation's single
// coordinator Conn by re-locking a mutex and peeking at each response until
// its own arrives; with four concurrent committers this was observed to take
// milliseconds per commit and to starve the heartbeat that shares the Conn
// until the member's session expired ("failed" metric: commits refused with
// IllegalGeneration or on the closed connection).
func BenchmarkGenerationCommitOffsets(b *testing.B) {
	br, err := Start(Config{Topics: map[string]int{"events": 4}})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: "bench", Brokers: br.Addrs(), Topics: []string{"events"},
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second,
		RebalanceTimeout: 2 * time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer cg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gen, err := cg.Next(ctx)
	if err != nil {
		b.Fatal(err)
	}
	commit := func(p, i int) error {
		return gen.CommitOffsets(map[string]map[int]int64{"events": {p: int64(i)}})
	}
	b.Run("serial", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if err := commit(0, i); err != nil {
				b.Fatal(err)
			}
		}
	})
	fourGoroutines := func(b *testing.B, mu sync.Locker) {
		var (
			wg     sync.WaitGroup
			failed atomic.Int64
		)
		per := b.N/4 + 1
		b.ResetTimer()
		for p := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range per {
					mu.Lock()
					err := commit(p, i)
					mu.Unlock()
					if err != nil && failed.Add(1) == 1 {
						b.Logf("first failed commit: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(float64(failed.Load()), "failed")
	}
	b.Run("4-goroutines-mutex", func(b *testing.B) { fourGoroutines(b, new(sync.Mutex)) })
	b.Run("4-goroutines-concurrent", func(b *testing.B) { fourGoroutines(b, noLock{}) })
}

type noLock struct{}

func (noLock) Lock()   {}
func (noLock) Unlock() {}

// WatchPartitionChanges: partitions added to the topic (kafka-go's
// Client.CreatePartitions against the embedded broker) end the generation,
// and the next one assigns the new partitions too.
func TestConsumerGroupWatchPartitionChanges(t *testing.T) {
	b := startBroker(t, map[string]int{"events": 2})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cfg := groupConfig(b, "watch", "events")
	cfg.WatchPartitionChanges = true
	cfg.PartitionWatchInterval = 100 * time.Millisecond
	c := newCollector()
	errs := make(chan error, 4)
	m := startMember(t, ctx, b, cfg, "m", c, errs)
	defer m.close(t)
	waitFor(t, 10*time.Second, "first generation with 2 partitions", func() bool {
		_, parts := m.assignment()
		return slices.Equal(parts, []int{0, 1})
	})
	gen1, _ := m.assignment()

	client := &kafka.Client{Addr: kafka.TCP(b.Addrs()...), Timeout: 5 * time.Second}
	resp, err := client.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{
		Topics: []kafka.TopicPartitionsConfig{{Name: "events", Count: 4}},
	})
	if err != nil {
		t.Fatalf("create partitions: %v", err)
	}
	if err := resp.Errors["events"]; err != nil {
		t.Fatalf("create partitions: %v", err)
	}
	start := time.Now()
	waitFor(t, 10*time.Second, "a generation with 4 partitions", func() bool {
		_, parts := m.assignment()
		return slices.Equal(parts, []int{0, 1, 2, 3})
	})
	gen2, _ := m.assignment()
	t.Logf("generation %d -> %d with the new partitions after %v", gen1, gen2, time.Since(start).Round(time.Millisecond))
}
