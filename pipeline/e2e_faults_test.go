package pipeline_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/plan"
)

// TestEndToEndBudgetExhaustion: with privacy.rdp_epsilon fixing the
// calibration, the period's budget covers only a few (histogram, window)
// units. The rest get budget_exhausted status messages instead of releases,
// the spend never exceeds the budget, and the next period releases again.
func TestEndToEndBudgetExhaustion(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("concentrated", 20)
	cfg.Privacy.Budget.Period = cfg.Window.Size * 5 // 5 windows × 2 histograms = 10 units per period
	// Find a per-release ε that lets exactly 3 units fit in a period: the
	// number that fits decreases with ε; bisect on a log scale.
	fitAt := func(e float64) int {
		cfg.Privacy.RDPEpsilon = e
		p, err := plan.DerivePlan(cfg)
		if err != nil {
			return 0
		}
		return p.Count.FitUnits
	}
	lo, hi := 1e-4, 1e3
	fit := 0
	for i := 0; i < 200 && fit != 3; i++ {
		mid := math.Sqrt(lo * hi)
		switch fit = fitAt(mid); {
		case fit > 3:
			lo = mid
		case fit < 3:
			hi = mid
		}
	}
	if fit != 3 {
		t.Fatalf("no candidate per-release ε gives 3 units per period (last fit %d)", fit)
	}
	evs := e2e.Stream(10, 50) // windows 0..9: two periods
	h.ProduceEvents(evs)
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(10*time.Minute + time.Second)))

	// Per period: window 0 → pages (4 releases: 3 groups... ) is unit 1,
	// devices unit 2, window 1 pages unit 3; everything after is refused.
	out := h.ReadOutput(2*(len(e2e.Groups)+len(e2e.Groups)+1), 60*time.Second, 2*time.Second)
	type uw struct {
		hist string
		w    int
	}
	released := map[uw]int{}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		released[uw{r.Histogram, int(ws.Sub(e2e.Base) / time.Minute)}]++
		if r.Privacy.SpentEpsilon > r.Privacy.BudgetEpsilon*(1+1e-9) {
			t.Errorf("release %s reports spent ε=%v over the budget %v", r.ReleaseID, r.Privacy.SpentEpsilon, r.Privacy.BudgetEpsilon)
		}
	}
	exhausted := map[uw]bool{}
	for _, s := range out.Statuses {
		if s.Status != "budget_exhausted" {
			t.Errorf("unexpected status %q", s.Status)
		}
		ws, _ := time.Parse(time.RFC3339Nano, s.WindowStart)
		exhausted[uw{s.Histogram, int(ws.Sub(e2e.Base) / time.Minute)}] = true
	}
	for period := 0; period < 2; period++ {
		w0 := 5 * period
		wantReleased := []uw{{"pages", w0}, {"devices", w0}, {"pages", w0 + 1}}
		for _, u := range wantReleased {
			want := len(e2e.Groups)
			if u.hist == "devices" {
				want = 1
			}
			if released[u] != want {
				t.Errorf("period %d: %v has %d releases, want %d", period, u, released[u], want)
			}
		}
		for w := w0; w < w0+5; w++ {
			for _, hist := range []string{"pages", "devices"} {
				u := uw{hist, w}
				inBudget := u == wantReleased[0] || u == wantReleased[1] || u == wantReleased[2]
				if !inBudget && (!exhausted[u] || released[u] != 0) {
					t.Errorf("period %d: %v should be refused with a status message (exhausted=%v, releases=%d)", period, u, exhausted[u], released[u])
				}
			}
		}
	}
	if got := run.Stage.Stats().Exhausted.Load(); got != 14 {
		t.Errorf("exhausted counter = %d, want 14", got)
	}
	for _, b := range run.Stage.Budget() {
		if b.SpentEpsilon > b.BudgetEpsilon*(1+1e-9) {
			t.Errorf("period %s spent %v > budget %v", b.PeriodStart, b.SpentEpsilon, b.BudgetEpsilon)
		}
	}
}

// TestEndToEndDeadLetter: with kafka.dead_letter_topic set, every malformed
// message is forwarded with its reason in a header.
func TestEndToEndDeadLetter(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	cfg.Kafka.DeadLetterTopic = "dlq-" + h.Name
	bad := map[string]string{
		"not json":                                         "bad_json",
		`{"ts":"soon","user_id":"a"}`:                      "bad_time",
		`{"ts":1767225600000}`:                             "missing_user",
		`{"user_id":"a"}`:                                  "missing_time",
		"{\"ts\":1767225600000,\"user_id\":\"\xff\"}":      "invalid_utf8",
		`{"ts":1767225600000,"user_id":{"nested":"user"}}`: "wrong_type",
	}
	var msgs []kafka.Message
	for v := range bad {
		msgs = append(msgs, kafka.Message{Key: []byte("k"), Value: []byte(v)})
	}
	h.Produce(msgs...)
	h.Start(cfg)

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{h.Broker.Addr()}, Topic: "dlq-" + h.Name, Partition: 0,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 500 * time.Millisecond})
	defer r.Close()
	got := map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(got) < len(bad) {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("dead-letter topic: got %d of %d messages: %v", len(got), len(bad), err)
		}
		for _, hd := range m.Headers {
			if hd.Key == pipeline.DropReasonHeader {
				got[string(m.Value)] = string(hd.Value)
			}
		}
	}
	for v, want := range bad {
		if got[v] != want {
			t.Errorf("%q: dead-letter reason %q, want %q", v, got[v], want)
		}
	}
}

// TestLedgerMatchesOutput: after a run, the ledger's recorded spend equals
// the sum of the unique released units' charges.
func TestLedgerMatchesOutput(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("concentrated", 5)
	h.ProduceEvents(e2e.Stream(3, 50))
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))
	h.ReadOutput(3*(len(e2e.Groups)+1), 60*time.Second, 0)
	run.Stop(t)
	checkLedger(t, cfg.State.Dir, 3*2)
}

// checkLedger opens the ledger and checks that each period's recorded spend
// is the sum of its released units' charges, and that wantUnits units exist.
func checkLedger(t *testing.T, dir string, wantUnits int) {
	t.Helper()
	l, err := ledger.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sums := map[int64][]float64{}
	var orders []float64
	n := 0
	if err := l.Units(func(u *ledger.Unit) bool {
		n++
		if !u.Published {
			t.Errorf("unit %s@%d recorded but not marked published after a clean stop", u.Histogram, u.WindowStart)
		}
		if u.Status != ledger.StatusReleased {
			return true
		}
		orders = u.Charge.Orders
		s := sums[u.Period]
		if s == nil {
			s = make([]float64, len(orders))
		}
		for i, e := range u.Charge.Epsilons {
			s[i] += e
		}
		sums[u.Period] = s
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != wantUnits {
		t.Errorf("ledger holds %d units, want %d", n, wantUnits)
	}
	for p, s := range sums {
		spent, ok, err := l.Spent(p)
		if err != nil || !ok {
			t.Fatalf("period %d: no spend recorded (%v)", p, err)
		}
		for i := range s {
			a, b := s[i], spent.Epsilons[i]
			if math.IsInf(a, 1) != math.IsInf(b, 1) || (!math.IsInf(a, 1) && math.Abs(a-b) > 1e-9*math.Max(1, a)) {
				t.Errorf("period %d order %g: recorded spend %v, sum of unit charges %v", p, orders[i], b, a)
			}
		}
	}
}
