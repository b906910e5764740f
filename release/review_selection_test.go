package release_test

import (
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/release"
)

// TestReviewSelectionKeyNamesWindowSizes (review of issue 30): the
// selection reservation covers the period's selections only if every
// selection it covers was composed in the period its calibration assumed.
// With the cross-window bound, a histogram's selections compose over the
// windows its window size's admissions (consume.RestoreAdmissions: one
// state per window size) let a user count in. Moving the selecting
// histogram mid-period from the base 1-minute window (K = 2 of 10) to a
// 2-minute window of its own (K_h = 2 of 5) gives the same σ, T and
// Period (Units = min(K, W) = 2 both), so the same key: the new
// configuration's selections would be covered by the old reservation,
// while the 2-minute windows' admissions start from zero — a user counts
// in 2 + 2 selected windows against a reservation for 2. Likewise a
// selecting histogram swapped for one of another window size. The key must
// differ whenever the admissions a histogram's selections compose over
// differ.
func TestReviewSelectionKeyNamesWindowSizes(t *testing.T) {
	base := selectConfig(t, t.TempDir(), "contribution: {max_windows_per_user: 2}")
	base.Privacy.Budget.Period = config.Duration(10 * time.Minute)
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	moved := selectConfig(t, t.TempDir(), "contribution: {max_windows_per_user: 2}")
	moved.Privacy.Budget.Period = config.Duration(10 * time.Minute)
	moved.Histograms[0].Window = config.Duration(2 * time.Minute)
	moved.Histograms[0].MaxWindowsPerUser = 2
	if err := moved.Validate(); err != nil {
		t.Fatal(err)
	}
	pa, pb := mustPlan(t, base), mustPlan(t, moved)
	if pa.Selection == nil || pb.Selection == nil {
		t.Fatal("no selection plan")
	}
	ka := release.SelectionReservationKey(pa.Neighbour, pa.Selection)
	kb := release.SelectionReservationKey(pb.Neighbour, pb.Selection)
	t.Logf("1m: units %d, T %d, σ %v, key %s", pa.Selection.Selection.Period.Units, pa.Selection.Selection.Threshold.T, pa.Selection.Selection.Threshold.Sigma, ka)
	t.Logf("2m: units %d, T %d, σ %v, key %s", pb.Selection.Selection.Period.Units, pb.Selection.Selection.Threshold.T, pb.Selection.Selection.Threshold.Sigma, kb)
	if ka == kb {
		t.Errorf("the selecting histogram moved from 1-minute to 2-minute windows (separate admissions) keeps the selection reservation key %s: its new selections would be covered by a reservation made for the old windows' K", ka)
	}
}
