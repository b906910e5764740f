package ledger

import (
	"context"
	"errors"
	"math"
	"testing"
)

func TestRecordLookupRepublish(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	charge := Curve{Orders: []float64{2, 3}, Epsilons: []float64{0.5, math.Inf(1)}}
	u := &Unit{Histogram: "pages", WindowStart: -60000, WindowEnd: 0, Period: -86400000,
		Status: StatusReleased, Charge: charge,
		Messages: []Message{{Key: []byte("pages/US"), Value: []byte(`{"p":1}`)}}}
	if err := l.Record(u, charge); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(u, charge); !errors.Is(err, ErrAlreadyRecorded) {
		t.Fatalf("second record: got %v, want ErrAlreadyRecorded", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen: the unit, its values and the spend survive.
	l, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, ok, err := l.Lookup("pages", -60000)
	if err != nil || !ok {
		t.Fatalf("lookup: ok=%v err=%v", ok, err)
	}
	if got.Published || string(got.Messages[0].Value) != `{"p":1}` {
		t.Fatalf("unexpected unit %+v", got)
	}
	if !math.IsInf(got.Charge.Epsilons[1], 1) || got.Charge.Epsilons[0] != 0.5 {
		t.Fatalf("charge not preserved: %+v", got.Charge)
	}
	spent, ok, err := l.Spent(-86400000)
	if err != nil || !ok || spent.Epsilons[0] != 0.5 {
		t.Fatalf("spent: %+v ok=%v err=%v", spent, ok, err)
	}
	if err := l.MarkPublished("pages", -60000); err != nil {
		t.Fatal(err)
	}
	got, _, _ = l.Lookup("pages", -60000)
	if !got.Published {
		t.Fatal("not marked published")
	}
	last, ok, err := l.LastWindow()
	if err != nil || !ok || last != -60000 {
		t.Fatalf("last window = %d ok=%v err=%v", last, ok, err)
	}
}

func TestExhaustedUnitChargesNothing(t *testing.T) {
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	u := &Unit{Histogram: "h", WindowStart: 0, Period: 0, Status: StatusBudgetExhausted}
	if err := l.Record(u, Curve{Orders: []float64{2}, Epsilons: []float64{9}}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := l.Spent(0); ok {
		t.Fatal("an exhausted unit must not write a spend")
	}
}

func TestLockedByAnotherOpen(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := Open(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: got %v, want ErrLocked", err)
	}
}

// TestPrune: published units before the horizon go, with the spends of the
// periods that ended; unpublished units and the last window always stay.
func TestPrune(t *testing.T) {
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, _, err := l.SetMeta(context.Background(), Meta{FirstWindow: 0, WindowMs: 10, PeriodMs: 100}); err != nil {
		t.Fatal(err)
	}
	c := Curve{Orders: []float64{2}, Epsilons: []float64{0.1}}
	for w := int64(0); w < 300; w += 10 {
		u := &Unit{Histogram: "h", WindowStart: w, WindowEnd: w + 10, Period: w - w%100, Status: StatusReleased, Charge: c}
		if err := l.Record(u, c); err != nil {
			t.Fatal(err)
		}
		if w != 50 { // window 50 stays unpublished
			if err := l.MarkPublished("h", w); err != nil {
				t.Fatal(err)
			}
		}
	}
	units, periods, err := l.Prune(context.Background(), 250)
	if err != nil {
		t.Fatal(err)
	}
	if units != 24 || periods != 2 { // windows 0..240 but 50; periods [0,100) and [100,200)
		t.Fatalf("pruned %d units and %d periods, want 24 and 2", units, periods)
	}
	if _, ok, _ := l.Lookup("h", 50); !ok {
		t.Error("an unpublished unit was pruned")
	}
	if _, ok, _ := l.Spent(200); !ok {
		t.Error("the spend of the running period was pruned")
	}
	// A horizon past the last window never removes the last window.
	if _, _, err := l.Prune(context.Background(), 1<<40); err != nil {
		t.Fatal(err)
	}
	if last, ok, _ := l.LastWindow(); !ok || last != 290 {
		t.Fatalf("last window %d (ok=%v) after pruning, want 290", last, ok)
	}
}

// TestApproxSpend: (ε, δ) charges of average histograms add up per period,
// survive a reopen, leave the RDP spend alone, are not added for a refused
// duplicate, and are pruned with their period.
func TestApproxSpend(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.SetMeta(context.Background(), Meta{FirstWindow: 0, WindowMs: 100, PeriodMs: 1000}); err != nil {
		t.Fatal(err)
	}
	for w := int64(0); w < 300; w += 100 {
		u := &Unit{Histogram: "interests", WindowStart: w, WindowEnd: w + 100, Period: 0,
			Status: StatusReleased, Approx: &Approx{Epsilon: 0.25, Delta: 1e-9, Releases: 1}, Published: true}
		if err := l.Record(u, Curve{}); err != nil {
			t.Fatal(err)
		}
		if w == 0 {
			if err := l.Record(u, Curve{}); !errors.Is(err, ErrAlreadyRecorded) {
				t.Fatalf("duplicate: %v", err)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, ok, err := l.ApproxSpent(0)
	if err != nil || !ok || a.Releases != 3 || math.Abs(a.Epsilon-0.75) > 1e-15 || math.Abs(a.Delta-3e-9) > 1e-22 {
		t.Fatalf("approx spend %+v ok=%v err=%v, want 3 releases, ε 0.75, δ 3e-9", a, ok, err)
	}
	if _, ok, _ := l.Spent(0); ok {
		t.Error("an approx charge wrote an RDP spend")
	}
	u, _, _ := l.Lookup("interests", 100)
	if u.Approx == nil || u.Approx.Epsilon != 0.25 {
		t.Errorf("unit's approx charge not stored: %+v", u.Approx)
	}
	// A unit of the next period makes period 0 finished and prunable.
	next := &Unit{Histogram: "interests", WindowStart: 1000, WindowEnd: 1100, Period: 1000,
		Status: StatusReleased, Approx: &Approx{Epsilon: 0.25, Delta: 1e-9, Releases: 1}}
	if err := l.Record(next, Curve{}); err != nil {
		t.Fatal(err)
	}
	if _, periods, err := l.Prune(context.Background(), 1000); err != nil || periods != 0 {
		t.Fatalf("prune: periods %d (RDP buckets) err %v", periods, err)
	}
	if _, ok, _ := l.ApproxSpent(0); ok {
		t.Error("finished period's approx spend not pruned")
	}
	if a, ok, _ := l.ApproxSpent(1000); !ok || a.Releases != 1 {
		t.Errorf("current period's approx spend pruned: %+v %v", a, ok)
	}
}
