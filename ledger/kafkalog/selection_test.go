package kafkalog

import (
	"testing"

	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/ledger/ledgertest"
)

// TestSelectionReservation: the Kafka release log records a unit's
// selection reservation like the bolt ledger
// (ledgertest.CheckSelectionReservation), and a second process opening the
// log restores it.
func TestSelectionReservation(t *testing.T) {
	c := newCluster(t)
	l := openLog(t, c)
	ledgertest.CheckSelectionReservation(t, l, func() ledger.Store {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return openLog(t, c)
	})
}
