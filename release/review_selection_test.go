package release_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/mechanism"
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

// failingStore is a ledger whose window writes fail (a Kafka transaction
// aborted, a fenced lead, a full disk): nothing is recorded.
type failingStore struct{ *ledger.Ledger }

func (failingStore) RecordWindowAdmitted(context.Context, []*ledger.Unit, ledger.Curve, *ledger.Admitted) error {
	return errors.New("ledger write failed (test)")
}

// TestReviewSelectionNotPrintedBeforeRecorded (review of issue 30): the
// window's selection — which groups passed — is a private output; it may
// leave the process only once recorded with its charge (ground rules 3 and
// 4). With `stage run --print` the Releaser printed the groups_selected
// status while drawing, before the ledger write: a write that fails left
// a selection on the terminal that was never charged, and the boundary's
// retry drew and printed a second, independent one for the same window
// (this test, with the Releaser's Printer option, printed the status of a
// window whose record failed). The Releaser now prints nothing (it has no
// printer); the node prints a unit once published (Printer.PrintUnit):
// here, a failed record leaves nothing, and the recorded unit prints its
// status — the recorded groups — then its releases.
func TestReviewSelectionNotPrintedBeforeRecorded(t *testing.T) {
	dir := t.TempDir()
	cfg := selectConfig(t, dir, "")
	led, err := ledger.Open(cfg.State.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	p := mustPlan(t, cfg)
	book, err := release.NewBook(p, led)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := release.New(release.Options{Config: cfg, Plan: p, Ledger: failingStore{led}, Book: book,
		Rand: mechanism.NewSeededRand([32]byte{9})})
	if err != nil {
		t.Fatal(err)
	}
	if units, err := rel.Record(0, bigAndSmall(), nil); err == nil || units != nil {
		t.Fatalf("Record on a failing ledger: %d units, %v", len(units), err)
	}
	if _, ok, _ := led.Lookup("campaigns", 0); ok {
		t.Fatal("a failed record left a unit")
	}
	f := newSelFixture(t, cfg, led, 9)
	units, err := f.rel.Record(0, bigAndSmall(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	pr := release.NewPrinter(&out)
	for _, u := range units {
		pr.PrintUnit(u)
	}
	st, rels := selectionMessages(t, unitOf(t, units, "campaigns"))
	got := out.String()
	if want := fmt.Sprintf("groups selected: %d %v", len(st.Groups), st.Groups); !strings.Contains(got, want) {
		t.Errorf("printed:\n%s\nwant the recorded status %q", got, want)
	}
	for g := range rels {
		if !strings.Contains(got, "campaigns / "+g+" ") {
			t.Errorf("printed:\n%s\nwant the release of %s", got, g)
		}
	}
	if !strings.Contains(got, "devices / * ") {
		t.Errorf("printed:\n%s\nwant the listed histogram's release", got)
	}
}
