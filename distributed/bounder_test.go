package distributed_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/distributed"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/partial"
	"github.com/dpstage/stage/partial/kafkapartial"
)

const distParts = 4 // the harness's input partitions

// distConfig is the harness's arrival config (1 s windows on the wall
// clock, exact counts) in distributed mode, with its internal topics
// created (partials: 1 partition; progress: one per input partition,
// compacted) and a dead-letter topic.
func distConfig(t *testing.T, h *e2e.Harness) *config.Config {
	t.Helper()
	h.Watermark = config.WatermarkArrival
	cfg := h.ArrivalConfig(time.Second, 300*time.Millisecond)
	cfg.Kafka.SessionTimeout = config.Duration(time.Second)
	cfg.Kafka.DeadLetterTopic = "dlq-" + h.Name
	cfg.Kafka.Distributed.Enabled = true
	cfg.Kafka.Distributed.Partitioner = config.PartitionerMurmur2
	cfg.Contribution.MaxTrackedUsers = 0
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Broker.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	for _, tp := range []struct {
		name   string
		n      int32
		policy string
	}{{cfg.Kafka.PartialsTopic(), 1, "delete"}, {cfg.Kafka.ProgressTopic(), distParts, "compact"}} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = tp.name, tp.n, -1
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = "cleanup.policy", kmsg.StringPtr(tp.policy)
		rt.Configs = append(rt.Configs, c)
		req.Topics = append(req.Topics, rt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			t.Fatalf("create %s: %v", rt.Topic, err)
		}
	}
	seedLedgerMeta(t, h, cfg, time.Now().Truncate(time.Second).UnixMilli())
	return cfg
}

// seedLedgerMeta records the release log's metadata with first window
// first, as a releaser's first attach does: bounders run alone start their
// partitions there (a partition without progress starts at the release
// log's resume window, and waits for a releaser to record it).
func seedLedgerMeta(t *testing.T, h *e2e.Harness, cfg *config.Config, first int64) {
	t.Helper()
	if cfg.State.LedgerTopic == "" {
		cfg.State.Ledger, cfg.State.LedgerTopic = config.LedgerKafka, "ledger-"+h.Name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	brokers := []string{h.Broker.Addr()}
	if err := kafkalog.EnsureTopic(ctx, brokers, cfg.State.LedgerTopic, 1, -1); err != nil {
		t.Fatal(err)
	}
	l, err := kafkalog.Open(ctx, kafkalog.Config{Brokers: brokers, Topic: cfg.State.LedgerTopic, TransactionalID: config.LedgerTransactionalID(cfg.State.LedgerTopic)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, _, err := l.SetMeta(ctx, ledger.Meta{WindowMs: cfg.Window.Size.D().Milliseconds(), PeriodMs: cfg.Privacy.Budget.Period.D().Milliseconds(), FirstWindow: first}); err != nil {
		t.Fatal(err)
	}
}

// bounderProc is one process's bounder role, run by runBounders directly.
type bounderProc struct {
	s      *node.Node
	stray  func() int64
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex // guards err
	err    error      // what s.fail was given
}

func startBounder(t *testing.T, cfg *config.Config, h *e2e.Harness) *bounderProc {
	t.Helper()
	s, err := node.New(node.Options{Config: cfg, Brokers: []string{h.Broker.Addr()}, HashKey: &e2e.TestKey, Log: e2e.Log()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &bounderProc{s: s, cancel: cancel, done: make(chan struct{})}
	fail := func(err error) {
		b.mu.Lock()
		b.err = err
		b.mu.Unlock()
		cancel()
	}
	started := make(chan struct{})
	go func() {
		defer close(b.done)
		if err := distributed.RunBounders(ctx, s, fail, func(stray func() int64) { b.stray = stray; close(started) }); err != nil {
			fail(err)
		}
	}()
	select {
	case <-started:
	case <-b.done:
		t.Fatalf("bounder ended at its start: %v", b.failed())
	}
	t.Cleanup(b.stop)
	return b
}

func (b *bounderProc) stop() {
	b.cancel()
	<-b.done
}

func (b *bounderProc) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// produceKeyed writes evs keyed by user with kafka-go's Murmur2Balancer
// (Kafka's default partitioner), record time = event time.
func produceKeyed(t *testing.T, h *e2e.Harness, evs []e2e.Event) {
	t.Helper()
	produceWith(t, h, evs, kafka.Murmur2Balancer{Consistent: true})
}

// partials reads the partials topic read_committed (kgo) from its start
// to its last stable offset.
func readPartials(t *testing.T, h *e2e.Harness, cfg *config.Config) []*partial.Partial {
	t.Helper()
	var out []*partial.Partial
	readCommittedTopic(t, h, cfg.Kafka.PartialsTopic(), func(r *kgo.Record) {
		p, err := partial.DecodePartial(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	})
	return out
}

// readCommittedTopic calls fn with every data record of partition 0 of
// topic, read read_committed (kgo) from its start to its last stable
// offset. Control records (transaction markers) are fetched too, so that
// the read reaches the last stable offset however slowly the broker
// answers, and are not passed to fn.
func readCommittedTopic(t *testing.T, h *e2e.Harness, topic string, fn func(*kgo.Record)) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Broker.Addr()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start, lso, err := kafkapartial.Offsets(ctx, cl, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	for next := start; next < lso; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: at offset %d of %d after 30s", topic, next, lso)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = max(next, r.Offset+1)
			if r.Offset < lso && !r.Attrs.IsControl() {
				fn(r)
			}
		})
	}
}

// checkPartials checks exactly one Partial per (window, partition) from
// each partition's first window to through (a window start, ms), and that
// per window the sum over partitions is the truth of evs.
func checkPartials(t *testing.T, h *e2e.Harness, cfg *config.Config, evs []e2e.Event, through int64) {
	t.Helper()
	var ps []*partial.Partial
	e2e.WaitFor(t, "partials of every partition through the last window", 20*time.Second, func() bool {
		ps = readPartials(t, h, cfg)
		reached := map[int]bool{}
		for _, p := range ps {
			if p.WindowStart >= through {
				reached[p.Partition] = true
			}
		}
		return len(reached) == distParts
	})
	seen := map[[2]int64]int{}
	first := map[int]int64{}
	last := map[int]int64{}
	sums := map[string][]float64{}
	for _, p := range ps {
		seen[[2]int64{p.WindowStart, int64(p.Partition)}]++
		if f, ok := first[p.Partition]; !ok || p.WindowStart < f {
			first[p.Partition] = p.WindowStart
		}
		last[p.Partition] = max(last[p.Partition], p.WindowStart)
		if p.Partitions != distParts || p.WindowMs != 1000 {
			t.Errorf("partial %s: %d partitions, %d ms", p.Key(), p.Partitions, p.WindowMs)
		}
		for _, c := range p.Counts {
			hist, group := cfg.Histograms[c.H].Name, "*"
			if len(cfg.Histograms[c.H].Groups) > 0 {
				group = cfg.Histograms[c.H].Groups[c.G]
			}
			k := e2e.Key(hist, group, time.UnixMilli(p.WindowStart))
			if sums[k] == nil {
				sums[k] = make([]float64, len(c.Counts))
			}
			for i, v := range c.Counts {
				sums[k][i] += v
			}
		}
	}
	for p := range distParts {
		for w := first[p]; w <= last[p]; w += 1000 {
			if n := seen[[2]int64{w, int64(p)}]; n != 1 {
				t.Errorf("window %d partition %d: %d partials, want 1", w, p, n)
			}
		}
	}
	truth := e2e.ComputeTruthIn(evs, time.Second, 1, 1, 0)
	for k, want := range truth {
		if got := sums[k]; !slices.Equal(got, want) {
			t.Errorf("%s: partial sums %v, truth %v", k, got, want)
		}
	}
	for k, got := range sums {
		if _, ok := truth[k]; !ok && slices.ContainsFunc(got, func(v float64) bool { return v != 0 }) {
			t.Errorf("%s: partial sums %v, no event", k, got)
		}
	}
}

// liveEvents makes n events of distinct users (prefix) at the wall clock,
// with repeats so that the bounds drop some.
func liveEvents(prefix string, n int) []e2e.Event {
	at := time.Now().Truncate(time.Millisecond)
	var evs []e2e.Event
	for i := range n {
		e := e2e.Event{User: fmt.Sprintf("%s-%d", prefix, i%(n*2/3+1)), At: at.Add(time.Duration(i) * time.Microsecond).Truncate(time.Millisecond),
			Page: e2e.Pages[i%5], Country: e2e.Groups[i%3], Device: e2e.Devices[i%2]}
		evs = append(evs, e)
	}
	return evs
}

// waitStarted waits until every input partition has emitted a Partial
// (its worker runs), and returns the largest window emitted.
func waitStarted(t *testing.T, h *e2e.Harness, cfg *config.Config) {
	t.Helper()
	e2e.WaitFor(t, "every partition emitting", 20*time.Second, func() bool {
		got := map[int]bool{}
		for _, p := range readPartials(t, h, cfg) {
			got[p.Partition] = true
		}
		return len(got) == distParts
	})
}

// TestDistBoundersShareExact: two bounders share the 4 input partitions;
// every (window, partition) has exactly one Partial and per window the sum
// over partitions is the bounded truth of the events. An event written to
// a partition its user does not hash to is dead-lettered as
// wrong_partition and not counted; the group client never fetches the
// (paused) input.
func TestDistBoundersShareExact(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := distConfig(t, h)
	a, b := startBounder(t, cfg, h), startBounder(t, cfg, h)
	waitStarted(t, h, cfg)
	var evs []e2e.Event
	for i := range 3 {
		batch := liveEvents(fmt.Sprintf("w%d", i), 60)
		produceKeyed(t, h, batch)
		evs = append(evs, batch...)
		if i == 1 {
			// user "stray" hashes to partition q; written to q+1.
			stray := e2e.Event{User: "stray", At: time.Now().Truncate(time.Millisecond), Page: "home", Country: "US", Device: "mobile"}
			q := decode.PartitionerMurmur2.Partition([]byte("stray"), distParts)
			h.ProduceTo((q+1)%distParts, []e2e.Event{stray})
		}
		time.Sleep(time.Second)
	}
	through := time.Now().Truncate(time.Second).UnixMilli()
	checkPartials(t, h, cfg, evs, through)
	if n := a.s.Stats.DroppedBy(decode.ReasonWrongPartition) + b.s.Stats.DroppedBy(decode.ReasonWrongPartition); n != 1 {
		t.Errorf("wrong_partition drops: %d, want 1", n)
	}
	dlq := e2e.ReadTopic(t, h.Broker.Addr(), "dlq-"+h.Name, 1, 10*time.Second)
	if len(dlq) != 1 || !slices.Contains([]string{string(dlq[0])}, string(dlq[0])) {
		t.Errorf("dead letters: %q", dlq)
	}
	for i, p := range []*bounderProc{a, b} {
		if err := p.failed(); err != nil {
			t.Errorf("bounder %d failed: %v", i, err)
		}
		if n := p.stray(); n != 0 {
			t.Errorf("bounder %d: the group client fetched %d input records", i, n)
		}
	}
}

// TestDistBounderTakeover: one of two bounders is stopped mid-stream and
// the other takes its partitions over (fence, restore from the progress
// topic): still exactly one Partial per (window, partition) and exact
// sums. With contribution.max_windows_per_user 1 the restored admissions
// decide as an uninterrupted bounder would: every user counts only in its
// first window of the budget period, also when that window was emitted by
// the stopped bounder. Every partition checkpoints its admissions at the
// users' first window (its Progress points at the checkpoint), and
// admissions of new users later in the period follow it as admissions
// records: the takeover restores from the checkpoint plus the records
// after it (issue 22, takeover restore cost).
func TestDistBounderTakeover(t *testing.T) {
	t.Parallel() // its own broker and state; waits on the clock (CI time)
	h := e2e.New(t)
	cfg := distConfig(t, h)
	cfg.Contribution.MaxWindowsPerUser = 1
	a, b := startBounder(t, cfg, h), startBounder(t, cfg, h)
	waitStarted(t, h, cfg)
	var evs []e2e.Event
	for i := range 4 {
		batch := liveEvents("u", 40) // the same users in every window
		if i > 0 {
			batch = append(batch, liveEvents("v", 9)...) // and new ones from the second on
		}
		produceKeyed(t, h, batch)
		evs = append(evs, batch...)
		switch i {
		case 0:
			// Every partition emitted the users' first window: the
			// admissions that must survive the takeover are committed.
			waitEmitted(t, h, cfg, "the users' first window emitted", batch[len(batch)-1].At)
			checkCheckpoints(t, h, cfg)
		case 1:
			waitEmitted(t, h, cfg, "the new users' first window emitted", batch[len(batch)-1].At)
			if admissionsAfterCheckpoints(t, h, cfg) == 0 {
				t.Fatal("no admissions records after the checkpoints")
			}
			a.stop()
		}
		time.Sleep(time.Second)
	}
	through := time.Now().Truncate(time.Second).UnixMilli()
	admitted := e2e.AdmittedEvents(evs, time.Second, time.Hour, 1)
	checkPartials(t, h, cfg, admitted, through)
	if err := b.failed(); err != nil {
		t.Errorf("bounder failed: %v", err)
	}
	checkPartialDrops(t, h, cfg, evs, admitted)
}

// checkPartialDrops (issue 23 item 3): the partials carry the window
// bound's drops, for the releaser's operator-side drop share: per
// histogram at least one contribution per (user, window) the bound left
// out, at most one per event of it (an event dropped on arrival counts
// its part, one dropped at the close its user's selected parts).
func checkPartialDrops(t *testing.T, h *e2e.Harness, cfg *config.Config, evs, admitted []e2e.Event) {
	t.Helper()
	in := map[e2e.Event]bool{}
	for _, e := range admitted {
		in[e] = true
	}
	pairs := map[string]bool{}
	events := 0
	for _, e := range evs {
		if !in[e] {
			events++
			pairs[fmt.Sprintf("%s/%d", e.User, e.At.Truncate(time.Second).UnixMilli())] = true
		}
	}
	dropped := make([]int64, len(cfg.Histograms))
	for _, p := range readPartials(t, h, cfg) {
		for _, d := range p.Dropped {
			dropped[d.H] += d.N
		}
	}
	for hi, n := range dropped {
		if n < int64(len(pairs)) || n > int64(events) || len(pairs) == 0 {
			t.Errorf("%s: the partials carry %d window-bound drops, want between %d (user, window) pairs and %d events left out", cfg.Histograms[hi].Name, n, len(pairs), events)
		}
	}
}

// TestDistBounderRefusesOtherWindowSize: a bounder whose window.size
// differs from the one its partition's progress was written under refuses
// to start (ErrConfigChanged, as the single-process mode refuses a ledger
// of another window size) instead of emitting partials of another size,
// which every releaser would have to skip (issue 22 item 2).
func TestDistBounderRefusesOtherWindowSize(t *testing.T) {
	h := e2e.New(t)
	cfg := distConfig(t, h)
	a := startBounder(t, cfg, h)
	waitStarted(t, h, cfg)
	a.stop()
	if err := a.failed(); err != nil {
		t.Fatalf("first bounder failed: %v", err)
	}
	other := *cfg
	other.Window.Size = config.Duration(2 * cfg.Window.Size.D())
	b := startBounder(t, &other, h)
	e2e.WaitFor(t, "the bounder with another window size refusing", 20*time.Second, func() bool { return b.failed() != nil })
	if err := b.failed(); !errors.Is(err, node.ErrConfigChanged) || !strings.Contains(err.Error(), "window.size") {
		t.Fatalf("bounder: %v, want ErrConfigChanged naming window.size", err)
	}
	for _, p := range readPartials(t, h, cfg) {
		if p.WindowMs != cfg.Window.Size.D().Milliseconds() {
			t.Fatalf("a partial of %d ms windows was emitted", p.WindowMs)
		}
	}
}

// TestDistBounderRefusesOtherPeriod (the second privacy review's probe, as
// a regression test): with max_windows_per_user a bounder that takes a
// partition over under another privacy.budget.period would look its
// admissions up under another period start, find none, and admit every
// user to K more windows of the running period (the period is not in the
// counting fingerprint, and in a rolling change the releaser may still run
// the old config). The progress records the period; a bounder of another
// one refuses to resume the partition.
func TestDistBounderRefusesOtherPeriod(t *testing.T) {
	h := e2e.New(t)
	cfg := distConfig(t, h)
	cfg.Contribution.MaxWindowsPerUser = 1
	a := startBounder(t, cfg, h)
	waitStarted(t, h, cfg)
	a.stop()
	if err := a.failed(); err != nil {
		t.Fatalf("first bounder failed: %v", err)
	}
	other := *cfg
	other.Privacy.Budget.Period = config.Duration(cfg.Privacy.Budget.Period.D() / 2)
	if err := other.Validate(); err != nil {
		t.Fatal(err)
	}
	b := startBounder(t, &other, h)
	e2e.WaitFor(t, "the bounder with another budget period refusing", 20*time.Second, func() bool { return b.failed() != nil })
	if err := b.failed(); !errors.Is(err, node.ErrConfigChanged) || !strings.Contains(err.Error(), "privacy.budget.period") {
		t.Fatalf("bounder: %v, want ErrConfigChanged naming privacy.budget.period", err)
	}
}
