package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dpstage/stage/internal/embedded"
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
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "t", RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
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
	f := newConnFetcher(nil, b.Addrs(), "t", 0, kafka.FirstOffset)
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	for i := int64(0); i < 10; i++ {
		m, err := f.fetch(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if m.Offset != i || m.Value[0] != byte(i) || m.HighWaterMark != 10 {
			t.Fatalf("message %d: offset %d value %v hwm %d", i, m.Offset, m.Value, m.HighWaterMark)
		}
	}
	conn := f.conn
	start := time.Now()
	_, err := f.fetch(ctx)
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

	f := newConnFetcher(nil, b.Addrs(), "t", 0, 5)
	var from, to int64 = -1, -1
	f.onReset = func(a, b int64) { from, to = a, b }
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := f.fetch(ctx)
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
	f := newConnFetcher(nil, b.Addrs(), "t", 0, 50)
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := f.fetch(ctx); !errors.Is(err, kafka.OffsetOutOfRange) {
		t.Fatalf("got %v, want OffsetOutOfRange", err)
	}
}

// TestPermanentPublishErrors: what the sink gives up on at once (and the
// stage then stops, loudly) versus what it retries.
func TestPermanentPublishErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{kafka.MessageTooLargeError{}, true},
		{kafka.TopicAuthorizationFailed, true},
		{kafka.InvalidTopic, true},
		{kafka.WriteErrors{nil, kafka.MessageSizeTooLarge}, true},
		{kafka.NotEnoughReplicas, false},
		{kafka.LeaderNotAvailable, false},
		{kafka.WriteErrors{kafka.NotLeaderForPartition, nil}, false},
		{errors.New("dial tcp 127.0.0.1:9: connection refused"), false},
		{context.DeadlineExceeded, false},
	} {
		if got := permanent(c.err); got != c.want {
			t.Errorf("permanent(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
