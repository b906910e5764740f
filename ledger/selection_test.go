package ledger_test

import (
	"context"
	"testing"

	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/ledger/ledgertest"
)

// TestSelectionReservation: the bolt ledger records a unit's selection
// reservation (ledgertest.CheckSelectionReservation), also across a reopen.
func TestSelectionReservation(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.SetMeta(context.Background(), ledger.Meta{WindowMs: 60_000, PeriodMs: 5 * 60_000}); err != nil {
		t.Fatal(err)
	}
	ledgertest.CheckSelectionReservation(t, l, func() ledger.Store {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if l, err = ledger.Open(dir); err != nil {
			t.Fatal(err)
		}
		return l
	})
	l.Close()
}
