package embedded

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// kafkaLogger returns a kafka-go logger that prints when STAGE_KAFKA_DEBUG is
// set, nil otherwise. It writes to stderr, not t.Logf: kafka-go goroutines
// may log after the test has returned.
func kafkaLogger(prefix string) kafka.Logger {
	if os.Getenv("STAGE_KAFKA_DEBUG") == "" {
		return nil
	}
	l := log.New(os.Stderr, prefix+" ", log.Lmicroseconds)
	return kafka.LoggerFunc(func(msg string, args ...any) { l.Printf(msg, args...) })
}

func startBroker(t *testing.T, topics map[string]int) *Broker {
	t.Helper()
	b, err := Start(Config{Topics: topics})
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	return b
}

// newWriter is the writer configuration the stage uses: acks from all
// replicas, short batch timeout, key-hash partitioning.
func newWriter(b *Broker, topic string) *kafka.Writer {
	return &kafka.Writer{
		Addr:            kafka.TCP(b.Addrs()...),
		Topic:           topic,
		Balancer:        &kafka.Hash{},
		RequiredAcks:    kafka.RequireAll,
		BatchTimeout:    5 * time.Millisecond,
		WriteBackoffMin: 50 * time.Millisecond,
		WriteBackoffMax: 500 * time.Millisecond,
		Logger:          kafkaLogger("writer"),
		ErrorLogger:     kafkaLogger("writer-err"),
	}
}

// produce writes n messages key "k<i>" value "<prefix>-<i>" and returns the
// values.
func produce(t *testing.T, ctx context.Context, w *kafka.Writer, prefix string, n int) []string {
	t.Helper()
	msgs := make([]kafka.Message, n)
	vals := make([]string, n)
	for i := range msgs {
		vals[i] = fmt.Sprintf("%s-%d", prefix, i)
		msgs[i] = kafka.Message{Key: []byte(fmt.Sprintf("k%d", i%37)), Value: []byte(vals[i])}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("write %d messages: %v", n, err)
	}
	return vals
}

// groupConfig is a consumer-group configuration with short timers, so that
// joins and rebalances take well under a second against the embedded broker.
func groupConfig(b *Broker, group string, topics ...string) kafka.ConsumerGroupConfig {
	return kafka.ConsumerGroupConfig{
		ID:                group,
		Brokers:           b.Addrs(),
		Topics:            topics,
		StartOffset:       kafka.FirstOffset,
		HeartbeatInterval: 100 * time.Millisecond,
		SessionTimeout:    2 * time.Second,
		RebalanceTimeout:  2 * time.Second,
		JoinGroupBackoff:  100 * time.Millisecond,
		Timeout:           2 * time.Second,
		Logger:            kafkaLogger("group-" + group),
		ErrorLogger:       kafkaLogger("group-err-" + group),
	}
}

// collector records consumed messages from several partition goroutines.
type collector struct {
	// mu guards seen, next and count.
	mu    sync.Mutex
	seen  map[string]int          // value -> times consumed
	next  map[int]int64           // partition -> offset after the last consumed message
	parts map[string]map[int]bool // key -> partitions it was read from
	count int
}

func newCollector() *collector {
	return &collector{seen: map[string]int{}, next: map[int]int64{}, parts: map[string]map[int]bool{}}
}

func (c *collector) add(m kafka.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[string(m.Value)]++
	c.next[m.Partition] = m.Offset + 1
	k := string(m.Key)
	if c.parts[k] == nil {
		c.parts[k] = map[int]bool{}
	}
	c.parts[k][m.Partition] = true
	c.count++
}

func (c *collector) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

// offsets returns a copy of partition -> next offset.
func (c *collector) offsets() map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int]int64, len(c.next))
	for p, o := range c.next {
		out[p] = o
	}
	return out
}

// check reports an error unless every value in want was consumed exactly once
// and nothing else was consumed, and every key stayed on one partition.
func (c *collector) check(t *testing.T, want []string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	wantSet := make(map[string]bool, len(want))
	for _, v := range want {
		wantSet[v] = true
		if n := c.seen[v]; n != 1 {
			t.Errorf("value %q consumed %d times, want 1", v, n)
		}
	}
	for v, n := range c.seen {
		if !wantSet[v] {
			t.Errorf("unexpected value %q consumed %d times", v, n)
		}
	}
	for k, ps := range c.parts {
		if len(ps) != 1 {
			t.Errorf("key %q read from %d partitions, want 1", k, len(ps))
		}
	}
}

// consumePartition reads one partition from offset with a partition-bound
// kafka.Reader (no GroupID) until ctx ends, handing each message to c.
func consumePartition(ctx context.Context, b *Broker, topic string, partition int, offset int64, c *collector) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     b.Addrs(),
		Topic:       topic,
		Partition:   partition,
		MinBytes:    1,
		MaxBytes:    1 << 20,
		MaxWait:     readerMaxWait,
		Logger:      kafkaLogger(fmt.Sprintf("reader-%d", partition)),
		ErrorLogger: kafkaLogger(fmt.Sprintf("reader-err-%d", partition)),
	})
	defer r.Close()
	if err := r.SetOffset(offset); err != nil {
		return fmt.Errorf("set offset %d: %w", offset, err)
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("partition %d: %w", partition, err)
		}
		c.add(m)
	}
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func partitionsOf(a map[string][]kafka.PartitionAssignment, topic string) []int {
	var ps []int
	for _, p := range a[topic] {
		ps = append(ps, p.ID)
	}
	sort.Ints(ps)
	return ps
}

// readerMaxWait is the fetch long-poll of every test reader. kafka-go asks
// the broker to wait MaxWait minus a margin of MaxWait/4 (below 1.33s) and
// sets its socket deadline at MaxWait; with 100ms the 25ms margin was
// observed to expire on a loaded machine ("i/o timeout", then a reconnect
// with backoff). 500ms leaves 125ms. When data is waiting the broker answers
// at once, so this only bounds idle polling.
const readerMaxWait = 500 * time.Millisecond
