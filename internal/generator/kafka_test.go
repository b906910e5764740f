package generator

import (
	"context"
	"testing"
	"time"

	"github.com/dpstage/stage/internal/lib/embedded"
	"github.com/segmentio/kafka-go"
)

// Run into a real kafka-go Writer against the embedded broker: every event
// arrives once, keyed by user, each user on one partition in stream order,
// and Truth(Written()) counts what is in the topic.
func TestRunIntoEmbeddedBroker(t *testing.T) {
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"events": 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	w := &kafka.Writer{
		Addr: kafka.TCP(b.Addrs()...), Topic: "events", Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 5 * time.Millisecond,
	}
	defer w.Close()
	g := mustNew(t, Config{Start: t0, Users: 50, EventsPerSecond: 5000, TimeScale: 20, Seed: 2, Limit: 3000})
	if err := g.Run(ctx, w); err != nil {
		t.Fatal(err)
	}
	if g.Written() != 3000 {
		t.Fatalf("written %d, want 3000", g.Written())
	}

	pages := map[string]int{}
	partOf := map[string]int{}
	lastSeq := map[string]int64{}
	got := 0
	for p := range 4 {
		conn, err := kafka.DialLeader(ctx, "tcp", b.Addr(), "events", p)
		if err != nil {
			t.Fatal(err)
		}
		hw, err := conn.ReadLastOffset()
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if hw == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: b.Addrs(), Topic: "events", Partition: p, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 500 * time.Millisecond})
		for {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got++
			user := string(m.Key)
			if q, ok := partOf[user]; ok && q != p {
				t.Fatalf("user %s on partitions %d and %d", user, q, p)
			}
			partOf[user] = p
			seq := seqOf(t, m.Value)
			if last, ok := lastSeq[user]; ok && seq <= last {
				t.Fatalf("user %s: seq %d after %d", user, seq, last)
			}
			lastSeq[user] = seq
			e := g.Event(seq)
			if e.UserID != user || string(g.AppendJSON(nil, e)) != string(m.Value) {
				t.Fatalf("message %s is not event %d", m.Value, seq)
			}
			pages[e.Page]++
			if m.Offset+1 >= hw {
				break
			}
		}
		r.Close()
	}
	if got != 3000 {
		t.Fatalf("topic holds %d events, want 3000", got)
	}
	ws, err := g.Truth(g.Written(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	truth := map[string]int{}
	for _, w := range ws {
		for p, c := range w.Pages {
			truth[p] += c
		}
	}
	for _, p := range Pages {
		if truth[p] != pages[p] {
			t.Errorf("page %s: topic has %d, Truth says %d", p, pages[p], truth[p])
		}
	}
}

// seqOf extracts "seq" from an event without a JSON library.
func seqOf(t *testing.T, v []byte) int64 {
	t.Helper()
	const key = `"seq":`
	for i := len(v) - len(key); i >= 0; i-- {
		if string(v[i:i+len(key)]) == key {
			var n int64
			for _, c := range v[i+len(key):] {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int64(c-'0')
			}
			return n
		}
	}
	t.Fatalf("no seq in %s", v)
	return 0
}
