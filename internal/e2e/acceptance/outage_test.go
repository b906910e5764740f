package acceptance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/sink"
)

// avroV2 is the acceptance Avro schema with a doc string added: a new,
// compatible version with its own schema id, whose records the stage has
// not seen.
func avroV2(t *testing.T) string {
	t.Helper()
	s := e2e.SchemaText(t, "avro")
	v2 := strings.Replace(s, `"namespace": "dpstage.acceptance",`, `"namespace": "dpstage.acceptance", "doc": "version 2: a doc string",`, 1)
	if v2 == s {
		t.Fatal("avroV2: the namespace line of pageview.avsc changed")
	}
	return v2
}

// committed returns the group's committed offset of every input partition
// (-1 when none).
func committed(t *testing.T, addr, group, topic string, n int) []int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, n)
	for p := range out {
		out[p] = -1
		if o, ok := offs.Lookup(topic, int32(p)); ok {
			out[p] = o.At
		}
	}
	return out
}

// perPartition counts evs by input partition (of n, murmur2 of the user:
// kgo's default partitioner).
func perPartition(evs []e2e.Event, n int) []int64 {
	out := make([]int64, n)
	for _, e := range evs {
		out[e2e.Murmur2Partition(e.User, n)]++
	}
	return out
}

// distConfig turns cfg into the distributed mode's (one instance here: the
// internal topics created by the stage, the release log on Kafka).
func distConfig(t *testing.T, h *e2e.Harness, cfg *config.Config) *config.Config {
	t.Helper()
	cfg.Kafka.SessionTimeout = config.Duration(time.Second)
	cfg.Kafka.Distributed = config.Distributed{Enabled: true, Partitioner: config.PartitionerMurmur2, CreateTopics: true}
	cfg.State.Ledger, cfg.State.LedgerTopic = config.LedgerKafka, "ledger-"+h.Name
	cfg.Contribution.MaxTrackedUsers = 0
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestRegistryOutage: the Schema Registry stops (single-process mode) or
// answers 503 (distributed mode) mid-stream. Window 0's
// records (schema id 1) are read and counted; the registry stops; the
// later windows' records carry id 2 (a new compatible version registered
// before the outage), which the stage has not fetched. Their partitions
// hold: no record decoded or dropped, no offset committed past them, the
// readiness condition and the metric say so, and the fetch is retried with
// back-off. When the registry is back every record is counted: the
// releases of windows 0–2 are exactly the bounded truth of all the events.
// In the single-process and the distributed mode.
func TestRegistryOutage(t *testing.T) {
	t.Parallel()
	for _, dist := range []bool{false, true} {
		name := "single"
		if dist {
			name = "distributed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := e2e.New(t)
			reg := startRegistry(t)
			cfg := accConfig(t, h, params{format: "avro", registry: reg.URL(), user: "user.id", device: "device", timeout: "300ms"})
			if dist {
				cfg = distConfig(t, h, cfg)
			}
			evs := e2e.Stream(3, 100)
			var w0, rest []e2e.Event
			for _, e := range evs {
				if e.At.Before(e2e.Base.Add(time.Minute)) {
					w0 = append(w0, e)
				} else {
					rest = append(rest, e)
				}
			}
			subject := h.Input() + "-value"
			id1 := e2e.RegisterSerde(t, reg.URL(), subject, "avro", e2e.SchemaText(t, "avro"))
			id2 := e2e.RegisterSerde(t, reg.URL(), subject, "avro", avroV2(t))
			if id1 == id2 {
				t.Fatalf("schema ids %d and %d: the second version did not get its own id", id1, id2)
			}
			addrs := h.Broker.Addrs()
			e2e.ProduceSerdeID(t, addrs, h.Input(), "avro", id1, w0)
			run := h.Start(cfg)
			st := run.Stage.Stats()
			e2e.WaitFor(t, "window 0 decoded", 30*time.Second, func() bool { return st.Decoded.Load() >= int64(len(w0)) })

			// The single-process mode meets a registry that is down
			// (connection refused), the distributed mode one that answers
			// 503 to every request.
			outage, back := reg.Stop, func() error { return reg.Start() }
			if dist {
				outage, back = func() { reg.FailWith(503) }, func() error { reg.FailWith(0); return nil }
			}
			outage()
			before := st.Dropped() // window 0's bound drops
			e2e.ProduceSerdeID(t, addrs, h.Input(), "avro", id2, rest)
			e2e.WaitFor(t, "the readiness condition of the unreachable registry", 10*time.Second, func() bool {
				return run.Stage.Readiness().SchemaRegistryUnreachable
			})
			if run.Stage.Readiness().Ready() {
				t.Error("ready while the registry cannot be reached")
			}
			time.Sleep(1500 * time.Millisecond) // a few retries with back-off
			// (The distributed mode may read window 0 again after a
			// rebalance: its progress is checked by the offsets below.)
			if d := st.Decoded.Load(); d != int64(len(w0)) && !dist {
				t.Errorf("decoded %d records during the outage, want %d (window 0's only)", d, len(w0))
			}
			for reason, n := range st.Dropped() {
				if n != before[reason] {
					t.Errorf("%d records dropped as %s during the outage", n-before[reason], reason)
				}
			}
			if n := st.Releases.Load(); n != 0 {
				t.Errorf("%d releases during the outage, want 0 (window 0 waits for the later windows' records)", n)
			}
			held, retries := st.SchemaRegistryHeld.Load(), st.SchemaRegistryRetries.Load()
			if held < 1 || retries < 2 {
				t.Errorf("during the outage: %d partitions held, %d retries; want at least 1 and 2", held, retries)
			}
			n0 := perPartition(w0, 4)
			for p, off := range committed(t, h.Broker.Addr(), cfg.Kafka.GroupID, h.Input(), 4) {
				if off > n0[p] {
					t.Errorf("partition %d: offset %d committed during the outage, past its first held record (offset %d)", p, off, n0[p])
				}
			}

			if err := back(); err != nil {
				t.Fatal(err)
			}
			e2e.ProduceSerdeID(t, addrs, h.Input(), "avro", id2, []e2e.Event{flushEvent})
			if dist {
				// The distributed mode releases the flush's window too: its
				// partitions turn idle and emit it (see package distributed).
				checkReleases(t, h, append(evs, flushEvent), 4)
			} else {
				checkReleases(t, h, evs, 3)
			}
			e2e.WaitFor(t, "every record decoded", 10*time.Second, func() bool { return st.Decoded.Load() >= int64(len(evs)+1) })
			// The distributed mode may read records again after a rebalance
			// (the partials keep the counting exact): at least every record.
			if d := st.Decoded.Load(); d != int64(len(evs)+1) && !dist {
				t.Errorf("decoded %d records, produced %d", d, len(evs)+1)
			}
			for reason, n := range st.Dropped() {
				if !strings.HasPrefix(reason, "bound_") {
					t.Errorf("%d records dropped as %s", n, reason)
				}
			}
			e2e.WaitFor(t, "the readiness condition cleared", 10*time.Second, func() bool {
				return !run.Stage.Readiness().SchemaRegistryUnreachable && st.SchemaRegistryHeld.Load() == 0
			})
			t.Logf("%s: %d events (+1 flush): %d decoded before the outage, %d retries with %d partitions held during it, %d decoded in all; dropped %v",
				name, len(evs), len(w0), retries, held, st.Decoded.Load(), st.Dropped())
		})
	}
}

// The drop reasons of bad schema-encoded input (package decode's labels).
const (
	reasonBadMagic      = "unknown_magic_byte"
	reasonUnknownSchema = "unknown_schema_id"
	reasonUndecodable   = "undecodable"
)

// TestBadInput: records that are not the Confluent wire format (a magic
// byte other than 0), name a schema id the registry does not have, or do
// not decode under their schema are dropped, each with its own reason, and
// forwarded to the dead-letter topic with the reason header; the good
// records around them are released exactly.
func TestBadInput(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	reg := startRegistry(t)
	cfg := accConfig(t, h, params{format: "avro", registry: reg.URL(), user: "$key", device: "$header.device", dlq: true})
	evs := e2e.Stream(3, 60)
	id := e2e.ProduceSerde(t, h.Broker.Addrs(), reg.URL(), h.Input(), "avro", evs)
	v := e2e.SerdeEncoder(t, "avro", id)(e2e.Event{User: "bad", At: e2e.Base.Add(30 * time.Second), Page: "home", Country: "US", Device: "mobile"})
	badMagic := append([]byte{1}, v[1:]...)
	unknownID := append([]byte{0, 0, 0, 0x27, 0x0f}, v[5:]...) // id 9999
	truncated := v[:len(v)-4]                                  // the record's last string cut short
	bad := map[string]string{string(badMagic): reasonBadMagic, string(unknownID): reasonUnknownSchema, string(truncated): reasonUndecodable}
	var msgs []kafka.Message
	for b := range bad {
		msgs = append(msgs, kafka.Message{Key: []byte("bad"), Value: []byte(b), Headers: []kafka.Header{{Key: "device", Value: []byte("mobile")}}})
	}
	h.Produce(msgs...)
	run := h.Start(cfg)
	e2e.ProduceSerdeID(t, h.Broker.Addrs(), h.Input(), "avro", id, []e2e.Event{flushEvent})
	checkReleases(t, h, evs, 3)

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{h.Broker.Addr()}, Topic: "dlq-" + h.Name, Partition: 0,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 300 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := map[string]string{}
	for len(got) < len(bad) {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("dead-letter topic: %d of %d records: %v", len(got), len(bad), err)
		}
		for _, hd := range m.Headers {
			if hd.Key == sink.DropReasonHeader {
				got[string(m.Value)] = string(hd.Value)
			}
		}
	}
	d := run.Stage.Stats().Dropped()
	for v, want := range bad {
		if got[v] != want {
			t.Errorf("% x: dead-letter reason %q, want %q", v, got[v], want)
		}
		if d[want] != 1 {
			t.Errorf("%s: %d drops counted, want 1 (dropped: %v)", want, d[want], d)
		}
	}
	t.Logf("bad input: %d records dead-lettered with their reasons; dropped %v", len(got), d)
}
