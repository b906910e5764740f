package embedded

import (
	"context"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafka4Min is the lowest version of each request that Apache Kafka 4.0
// still accepts (KIP-896, as recorded in franz-go's kversion for 4.0);
// requests not listed accept version 0. Kafka 4.1 accepts JoinGroup v0 and
// v1 again (KAFKA-19444).
var kafka4Min = map[int16]int16{
	0: 3, 1: 4, 2: 1, 8: 2, 9: 1, 11: 2, 19: 2, 20: 1, 23: 2, 27: 1,
	29: 1, 30: 1, 31: 1, 32: 1, 34: 1, 35: 1, 38: 1, 39: 1, 40: 1, 41: 1,
}

// The protocol versions kafka-go v0.4.51 actually sends in the flows the
// stage uses (Writer, ConsumerGroup + partition Readers, group Reader,
// DialLeader/ReadLastOffset), observed at the embedded broker, and whether a
// Kafka 4.x broker would still accept them.
func TestKafkaGoProtocolVersions(t *testing.T) {
	b := startBroker(t, map[string]int{"events": 2})
	var (
		// mu guards seen.
		mu   sync.Mutex
		seen = map[int16]map[int16]bool{}
	)
	b.Cluster().Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		if seen[req.Key()] == nil {
			seen[req.Key()] = map[int16]bool{}
		}
		seen[req.Key()][req.GetVersion()] = true
		return nil, nil, false // observe only
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	w := newWriter(b, "events")
	want := produce(t, ctx, w, "v", 20)
	w.Close()

	cg, err := kafka.NewConsumerGroup(groupConfig(b, "versions", "events"))
	if err != nil {
		t.Fatal(err)
	}
	gen, err := cg.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := newCollector()
	for _, a := range gen.Assignments["events"] {
		gen.Start(func(gctx context.Context) { _ = consumePartition(gctx, b, "events", a.ID, a.Offset, c) })
	}
	waitFor(t, 10*time.Second, "20 messages", func() bool { return c.total() >= len(want) })
	if err := gen.CommitOffsets(map[string]map[int]int64{"events": c.offsets()}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // let a heartbeat go out
	cg.Close()

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: b.Addrs(), GroupID: "versions-reader", Topic: "events",
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: readerMaxWait,
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second,
		RebalanceTimeout: 2 * time.Second,
	})
	m, err := r.FetchMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CommitMessages(ctx, m); err != nil {
		t.Fatal(err)
	}
	r.Close()

	conn, err := kafka.DialLeader(ctx, "tcp", b.Addr(), "events", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ReadLastOffset(); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	mu.Lock()
	defer mu.Unlock()
	keys := make([]int, 0, len(seen))
	for k := range seen {
		keys = append(keys, int(k))
	}
	sort.Ints(keys)
	for _, k := range keys {
		var vs []int
		for v := range seen[int16(k)] {
			vs = append(vs, int(v))
		}
		slices.Sort(vs)
		name := kmsg.NameForKey(int16(k))
		t.Logf("%-16s key %2d: versions %v (Kafka 4.0 minimum %d)", name, k, vs, kafka4Min[int16(k)])
		for _, v := range vs {
			if int16(v) < kafka4Min[int16(k)] {
				t.Errorf("kafka-go sends %s v%d, below Kafka 4.0's minimum v%d", name, v, kafka4Min[int16(k)])
			}
		}
	}
	for _, k := range []int16{0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14} {
		if seen[k] == nil {
			t.Errorf("no %s request observed", kmsg.NameForKey(k))
		}
	}
}
