package ledger

import (
	"errors"
	"testing"
)

// TestRecordBoundary: one RecordWindow holds the units of every histogram
// window ending at one base boundary (a 1m and a 3m window ending at 3m),
// refuses units ending at different times, and LastWindowEnd is the largest
// end recorded — also when the last boundary recorded only a long window,
// whose start is before the last start recorded — across a reopen.
func TestRecordBoundary(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.LastWindowEnd(); err != nil || ok {
		t.Fatalf("empty ledger: ok=%v err=%v", ok, err)
	}
	unit := func(h string, start, end int64) *Unit {
		return &Unit{Histogram: h, WindowStart: start, WindowEnd: end, Status: StatusReleased}
	}
	const m = 60000
	// Boundary 3m: minute [2m, 3m) and three-minute [0, 3m).
	if err := l.RecordWindow([]*Unit{unit("minute", 2*m, 3*m), unit("three", 0, 3*m)}, Curve{}); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordWindow([]*Unit{unit("two", 2*m, 4*m), unit("minute", 4*m, 5*m)}, Curve{}); err == nil {
		t.Fatal("units ending at 4m and 5m recorded together")
	}
	// Boundary 4m: a two-minute window only (the same record refused above
	// recorded nothing).
	if _, ok, _ := l.Lookup("two", 2*m); ok {
		t.Fatal("a refused record left a unit behind")
	}
	if err := l.RecordWindow([]*Unit{unit("two", 2*m, 4*m)}, Curve{}); err != nil {
		t.Fatal(err)
	}
	// Boundary 5m: only a five-minute window [0, 5m), whose start is below
	// the last start recorded (2m).
	if err := l.RecordWindow([]*Unit{unit("five", 0, 5*m)}, Curve{}); err != nil {
		t.Fatal(err)
	}
	if last, ok, err := l.LastWindow(); err != nil || !ok || last != 2*m {
		t.Fatalf("last window start %d ok=%v err=%v, want 2m", last, ok, err)
	}
	check := func(l *Ledger) {
		t.Helper()
		end, ok, err := l.LastWindowEnd()
		if err != nil || !ok || end != 5*m {
			t.Fatalf("last window end %d ok=%v err=%v, want 5m", end, ok, err)
		}
	}
	check(l)
	// A record refused (already recorded) does not move it.
	if err := l.RecordWindow([]*Unit{unit("minute", 2*m, 3*m)}, Curve{}); !errors.Is(err, ErrAlreadyRecorded) {
		t.Fatalf("second record: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	check(l)
}
