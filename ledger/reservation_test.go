package ledger

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestReservations: a period reservation is recorded with the unit that
// made it, in the same transaction — a window refused as already recorded
// records none — it survives a reopen and the pruning of the unit that
// made it while its period is current, a period holds a key once, and the
// reservations of a period that is over are pruned with its spend.
func TestReservations(t *testing.T) {
	const minute, period = int64(60_000), int64(5 * 60_000)
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.SetMeta(context.Background(), Meta{WindowMs: minute, PeriodMs: period}); err != nil {
		t.Fatal(err)
	}
	charge := Curve{Orders: []float64{2}, Epsilons: []float64{0.5}}
	unit := func(hist string, w int64, res, covered string) *Unit {
		u := &Unit{Histogram: hist, WindowStart: w, WindowEnd: w + minute, Period: w - w%period,
			Status: StatusReleased, Reservation: res, CoveredBy: covered, Published: true}
		if res != "" {
			u.Charge = charge
		}
		return u
	}
	// Window 0 makes two reservations; window 1 is covered.
	if err := l.RecordWindow([]*Unit{unit("pages", 0, "kp", ""), unit("devices", 0, "kd", "")}, charge); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordWindow([]*Unit{unit("pages", minute, "", "kp"), unit("devices", minute, "", "kd")}, Curve{}); err != nil {
		t.Fatal(err)
	}
	// A window refused as already recorded records no reservation.
	if err := l.RecordWindow([]*Unit{unit("other", minute, "ko", ""), unit("pages", minute, "", "kp")}, charge); !errors.Is(err, ErrAlreadyRecorded) {
		t.Fatalf("re-record: %v", err)
	}
	// A key the period holds is refused (and the window with it).
	if err := l.RecordWindow([]*Unit{unit("pages", 2*minute, "kp", "")}, charge); err == nil {
		t.Error("a second reservation of the same key in the period was recorded")
	}
	if _, ok, _ := l.Lookup("pages", 2*minute); ok {
		t.Error("the window with the refused reservation was recorded")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := func(p int64, keys string) {
		t.Helper()
		got, err := l.Reservations(p)
		if err != nil || fmt.Sprint(got) != keys {
			t.Errorf("reservations of period %d: %v (%v), want %s", p, got, err, keys)
		}
	}
	want(0, "[kd kp]")
	want(period, "[]")
	// The next period: its own reservation under the same key.
	if err := l.RecordWindow([]*Unit{unit("pages", period+minute, "kp", "")}, charge); err != nil {
		t.Fatal(err)
	}
	// Pruning the units of the current period keeps its reservations.
	if err := l.RecordWindow([]*Unit{unit("pages", 3*minute, "", "kp")}, Curve{}); err != nil {
		t.Fatal(err)
	}
	want(0, "[kd kp]")
	if n, _, err := l.Prune(context.Background(), 2*minute); err != nil || n != 4 {
		t.Fatalf("prune: %d units, %v", n, err)
	}
	want(0, "[kd kp]")
	// Once the period is over it goes with its spend.
	if _, periods, err := l.Prune(context.Background(), period+minute); err != nil || periods != 1 {
		t.Fatalf("prune: %d periods, %v", periods, err)
	}
	want(0, "[]")
	want(period, "[kp]")
}
