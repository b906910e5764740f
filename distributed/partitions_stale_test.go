package distributed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/release"
)

// TestDistPartitionsAddedStaleProducers (issue 28 item 1): the input topic
// grows from 4 to 6 partitions while events flow, and producers that have
// not refreshed their metadata yet (metadata.max.age.ms, 5 minutes by
// default) still write with the old count. The documented recovery (a new
// internal_topic_prefix over the pinned release log) re-reads the windows
// around the change, and its bounders drop every event whose user now
// hashes to another partition (wrong_partition): about two thirds of the
// stale producers' events. Those windows must never be released as
// complete: each of their releases says "complete": false with the reason
// "partitions_changed" in its coverage, and holds exactly the events that
// were counted (no user counts twice). A window that starts after the
// change plus the grace (kafka.distributed.partition_change_grace) and
// events.max_future is released exactly and complete; exactly the windows
// that start before the moment the release log recorded for the change
// plus that span are marked.
//
// "older log": the release log holds no partition count (as one an older
// version wrote; here its record is deleted while the stage is down): the
// recovery, on new internal topics, cannot tell the count the windows were
// written with, and marks them all the same.
func TestDistPartitionsAddedStaleProducers(t *testing.T) {
	t.Parallel() // its own brokers and state; waits on the clock (CI time)
	for _, older := range []bool{false, true} {
		t.Run(map[bool]string{false: "recorded", true: "older log"}[older], func(t *testing.T) {
			t.Parallel()
			staleProducers(t, older)
		})
	}
}

func staleProducers(t *testing.T, olderLog bool) {
	const size, lateness = 2 * time.Second, 300 * time.Millisecond
	const grace, future = 30 * time.Second, time.Second
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	cfg := distRunConfig(t, h, size, lateness)
	cfg.Events.MaxFuture = config.Duration(future)
	cfg.Kafka.Distributed.PartitionChangeGrace = config.Duration(grace)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	per := int64(len(e2e.Groups) + 1)
	nextWindow := func() time.Time {
		w := time.Now().Truncate(size).Add(size)
		e2e.WaitPast(w.Add(50 * time.Millisecond))
		return w
	}
	// events are n users' events at the start of window w, one each
	// (max_events_per_user 1: nothing is bounded away).
	events := func(prefix string, n int, w time.Time) []e2e.Event {
		evs := make([]e2e.Event, n)
		for i := range evs {
			evs[i] = e2e.Event{User: fmt.Sprintf("%s-%d", prefix, i), At: w.Add(50 * time.Millisecond), Page: e2e.Pages[(i*i+i/7)%len(e2e.Pages)],
				Country: e2e.Groups[(i/3)%2], Device: e2e.Devices[(i/2)%2]}
		}
		return evs
	}

	a := h.Start(cfg)
	time.Sleep(time.Second) // the groups settle
	w1 := nextWindow()
	ev1 := events("a", 60, w1)
	produceMod(t, h, ev1, 4)
	waitReleased(t, h, w1, int(per), 30*time.Second)
	// Window 1b is written just before the change: the running stage may
	// release it (it then saw 4 partitions after reading its partials:
	// complete), or stop first (the recovery re-reads it: incomplete).
	w1b := nextWindow()
	ev1b := events("b", 60, w1b)
	produceMod(t, h, ev1b, 4)

	addInputPartitions(t, h, 2)
	changed := time.Now()
	select {
	case err := <-a.Done():
		a.Cancel()
		if !errors.Is(err, pipeline.ErrConfigChanged) {
			t.Fatalf("the stage stopped with %v, want ErrConfigChanged", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stage still runs 20s after partitions were added")
	}

	if olderLog {
		deleteLedgerRecord(t, h, cfg.State.LedgerTopic, "input_partitions")
	}

	// While the stage is down, producers go on: in window 2 every one of
	// them still writes with 4 partitions, in window 3 half of them.
	w2 := nextWindow()
	stale2 := events("s2", 150, w2)
	produceMod(t, h, stale2, 4)
	w3 := nextWindow()
	stale3, fresh3 := events("s3", 75, w3), events("n3", 75, w3)
	produceMod(t, h, stale3, 4)
	produceMod(t, h, fresh3, 6)
	if w3.After(changed.Add(grace)) {
		t.Fatalf("window 3 (%s) starts after the change (%s) plus the grace: the machine is too slow for this test", w3.Format(time.RFC3339Nano), changed.Format(time.RFC3339Nano))
	}

	// The recovery the refusal names: a new prefix, the release log pinned.
	cfg.Kafka.Distributed.InternalTopicPrefix = cfg.Kafka.GroupID + ".p6."
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b := h.Start(cfg)
	e2e.WaitFor(t, "the recovered stage to release", 30*time.Second, func() bool { return b.Stage.Readiness().Releasing })
	e2e.WaitFor(t, "the change in the release log", 30*time.Second, func() bool { return ledgerPartitions(t, h, cfg.State.LedgerTopic).Count == 6 })
	recovered := time.Now() // the change was recorded by now
	// Window 4 starts after the latest the change can have been recorded
	// (the recovery) plus the grace and events.max_future: every producer
	// writes with 6 partitions by then.
	e2e.WaitPast(recovered.Add(grace + future))
	w4 := nextWindow()
	fresh4 := events("n4", 100, w4)
	produceMod(t, h, fresh4, 6)

	out := waitReleased(t, h, w4, int(per), 60*time.Second)

	// What the recovery counts of a window it re-reads: the events whose
	// user hashes, among 6 partitions, to the partition they were written
	// to. (Windows the first stage released it counted whole.)
	stale := slices.Concat(ev1b, stale2, stale3)
	fresh := slices.Concat(fresh3, fresh4)
	all := slices.Concat(ev1, stale, fresh)
	isFresh := map[string]bool{}
	for _, e := range fresh {
		isFresh[e.User] = true
	}
	var survivors, misplaced []e2e.Event
	for _, e := range all {
		if isFresh[e.User] || e2e.Murmur2Partition(e.User, 4) == e2e.Murmur2Partition(e.User, 6) {
			survivors = append(survivors, e)
		} else {
			misplaced = append(misplaced, e)
		}
	}
	truth := e2e.ComputeTruthIn(all, size, 1, 1, 0)
	counted := e2e.ComputeTruthIn(survivors, size, 1, 1, 0)

	// Every release of the test's windows: complete and exact, or marked
	// incomplete and exactly what the recovery counted (no user twice,
	// none lost but the wrong_partition drops) — never undercounted and
	// complete.
	marked := map[int64]bool{} // by window start (ms)
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		if ws.Before(w1) {
			continue
		}
		k := e2e.ReleaseKey(r)
		cov := rawCoverage(t, out, r)
		if !ws.Before(w1b) && !ws.After(w3) || ws.Equal(w4) {
			t.Logf("%s: released %v, true %v, counted by the recovery %v; coverage %s", k, r.Probabilities, truth[k], counted[k], cov.raw)
		}
		switch {
		case cov.Complete != nil && *cov.Complete && len(cov.Incomplete) == 0:
			e2e.CheckExact(t, k, r, truth[k])
		case cov.Complete != nil && !*cov.Complete && slices.Equal(cov.Incomplete, []string{release.IncompletePartitionsChanged}):
			marked[ws.UnixMilli()] = true
			e2e.CheckExact(t, k, r, counted[k])
		default:
			t.Errorf("%s: coverage %s, want complete, or incomplete for the partition change", k, cov.raw)
		}
	}
	for _, w := range []time.Time{w2, w3} {
		if !marked[w.UnixMilli()] {
			t.Errorf("window %s (written with the old partition count) is released without the incomplete marker", w.Format(time.RFC3339Nano))
		}
	}
	for _, w := range []time.Time{w1, w4} {
		if marked[w.UnixMilli()] {
			t.Errorf("window %s is marked incomplete: it was counted whole", w.Format(time.RFC3339Nano))
		}
	}
	e2e.CheckWindowsExact(t, out.Releases, truth, w1, w4)

	// The change as the release log recorded it, and exactly the windows
	// it marks: those starting before it was seen plus the grace and
	// events.max_future (the config's clock_skew_margin is 0).
	rec := ledgerPartitions(t, h, cfg.State.LedgerTopic)
	t.Logf("release log: %+v, change %+v (partitions added at %s, recovery releasing at %s)", rec, rec.Changed,
		changed.Format(time.RFC3339Nano), recovered.Format(time.RFC3339Nano))
	if c := rec.Changed; rec.Count != 6 || c == nil || c.To != 6 || c.From != map[bool]int{false: 4, true: 0}[olderLog] ||
		c.AtMs < changed.Add(-time.Second).UnixMilli() || c.AtMs > recovered.UnixMilli() {
		t.Fatalf("the release log records %+v (change %+v): want 4 → 6 (0 → 6 for an older log) seen between the change and the recovery", rec, rec.Changed)
	}
	until := rec.Changed.AtMs + (grace + future).Milliseconds()
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		if ws.Before(w1b) {
			continue
		}
		if want := ws.UnixMilli() < until; marked[ws.UnixMilli()] != want {
			t.Errorf("%s: marked incomplete %v, want %v (the change seen at %d, marked until %d)", e2e.ReleaseKey(r), marked[ws.UnixMilli()], want, rec.Changed.AtMs, until)
		}
	}

	st := b.Stage.Stats()
	want := 0
	for _, e := range misplaced {
		if w := e.At.Truncate(size); w.Equal(w2) || w.Equal(w3) || w.Equal(w1b) && marked[w1b.UnixMilli()] {
			want++
		}
	}
	in := func(evs []e2e.Event, ws ...time.Time) int {
		n := 0
		for _, e := range evs {
			if slices.ContainsFunc(ws, e.At.Truncate(size).Equal) {
				n++
			}
		}
		return n
	}
	t.Logf("windows 2 and 3: %d events produced, %d of them with the old partition count, %d counted by the recovery; window 1b: %d events, %d of them would survive, re-read by the recovery: %v; "+
		"the recovery dropped %d events as wrong_partition; %d windows released with \"complete\": false",
		in(all, w2, w3), in(stale, w2, w3), in(survivors, w2, w3), len(ev1b), in(survivors, w1b), marked[w1b.UnixMilli()],
		st.DroppedBy(decode.ReasonWrongPartition), st.IncompleteWindows.Load())
	if d := st.DroppedBy(decode.ReasonWrongPartition); d != int64(want) || d == 0 {
		t.Errorf("%d events dropped as wrong_partition, want %d (the stale writes of the windows re-read whose user hashes elsewhere among 6)", d, want)
	}
}

// waitReleased waits until the output holds per releases of window w and
// returns the output read then.
func waitReleased(t *testing.T, h *e2e.Harness, w time.Time, per int, timeout time.Duration) e2e.Output {
	t.Helper()
	var out e2e.Output
	e2e.WaitFor(t, "the releases of window "+w.Format(time.RFC3339Nano), timeout, func() bool {
		out = h.ReadOutput(0, 5*time.Second, 2*time.Second) // reads for 2 s: the whole topic
		n := 0
		for _, r := range out.Releases {
			if ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart); ws.Equal(w) {
				n++
			}
		}
		return n >= per
	})
	return out
}

// ledgerPartitions is the release log's input_partitions record, read
// read_committed from the topic (the record's last value).
func ledgerPartitions(t *testing.T, h *e2e.Harness, topic string) kafkalog.Partitions {
	t.Helper()
	var p kafkalog.Partitions
	readCommittedTopic(t, h, topic, func(r *kgo.Record) {
		if string(r.Key) != "input_partitions" {
			return
		}
		p = kafkalog.Partitions{}
		if r.Value != nil {
			if err := json.Unmarshal(r.Value, &p); err != nil {
				t.Fatal(err)
			}
		}
	})
	return p
}

// deleteLedgerRecord writes a tombstone of key to the release log topic
// (as a log of an older version, which never wrote it, reads).
func deleteLedgerRecord(t *testing.T, h *e2e.Harness, topic, key string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Broker.Addr()), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := &kgo.Record{Key: []byte(key), Headers: []kgo.RecordHeader{{Key: "kafkalog-format", Value: []byte("1")}}}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// produceMod writes evs keyed by user, each to its user's murmur2
// partition among n: a producer that sees n partitions (n = 4 after the
// topic grew to 6: stale metadata).
func produceMod(t *testing.T, h *e2e.Harness, evs []e2e.Event, n int) {
	t.Helper()
	produceWith(t, h, evs, kafka.BalancerFunc(func(m kafka.Message, _ ...int) int { return e2e.Murmur2Partition(string(m.Key), n) }))
}

// addInputPartitions adds n partitions to the harness's input topic.
func addInputPartitions(t *testing.T, h *e2e.Harness, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Broker.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreatePartitions(ctx, n, h.Input()); err != nil {
		t.Fatal(err)
	}
}

// produceWith writes evs keyed by user, stamped with their event times,
// through balancer.
func produceWith(t *testing.T, h *e2e.Harness, evs []e2e.Event, balancer kafka.Balancer) {
	t.Helper()
	// A transport of its own: kafka-go's default one caches the topic's
	// metadata for seconds.
	w := &kafka.Writer{Addr: kafka.TCP(h.Broker.Addr()), Topic: h.Input(), Transport: e2e.NewTransport(t), Balancer: balancer,
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 10000}
	defer w.Close()
	msgs := make([]kafka.Message, len(evs))
	for i, e := range evs {
		msgs[i] = e.Message(true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// coverageJSON is a release's coverage as published (decoded from the raw
// message, so that a field the release type lacks shows as missing).
type coverageJSON struct {
	Partitions int      `json:"partitions"`
	Included   int      `json:"included"`
	Complete   *bool    `json:"complete"`
	Incomplete []string `json:"incomplete"`
	raw        string
}

// rawCoverage is r's coverage from its first published copy.
func rawCoverage(t *testing.T, out e2e.Output, r release.Release) coverageJSON {
	t.Helper()
	copies := out.Raw[r.ReleaseID]
	if len(copies) == 0 {
		t.Fatalf("%s: no raw copy", r.ReleaseID)
	}
	var m struct {
		Coverage json.RawMessage `json:"coverage"`
	}
	if err := json.Unmarshal([]byte(copies[0]), &m); err != nil {
		t.Fatal(err)
	}
	c := coverageJSON{raw: string(m.Coverage)}
	if len(m.Coverage) > 0 {
		if err := json.Unmarshal(m.Coverage, &c); err != nil {
			t.Fatal(err)
		}
	}
	return c
}
