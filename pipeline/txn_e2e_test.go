package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// txnClient is a kgo producer for the harness's input topic; with a
// transactional id it is an exactly-once producer (as Flink, Kafka Streams
// or Debezium use) that commits or aborts.
func txnClient(h *e2e.Harness, id string, opts ...kgo.Opt) *kgo.Client {
	h.T.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(h.Broker.Addr()), kgo.DefaultProduceTopic("events-" + h.Name)}, opts...)
	if id != "" {
		opts = append(opts, kgo.TransactionalID(id))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		h.T.Fatal(err)
	}
	h.T.Cleanup(cl.Close)
	return cl
}

func records(evs []e2e.Event) []*kgo.Record {
	out := make([]*kgo.Record, len(evs))
	for i, e := range evs {
		out[i] = &kgo.Record{Key: []byte(e.User), Value: e.JSON()}
	}
	return out
}

// txn writes evs in one transaction of cl and commits it, aborts it, or
// (end nil) leaves it open.
func txn(h *e2e.Harness, cl *kgo.Client, evs []e2e.Event, end *kgo.TransactionEndTry) {
	h.T.Helper()
	txnTo(h, cl, evs, -1, end)
}

// txnTo is txn with every record sent to partition p (p ≥ 0: cl must use
// kgo.ManualPartitioner).
func txnTo(h *e2e.Harness, cl *kgo.Client, evs []e2e.Event, p int32, end *kgo.TransactionEndTry) {
	h.T.Helper()
	recs := records(evs)
	if p >= 0 {
		for _, r := range recs {
			r.Partition = p
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		h.T.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		h.T.Fatal(err)
	}
	if end != nil {
		if err := cl.EndTransaction(ctx, *end); err != nil {
			h.T.Fatal(err)
		}
	}
}

// users makes n events of distinct users prefix-i in window w (minutes
// after base) with the given page, country and device pattern.
func users(prefix string, n, w int, page func(int) string, country func(int) string, device func(int) string) []e2e.Event {
	evs := make([]e2e.Event, n)
	for i := range evs {
		evs[i] = e2e.Event{User: fmt.Sprintf("%s-%d", prefix, i), At: e2e.Base.Add(time.Duration(w)*time.Minute + time.Duration(i)*time.Millisecond),
			Page: page(i), Country: country(i), Device: device(i)}
	}
	return evs
}

func cycle(vs []string) func(int) string { return func(i int) string { return vs[i%len(vs)] } }
func fixed(v string) func(int) string    { return func(int) string { return v } }

// checkReleases reads the releases of windows 0 and 1 (pages for US, DE,
// FR, and devices) and checks each against the true bounded shares of evs.
func checkReleases(h *e2e.Harness, evs []e2e.Event) {
	h.T.Helper()
	want := 2 * (len(e2e.Groups) + 1)
	out := h.ReadOutput(want, 60*time.Second, time.Second)
	tr := e2e.ComputeTruth(evs)
	seen := map[string]bool{}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		if ws.After(e2e.Base.Add(time.Minute)) {
			continue
		}
		k := e2e.Key(r.Histogram, r.Group, ws)
		if seen[k] {
			h.T.Errorf("duplicate release %s", k)
		}
		seen[k] = true
		e2e.CheckExact(h.T, k, r, tr[k])
	}
	if len(seen) != want {
		h.T.Errorf("released %d units of windows 0–1, want %d", len(seen), want)
	}
}

// TestTransactionalInput (issue 16, item 1): exactly-once producers commit,
// abort and retry transactions. The stage reads with read_committed
// semantics: records of aborted transactions are never counted, commit and
// abort markers are neither events nor dead letters, and records of a
// transaction still open are not read — they hold their partition (not
// caught up, not idle) — until it commits; then they count. Releases
// (near-noiseless Gaussian) equal the true shares of the plain and
// committed events exactly; the aborted events (all desktop/checkout/DE,
// unlike the rest) and the open transaction's events (all mobile/home/US)
// would move them. Offsets are committed past the markers.
func TestTransactionalInput(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	// The producers append windows 0 and 1 alternately, so each partition's
	// event times go back and forth; with the event watermark and no
	// lateness, window 0 could close as soon as every partition had shown a
	// window-1 event, before the later window-0 events were read (a race
	// with the releaser: 102 of 700 events late once on a loaded machine).
	// A minute's lateness holds window 0 until the partitions are read to
	// their end (the flush at 3m01s then closes windows 0 and 1).
	cfg.Window.AllowedLateness = config.Duration(time.Minute)
	cfg.Kafka.DeadLetterTopic = "dlq-" + h.Name
	mixed := func(prefix string, n, w int) []e2e.Event {
		return users(prefix, n, w, cycle(e2e.Pages), cycle([]string{"US", "DE"}), cycle(e2e.Devices))
	}
	rolledBack := func(prefix string, n, w int) []e2e.Event {
		return users(prefix, n, w, fixed("checkout"), fixed("DE"), fixed("desktop"))
	}
	commit, abort := kgo.TryCommit, kgo.TryAbort
	committer := txnClient(h, "committer", kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	aborter := txnClient(h, "aborter", kgo.ProducerBatchCompression(kgo.GzipCompression()))
	// The open transaction writes to one partition only, not the flush's:
	// the flush is read at once and would close window 1 if that
	// partition, held at the last stable offset, counted as caught up or
	// idle.
	flushPart := (&kafka.Hash{}).Balance(kafka.Message{Key: []byte("flush")}, 0, 1, 2, 3)
	openPart := int32((flushPart + 1) % 4)
	opener := txnClient(h, "opener", kgo.RecordPartitioner(kgo.ManualPartitioner()))

	var counted []e2e.Event
	plain := mixed("plain1", 100, 0)
	h.ProduceEvents(plain)
	counted = append(counted, plain...)
	c := mixed("commit1", 150, 0)
	txn(h, committer, c, &commit)
	counted = append(counted, c...)
	txn(h, aborter, rolledBack("abort1", 120, 0), &abort)
	// A retried transaction: aborted, then the same events committed.
	retried := mixed("retry", 80, 1)
	txn(h, committer, retried, &abort)
	txn(h, committer, retried, &commit)
	counted = append(counted, retried...)
	openEvs := users("open", 60, 1, fixed("home"), fixed("US"), fixed("mobile"))
	txnTo(h, opener, openEvs, openPart, nil)
	plain = mixed("plain2", 100, 1)
	h.ProduceEvents(plain)
	counted = append(counted, plain...)
	c = mixed("commit2", 90, 1)
	txn(h, committer, c, &commit)
	counted = append(counted, c...)
	txn(h, aborter, rolledBack("abort2", 70, 1), &abort)
	h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))

	run := h.Start(cfg)
	st := run.Stage.Stats()
	// Everything readable is read: the plain and committed events and the
	// flush. The open transaction's events and whatever follows them on
	// their partitions are held at the last stable offset, so window 1
	// cannot close.
	readable := len(counted)
	time.Sleep(3 * time.Second)
	if d := st.Decoded.Load(); d > int64(readable+1) {
		t.Errorf("decoded %d events while a transaction is open, at most %d are committed: aborted or open-transaction records were read", d, readable+1)
	}
	if r := st.Releases.Load(); r > int64(len(e2e.Groups)+1) {
		t.Errorf("%d release messages while a transaction holds window 1 open: window 1 was released", r)
	}
	if err := opener.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	counted = append(counted, openEvs...)
	checkReleases(h, counted)
	if d := st.Decoded.Load(); d != int64(len(counted)+1) {
		t.Errorf("decoded %d events, want %d (plain, committed and flush)", d, len(counted)+1)
	}
	if c := st.Consumed.Load(); c != int64(len(counted)+1) {
		t.Errorf("consumed %d messages, want %d: markers or aborted records were read", c, len(counted)+1)
	}
	if d := st.Dropped(); len(d) > 0 && (d["bad_json"] > 0 || d["late"] > 0) {
		t.Errorf("drops %v: no marker may be dead-lettered, no event may be late", d)
	}
	// Offsets are committed past the markers: every partition but the
	// flush's (window 3 is open) is committed to its end.
	checkCommittedToEnd(h, cfg.Kafka.GroupID, "flush")
}

// checkCommittedToEnd waits until every input partition except the one
// holding key exceptKey is committed to its end offset.
func checkCommittedToEnd(h *e2e.Harness, group, exceptKey string) {
	h.T.Helper()
	topic := "events-" + h.Name
	cl := &kafka.Client{Addr: kafka.TCP(h.Broker.Addr()), Timeout: 10 * time.Second}
	ctx := context.Background()
	skip := (&kafka.Hash{}).Balance(kafka.Message{Key: []byte(exceptKey)}, 0, 1, 2, 3)
	var last string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ends, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {
			kafka.LastOffsetOf(0), kafka.LastOffsetOf(1), kafka.LastOffsetOf(2), kafka.LastOffsetOf(3)}}})
		if err != nil {
			h.T.Fatal(err)
		}
		com, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {0, 1, 2, 3}}})
		if err != nil {
			h.T.Fatal(err)
		}
		end := map[int]int64{}
		for _, p := range ends.Topics[topic] {
			end[p.Partition] = p.LastOffset
		}
		ok := true
		last = ""
		for _, p := range com.Topics[topic] {
			last += fmt.Sprintf(" p%d committed %d end %d;", p.Partition, p.CommittedOffset, end[p.Partition])
			if p.Partition != skip && p.CommittedOffset != end[p.Partition] {
				ok = false
			}
		}
		if ok {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	h.T.Errorf("offsets not committed to the partitions' ends (past the markers):%s", last)
}

// TestCompressedInput: batches compressed with every codec Kafka has (gzip,
// snappy, lz4, zstd), written by kafka-go's Writer and by franz-go (kgo),
// are read and counted exactly.
func TestCompressedInput(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	// The producers append windows 0 and 1 alternately, so each partition's
	// event times go back and forth; with the event watermark and no
	// lateness, window 0 could close as soon as every partition had shown a
	// window-1 event, before the later window-0 events were read (a race
	// with the releaser: 102 of 700 events late once on a loaded machine).
	// A minute's lateness holds window 0 until the partitions are read to
	// their end (the flush at 3m01s then closes windows 0 and 1).
	cfg.Window.AllowedLateness = config.Duration(time.Minute)
	codecs := []struct {
		name  string
		kafka kafka.Compression
		kgo   kgo.CompressionCodec
	}{
		{"gzip", kafka.Gzip, kgo.GzipCompression()},
		{"snappy", kafka.Snappy, kgo.SnappyCompression()},
		{"lz4", kafka.Lz4, kgo.Lz4Compression()},
		{"zstd", kafka.Zstd, kgo.ZstdCompression()},
	}
	var all []e2e.Event
	for i, c := range codecs {
		evs := users("kafka-go-"+c.name, 200, i%2, cycle(e2e.Pages), cycle([]string{"US", "DE"}), cycle(e2e.Devices))
		w := &kafka.Writer{Addr: kafka.TCP(h.Broker.Addr()), Transport: e2e.NewTransport(t), Topic: "events-" + h.Name, Balancer: &kafka.Hash{},
			RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 10000, Compression: c.kafka}
		msgs := make([]kafka.Message, len(evs))
		for j, e := range evs {
			msgs[j] = kafka.Message{Key: []byte(e.User), Value: e.JSON()}
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		w.Close()
		all = append(all, evs...)

		// A different mix per producer so that a batch lost or read twice
		// moves the shares.
		evs = users("kgo-"+c.name, 150+50*i, (i+1)%2, cycle(e2e.Pages[i%3:]), fixed("US"), cycle(e2e.Devices[i%2:]))
		cl := txnClient(h, "", kgo.ProducerBatchCompression(c.kgo))
		if err := cl.ProduceSync(context.Background(), records(evs)...).FirstErr(); err != nil {
			t.Fatalf("kgo %s: %v", c.name, err)
		}
		all = append(all, evs...)
	}
	h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))
	run := h.Start(cfg)
	checkReleases(h, all)
	if d := run.Stage.Stats().Decoded.Load(); d != int64(len(all)+1) {
		t.Errorf("decoded %d events, want %d", d, len(all)+1)
	}
}
