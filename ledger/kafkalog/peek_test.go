package kafkalog

import (
	"testing"

	"github.com/dpstage/stage/ledger"
)

// TestPeek: the read-only reader's resume window, while the owner keeps
// the log open: none on an empty log; the metadata's first window; the
// largest window end once a window is recorded. The owner is not fenced
// by it (it records again afterwards).
func TestPeek(t *testing.T) {
	c := newCluster(t)
	cfg := testConfig(c)
	peek := func() (int64, bool) {
		t.Helper()
		w, ok, err := Peek(ctxT(t), Config{Brokers: cfg.Brokers, Topic: cfg.Topic}, minute)
		if err != nil {
			t.Fatal(err)
		}
		return w, ok
	}
	if _, ok := peek(); ok {
		t.Fatal("an empty log has a resume window")
	}
	l := openLog(t, c)
	if _, ok := peek(); ok {
		t.Fatal("a log with its open record only has a resume window")
	}
	if _, _, err := l.SetMeta(ctxT(t), ledger.Meta{WindowMs: minute, PeriodMs: day, FirstWindow: 5 * minute}); err != nil {
		t.Fatal(err)
	}
	if w, ok := peek(); !ok || w != 5*minute {
		t.Fatalf("after the metadata: %d, %v; want %d", w, ok, 5*minute)
	}
	must(t, l.RecordWindow(ctxT(t), []*ledger.Unit{released("pages", 5*minute, 0.5, "w5")}, curve(0.5, 1)))
	if w, ok := peek(); !ok || w != 6*minute {
		t.Fatalf("after window 5: %d, %v; want %d", w, ok, 6*minute)
	}
	must(t, l.RecordWindow(ctxT(t), []*ledger.Unit{released("pages", 6*minute, 0.5, "w6")}, curve(1, 2)))
	if w, ok := peek(); !ok || w != 7*minute {
		t.Fatalf("after window 6: %d, %v; want %d", w, ok, 7*minute)
	}
}
