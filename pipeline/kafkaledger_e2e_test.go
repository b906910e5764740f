package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/ledger/ledgertest"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
)

// kafkaLedgerConfig is the harness config (near-noiseless Gaussian) with
// state.ledger: kafka on a compacted topic created here.
func kafkaLedgerConfig(t *testing.T, h *e2e.Harness, epsilon float64) *config.Config {
	t.Helper()
	cfg := h.Config("gaussian", epsilon)
	cfg.Kafka.SessionTimeout = config.Duration(time.Second)
	cfg.State.Ledger, cfg.State.LedgerTopic = config.LedgerKafka, "ledger-"+h.Name
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kafkalog.EnsureTopic(ctx, []string{h.Broker.Addr()}, cfg.State.LedgerTopic, 1, -1); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// openGroupLog opens cfg's release log as its owner would (the log's
// transactional id, config.LedgerTransactionalID): it fences every older
// writer.
func openGroupLog(t *testing.T, h *e2e.Harness, cfg *config.Config) *kafkalog.Log {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := kafkalog.Open(ctx, kafkalog.Config{Brokers: []string{h.Broker.Addr()}, Topic: cfg.State.LedgerTopic,
		TransactionalID: config.LedgerTransactionalID(cfg.State.LedgerTopic)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// markerCounts are counts no window of the test's streams has (1000 in
// every bin): a release drawn from them is told apart from one drawn from
// the events under the near-noiseless Gaussian.
type markerCounts struct{}

func (markerCounts) Counts(_, _ int, dst []float64) []float64 {
	for i := range dst {
		dst[i] = 1000
	}
	return dst
}

// recordAsOwner draws and records window w from markerCounts into l with a
// real Releaser, as an active instance does just before it publishes, and
// returns the recorded units.
func recordAsOwner(t *testing.T, l *kafkalog.Log, cfg *config.Config, w time.Time) []*ledger.Unit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := l.SetMeta(ctx, ledger.Meta{FirstWindow: e2e.Base.UnixMilli(), WindowMs: cfg.Window.Size.D().Milliseconds(),
		PeriodMs: cfg.Privacy.Budget.Period.D().Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	pl, err := plan.DerivePlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	book, err := release.NewBook(pl, l)
	if err != nil {
		t.Fatal(err)
	}
	rng, err := mechanism.NewRand()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := release.New(release.Options{Config: cfg, Plan: pl, Ledger: l, Book: book, Rand: rng})
	if err != nil {
		t.Fatal(err)
	}
	units, err := rel.RecordAdmitted(ctx, w.UnixMilli(), markerCounts{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(units) != len(cfg.Histograms) {
		t.Fatalf("recorded %d units, want %d", len(units), len(cfg.Histograms))
	}
	return units
}

// TestKafkaLedgerTakeoverRepublishes: an active instance recorded window 0
// in the Kafka release log and was killed before publishing it (the test
// plays that instance: a real Releaser records a draw from marker counts
// under the group's transactional id). A stage on an empty state.dir then
// takes over: it restores the log from Kafka alone, publishes window 0
// with exactly the recorded values (its own draw from the events would be
// the truth, not the markers), releases windows 1 and 2 exactly once with
// exact counts, and the log's period spend is the recorded window's plus
// its own. The killed instance's producer is fenced: its next record
// fails with ErrFenced.
func TestKafkaLedgerTakeoverRepublishes(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := kafkaLedgerConfig(t, h, 1e7)
	killed := openGroupLog(t, h, cfg)
	recorded := recordAsOwner(t, killed, cfg, e2e.Base)
	want := map[string]string{} // release_id → recorded value
	for _, u := range recorded {
		for _, m := range u.Messages {
			var r release.Release
			e2e.DecodeJSON(t, m.Value, &r)
			want[r.ReleaseID] = string(m.Value)
		}
	}

	evs := e2e.Stream(3, 50)
	flushAt := e2e.Base.Add(3*time.Minute + time.Second)
	tr := e2e.ComputeTruth(evs)
	h.ProduceEvents(evs)
	h.Produce(e2e.Flush(flushAt))
	run := h.Start(cfg) // h.Dir: a new, empty state.dir
	n := 3 * (len(e2e.Groups) + 1)
	out := h.ReadOutput(n, 60*time.Second, 2*time.Second)
	run.Stop(t)

	if len(out.Releases) != n {
		t.Fatalf("got %d releases, want %d (each window once)", len(out.Releases), n)
	}
	republished := 0
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := e2e.Key(r.Histogram, r.Group, ws)
		if v, ok := want[r.ReleaseID]; ok {
			republished++
			for _, c := range out.Raw[r.ReleaseID] {
				if c != v {
					t.Errorf("%s: published\n%s\nwant the recorded\n%s", k, c, v)
				}
			}
			continue
		}
		if ws.Equal(e2e.Base) {
			t.Errorf("%s: window 0 released with a release_id the log does not hold (drawn again)", k)
			continue
		}
		e2e.CheckExact(t, k, r, tr[k])
	}
	if republished != len(want) {
		t.Errorf("%d of the %d recorded releases of window 0 published", republished, len(want))
	}

	// The killed instance is fenced.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	late := []*ledger.Unit{{Histogram: "pages", WindowStart: e2e.Base.Add(5 * time.Minute).UnixMilli(), Period: e2e.Base.UnixMilli(),
		WindowEnd: e2e.Base.Add(6 * time.Minute).UnixMilli(), Status: ledger.StatusBudgetExhausted}}
	if err := killed.RecordWindow(ctx, late, ledger.Curve{}); !errors.Is(err, kafkalog.ErrFenced) {
		t.Errorf("record by the replaced owner: got %v, want ErrFenced", err)
	}

	// The spend in the log: the recorded window's charges and the stage's.
	l := openGroupLog(t, h, cfg)
	ledgertest.CheckSpendIsSumOfCharges(t, l, 3*len(cfg.Histograms))
}

// TestKafkaLedgerZombieFenced: a stage in kafka-ledger mode is active and
// has released window 0 when another owner opens the release log with the
// same transactional id (as a new group member would after the stage was
// paused past its session) and records window 1 with its own draw. The
// stage, which still believes it is active, closes window 1: its record
// is refused (ErrFenced), it stops with that error, and it publishes
// nothing for window 1 — neither its own draw nor anything else.
func TestKafkaLedgerZombieFenced(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := kafkaLedgerConfig(t, h, 1e7)
	evs := e2e.Stream(2, 50)
	h.ProduceEvents(evs[:50])
	h.Produce(e2e.Flush(e2e.Base.Add(time.Minute + time.Second)))
	zombie := h.Start(cfg)
	e2e.WaitFor(t, "window 0 released and marked published", 60*time.Second, func() bool {
		return zombie.Units.Load() >= int64(len(cfg.Histograms))
	})

	newer := openGroupLog(t, h, cfg)
	recordAsOwner(t, newer, cfg, e2e.Base.Add(time.Minute))
	h.ProduceEvents(evs[50:])
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))

	select {
	case err := <-zombie.Done():
		zombie.Cancel() // it returned: nothing left to stop
		if !errors.Is(err, kafkalog.ErrFenced) {
			t.Fatalf("the replaced stage stopped with %v, want ErrFenced", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the replaced stage did not stop")
	}
	out := h.ReadOutput(len(e2e.Groups)+1, 30*time.Second, 2*time.Second)
	for _, r := range out.Releases {
		if !strings.HasPrefix(r.WindowStart, e2e.Base.Format("2006-01-02T15:04:05")) {
			t.Errorf("published %s/%s for window %s after being fenced", r.Histogram, r.Group, r.WindowStart)
		}
	}
	if len(out.Releases) != len(e2e.Groups)+1 {
		t.Errorf("got %d releases, want %d (window 0 only)", len(out.Releases), len(e2e.Groups)+1)
	}
	if u, ok, err := newer.Lookup("pages", e2e.Base.Add(time.Minute).UnixMilli()); err != nil || !ok || u.Published {
		t.Errorf("the newer owner's unit of window 1: ok %v, err %v", ok, err)
	}
}

// TestKafkaLedgerHotStandby: with state.ledger kafka a standby on another
// machine (its own, empty state.dir) joins the group while the active
// instance runs. It is assigned nothing, so it neither opens the release
// log nor fences the active one, which keeps releasing; when the active
// instance stops, the standby is assigned the partitions, restores the log
// from Kafka and releases the later windows. Every window is released
// exactly once, counts exact, copies identical.
func TestKafkaLedgerHotStandby(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := kafkaLedgerConfig(t, h, 1e7)
	evs := e2e.Stream(4, 60)
	// The flushes at 1m01s and 2m01s land in windows 1 and 2.
	var flushes []e2e.Event
	for _, m := range []time.Duration{1, 2} {
		flushes = append(flushes, e2e.Event{User: "flush", At: e2e.Base.Add(m*time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"})
	}
	tr := e2e.ComputeTruth(append(append([]e2e.Event{}, evs...), flushes...))
	byWindow := make([][]e2e.Event, 4)
	for _, e := range evs {
		w := int(e.At.Sub(e2e.Base) / time.Minute)
		byWindow[w] = append(byWindow[w], e)
	}
	per := len(e2e.Groups) + 1
	h.ProduceEvents(byWindow[0])
	h.Produce(e2e.Flush(e2e.Base.Add(time.Minute + time.Second)))
	active := h.Start(cfg)
	h.ReadOutput(per, 60*time.Second, 0)

	other := *cfg
	other.State.Dir = t.TempDir()
	standby := h.Start(&other)
	time.Sleep(3 * time.Second) // several heartbeats of the 1s session
	if standby.Stage.Readiness().StateLoaded {
		t.Fatal("the standby loaded the release log while the active instance owns the partitions")
	}
	// The active instance is still the owner: it releases window 1.
	h.ProduceEvents(byWindow[1])
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	h.ReadOutput(2*per, 60*time.Second, 0)
	active.Stop(t) // fails the test if it stopped with an error (fenced)

	h.ProduceEvents(append(byWindow[2], byWindow[3]...))
	h.Produce(e2e.Flush(e2e.Base.Add(4*time.Minute + time.Second)))
	out := h.ReadOutput(4*per, 60*time.Second, 2*time.Second)
	if len(out.Releases) != 4*per {
		t.Fatalf("got %d releases, want %d", len(out.Releases), 4*per)
	}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := e2e.Key(r.Histogram, r.Group, ws)
		e2e.CheckExact(t, k, r, tr[k])
	}
	for id, copies := range out.Raw {
		for _, c := range copies[1:] {
			if c != copies[0] {
				t.Errorf("release %s republished with different values", id)
			}
		}
	}
	if !standby.Stage.Readiness().StateLoaded {
		t.Error("the standby never took over")
	}
}
