package kafkapartial

import (
	"maps"
	"testing"

	"github.com/dpstage/stage/partial"
)

// TestCheckpointKeepsViewAdmissions (issue #23 item 2): a view's
// admissions records (a 3-minute view's, partial.Admitted.View) live next
// to the base window's in a progress partition. A checkpoint folds and
// tombstones the base window's records only: after it a new owner
// restores the base state from the checkpoint and the view's state, exact,
// from the view's records (Restored.ViewCounts), which the base state
// never counts.
func TestCheckpointKeepsViewAdmissions(t *testing.T) {
	c := newCluster(t, 1)
	const view = 3 * minute
	wantView := map[uint64]uint16{}
	// Two owners, each writing a checkpoint (at 5m, in the transaction of
	// a view's window, and at 7m after the takeover, whose Writer learnt
	// the views' records from its restore).
	o, _ := takeOver(t, c, 0, 2, 0, true)
	for win := int64(0); win < 9*minute; win += minute {
		if win == 6*minute {
			o, _ = takeOver(t, c, 0, 2, win, true)
		}
		users := []uint64{11, 13, uint64(win/minute) + 100}
		period := win - win%testPeriod
		o.adm.Forget(period)
		admitted := o.adm.Close(period, users)
		e := emission(0, win)
		e.Admitted = partial.ChunkAdmitted(period, win, admitted)
		if win == 5*minute || win == 7*minute { // at 5m with the view's window ending at 6m
			// A checkpoint instead of the base records.
			e.Admitted, e.Snapshot = nil, &Snapshot{Period: period, Counts: o.adm.Counts(period)}
		}
		if end := win + minute; end%view == 0 { // the view's window [end − 3m, end) closes
			vu := []uint64{13, uint64(end/minute) + 200}
			e.Admitted = append(e.Admitted, partial.ChunkViewAdmitted(view, period, end-view, vu)...)
			for _, u := range vu {
				wantView[u]++
			}
		}
		if err := o.w.Emit(ctxT(t), e); err != nil {
			t.Fatal(err)
		}
	}
	wantBase := o.adm.Counts(0)
	_, rs := takeOver(t, c, 0, 2, 9*minute, true)
	if rs.Snapshot == nil {
		t.Fatal("no checkpoint restored: the test does not test one")
	}
	if got := rs.Counts(0); !maps.Equal(got, wantBase) {
		t.Errorf("base state %v, want %v", got, wantBase)
	}
	if got := rs.ViewCounts(0, view); !maps.Equal(got, wantView) || len(wantView) != 4 {
		t.Errorf("view state %v, want %v", got, wantView)
	}
	if got := rs.ViewCounts(0, 2*view); len(got) != 0 {
		t.Errorf("another view's state %v, want none", got)
	}
}
