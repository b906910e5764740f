package kafkapartial

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dpstage/stage/partial"
)

const (
	partialsTopic = "t.partials"
	progressTopic = "t.progress"
	minute        = int64(60_000)
)

// newCluster starts a kfake broker with the partials topic (1 partition)
// and the compacted progress topic (parts partitions).
func newCluster(t *testing.T, parts int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := CreateTestTopics(ctxT(t), c.ListenAddrs(), partialsTopic, progressTopic, parts); err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// CreateTestTopics creates the partials topic (1 partition) and the
// compacted progress topic (parts partitions) for tests.
func CreateTestTopics(ctx context.Context, brokers []string, partials, progress string, parts int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	for _, tp := range []struct {
		name   string
		n      int32
		policy string
	}{{partials, 1, "delete"}, {progress, parts, "compact"}} {
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic, t.NumPartitions, t.ReplicationFactor = tp.name, tp.n, -1
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = "cleanup.policy", kmsg.StringPtr(tp.policy)
		t.Configs = append(t.Configs, c)
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create %s: %w", t.Topic, err)
		}
	}
	return nil
}

func writerConfig(c *kfake.Cluster, p int) WriterConfig {
	return WriterConfig{Brokers: c.ListenAddrs(), PartialsTopic: partialsTopic, ProgressTopic: progressTopic,
		Partition: p, TransactionalID: fmt.Sprintf("t.bound/%d", p)}
}

func openWriter(t *testing.T, c *kfake.Cluster, p int) *Writer {
	t.Helper()
	w, err := OpenWriter(ctxT(t), writerConfig(c, p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

var testKey = []byte("0123456789abcdef")

// emission is window w of partition p with one cell and admissions.
func emission(p int, w int64, users ...uint64) Emission {
	period := w - w%(10*minute)
	e := Emission{
		Partial:  &partial.Partial{WindowStart: w, WindowMs: minute, Partition: p, Partitions: 2, Next: w + minute, Counts: []partial.Cell{{H: 0, G: 0, Counts: []float64{float64(w / minute), 1}}}},
		Progress: &partial.Progress{Partition: p, Partitions: 2, Offset: w / minute * 10, Next: w + minute, UserKey: testKey},
		Admitted: partial.ChunkAdmitted(period, w, users),
	}
	return e
}

// readPartials reads the partials topic read_committed to its end.
func readPartials(t *testing.T, c *kfake.Cluster) []*partial.Partial {
	t.Helper()
	var out []*partial.Partial
	for _, v := range readPartialValues(t, c) {
		p, err := partial.DecodePartial(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// readPartialValues reads the partials topic's record values
// read_committed to its end.
func readPartialValues(t *testing.T, c *kfake.Cluster) [][]byte {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{partialsTopic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := ctxT(t)
	_, lso, err := Offsets(ctx, cl, partialsTopic, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for last := int64(-1); last+1 < lso; {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		timedOut := errors.Is(pctx.Err(), context.DeadlineExceeded)
		cancel()
		if fs.NumRecords() == 0 && timedOut {
			break // the rest below the LSO are markers
		}
		fs.EachRecord(func(r *kgo.Record) {
			last = r.Offset
			out = append(out, r.Value)
		})
	}
	return out
}

// TestWriterEmitRestore: emitted windows are visible read_committed, and a
// new writer of the partition restores the last Progress and the
// admissions not tombstoned; another partition's progress is apart.
func TestWriterEmitRestore(t *testing.T) {
	c := newCluster(t, 2)
	ctx := ctxT(t)
	w := openWriter(t, c, 1)
	r, err := w.Restore(ctx)
	if err != nil || r.Progress != nil || len(r.Admitted) != 0 {
		t.Fatalf("fresh restore: %+v, %v", r, err)
	}
	// The first Progress, recorded before anything is counted, is what a
	// new owner restores when the first owner emitted nothing.
	first := &partial.Progress{Partition: 1, Partitions: 2, Offset: 7, Next: 10 * minute, UserKey: make([]byte, 16)}
	if err := w.Start(ctx, first); err != nil {
		t.Fatal(err)
	}
	if r, err := openWriter(t, c, 1).Restore(ctx); err != nil || r.Progress == nil || r.Progress.Next != 10*minute || r.Progress.Offset != 7 {
		t.Fatalf("restore after Start: %+v, %v", r, err)
	}
	w = openWriter(t, c, 1) // the writer above fenced w
	for i, users := range [][]uint64{{1, 2}, {3}, nil} {
		e := emission(1, 10*minute+int64(i)*minute, users...)
		if i == 2 {
			e.Tombstones = [][]byte{partial.AdmittedKey(10*minute, 10*minute, 0)}
		}
		if err := w.Emit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := openWriter(t, c, 0).Emit(ctx, emission(0, 10*minute, 9)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	w2 := openWriter(t, c, 1)
	r, err = w2.Restore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Progress == nil || r.Progress.Next != 13*minute || r.Progress.Offset != 120 || r.Progress.Partition != 1 {
		t.Fatalf("restored progress %+v", r.Progress)
	}
	if len(r.Admitted) != 1 || r.Admitted[0].Window != 11*minute || !slices.Equal(r.Admitted[0].Users, []uint64{3}) ||
		r.Admitted[0].Key != string(partial.AdmittedKey(10*minute, 11*minute, 0)) {
		t.Fatalf("restored admissions %+v", r.Admitted)
	}
	ps := readPartials(t, c)
	if len(ps) != 4 {
		t.Fatalf("%d partials visible, want 4", len(ps))
	}
}

// TestWriterZombieFenced: a writer of p used after a newer writer of p
// opened gets ErrFenced, both for a transaction begun after the fence and
// for one open across it, and nothing of it is visible read_committed.
func TestWriterZombieFenced(t *testing.T) {
	c := newCluster(t, 1)
	ctx := ctxT(t)
	old := openWriter(t, c, 0)
	if err := old.Emit(ctx, emission(0, 10*minute)); err != nil {
		t.Fatal(err)
	}
	// A transaction open while the new owner fences.
	inTxn, resume := make(chan struct{}), make(chan struct{})
	old.beforeCommit = func() { close(inTxn); <-resume }
	errc := make(chan error, 1)
	go func() { errc <- old.Emit(ctx, emission(0, 11*minute)) }()
	<-inTxn
	neu := openWriter(t, c, 0)
	close(resume)
	if err := <-errc; !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie commit across the fence: %v, want ErrFenced", err)
	}
	// A zombie writer opened before the fence and never used since.
	zombie, err := OpenWriter(ctx, writerConfig(c, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Close()
	neu2 := openWriter(t, c, 0)
	if err := zombie.Emit(ctx, emission(0, 12*minute)); !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie emit after the fence: %v, want ErrFenced", err)
	}
	if err := neu.Emit(ctx, emission(0, 13*minute)); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced writer emit: %v, want ErrFenced", err)
	}
	r, err := neu2.Restore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Progress == nil || r.Progress.Next != 11*minute {
		t.Fatalf("restored progress %+v, want next 11m", r.Progress)
	}
	if err := neu2.Emit(ctx, emission(0, 11*minute)); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, p := range readPartials(t, c) {
		got = append(got, p.WindowStart/minute)
	}
	if !slices.Equal(got, []int64{10, 11}) {
		t.Fatalf("visible partials of windows %v, want [10 11]", got)
	}
}

// TestWriterMarkIdle: an owner's Idle records reach the releaser's Reader
// in log order among the partials, decoded as Idle; a fenced owner cannot
// write one.
func TestWriterMarkIdle(t *testing.T) {
	c := newCluster(t, 2)
	ctx := ctxT(t)
	old := openWriter(t, c, 1)
	w := openWriter(t, c, 1) // fences old
	if err := old.Mark(ctx, &partial.Idle{Partition: 1, Partitions: 2, WindowMs: minute, Next: 10 * minute, Idle: true}); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced Mark: %v, want ErrFenced", err)
	}
	if err := w.Mark(ctx, &partial.Idle{Partition: 0, Partitions: 2, WindowMs: minute, Idle: true}); err == nil {
		t.Fatal("Mark of another partition accepted")
	}
	if err := w.Emit(ctx, emission(1, 10*minute)); err != nil {
		t.Fatal(err)
	}
	if err := w.Mark(ctx, &partial.Idle{Partition: 1, Partitions: 2, WindowMs: minute, Next: 11 * minute, Idle: true}); err != nil {
		t.Fatal(err)
	}
	if err := w.Mark(ctx, &partial.Idle{Partition: 1, Partitions: 2, WindowMs: minute, Next: 11 * minute}); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(ReaderConfig{Brokers: c.ListenAddrs(), Group: "release", Topic: partialsTopic})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []string
	for len(got) < 3 {
		recs, err := r.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			switch {
			case rec.Partial != nil && rec.Idle == nil:
				got = append(got, fmt.Sprintf("partial %d/%d", rec.Partial.WindowStart/minute, rec.Partial.Partition))
			case rec.Idle != nil && rec.Partial == nil:
				got = append(got, fmt.Sprintf("idle %d/%d %v", rec.Idle.Next/minute, rec.Idle.Partition, rec.Idle.Idle))
			default:
				t.Fatalf("record %+v", rec)
			}
		}
	}
	if want := []string{"partial 10/1", "idle 11/1 true", "idle 11/1 false"}; !slices.Equal(got, want) {
		t.Errorf("read %q, want %q", got, want)
	}
}

// TestWriterTimedOut: a bounder paused inside a transaction past its
// transaction timeout, with no newer owner, fails as ErrTimedOut (issue
// 22 item 2: a timeout reported as a timeout), not as fenced; a new Writer
// of the partition restores the progress committed before and goes on.
// Paused past the timeout while a newer owner opens, it is fenced.
func TestWriterTimedOut(t *testing.T) {
	for _, takeover := range []bool{false, true} {
		t.Run(fmt.Sprintf("takeover=%v", takeover), func(t *testing.T) {
			c := newCluster(t, 1)
			cfg := writerConfig(c, 0)
			cfg.TransactionTimeout = time.Second
			w, err := OpenWriter(ctxT(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.Emit(ctxT(t), emission(0, 0, 1)); err != nil {
				t.Fatal(err)
			}
			var b *Writer
			w.beforeCommit = func() {
				time.Sleep(cfg.TransactionTimeout + 500*time.Millisecond)
				if takeover {
					var err error
					if b, err = OpenWriter(ctxT(t), cfg); err != nil {
						t.Errorf("open the newer owner: %v", err)
					}
				}
			}
			err = w.Emit(ctxT(t), emission(0, minute, 2))
			t.Logf("paused past the timeout: %v", err)
			if takeover {
				if b == nil {
					t.Fatal("no newer owner")
				}
				defer b.Close()
				if !errors.Is(err, ErrFenced) || errors.Is(err, ErrTimedOut) {
					t.Fatalf("got %v, want ErrFenced (not ErrTimedOut)", err)
				}
				return
			}
			if !errors.Is(err, ErrTimedOut) || errors.Is(err, ErrFenced) {
				t.Fatalf("got %v, want ErrTimedOut (not ErrFenced)", err)
			}
			again, err := OpenWriter(ctxT(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			rs, err := again.Restore(ctxT(t))
			if err != nil || rs.Progress == nil || rs.Progress.Next != minute {
				t.Fatalf("restored %+v, %v: want the progress of the window committed before (next %d)", rs, err, minute)
			}
			if err := again.Emit(ctxT(t), emission(0, minute, 2)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWriterPartialsFormat (issue 28 item 4): a writer writes its
// Partials as Arrow, or as JSON with PartialsJSON (kafka.distributed.
// partials_format json: what a releaser of an older version reads); both
// decode to the Partial emitted.
func TestWriterPartialsFormat(t *testing.T) {
	c := newCluster(t, 2)
	ctx := ctxT(t)
	cfg := writerConfig(c, 0)
	cfg.PartialsJSON = true
	js, err := OpenWriter(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer js.Close()
	if err := js.Emit(ctx, emission(0, 10*minute)); err != nil {
		t.Fatal(err)
	}
	if err := openWriter(t, c, 1).Emit(ctx, emission(1, 10*minute)); err != nil {
		t.Fatal(err)
	}
	vals := readPartialValues(t, c)
	if len(vals) != 2 || vals[0][0] != '{' || vals[1][0] == '{' {
		t.Fatalf("%d partials, want 2: the first JSON, the second Arrow (values start %q)", len(vals), firstBytes(vals))
	}
	for i, v := range vals {
		p, err := partial.DecodePartial(v)
		if err != nil || p.Partition != i || len(p.Counts) != 1 || p.Counts[0].Counts[0] != 10 {
			t.Errorf("partial %d: %+v, %v", i, p, err)
		}
	}
}

func firstBytes(vals [][]byte) []byte {
	var out []byte
	for _, v := range vals {
		if len(v) > 0 {
			out = append(out, v[0])
		}
	}
	return out
}
