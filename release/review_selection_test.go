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

// anyCounts is a window's counts for any histograms: histogram 0 selects
// (the keys of bigAndSmall), every listed one counts {7, 3} in its one
// group.
type anyCounts struct{ keyedCounts }

func (anyCounts) Counts(h, g int, dst []float64) []float64 { return append(dst[:0], 7, 3) }

// reviewMoveConfig: a 10-minute period of 1-minute windows under
// contribution.max_windows_per_user = 2; campaigns selects, in 1-minute
// windows or (moved) in 2-minute windows of its own with K_h = 2;
// devices is listed; six listed 5-minute views (K_h = 1) that have not
// closed a window yet when the configuration changes leave room in the
// period's budget for campaigns' new count reservation.
func reviewMoveConfig(t *testing.T, dir string, moved bool) *config.Config {
	t.Helper()
	own := ""
	if moved {
		own = ", window: 2m, max_windows_per_user: 2"
	}
	views := ""
	for i := range 6 {
		views += fmt.Sprintf("  - {name: view%d, field: device, bins: [mobile, desktop], window: 5m, max_windows_per_user: 1}\n", i)
	}
	y := fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1m, watermark: event, start: "2026-01-01T00:00:00Z"}
contribution: {max_windows_per_user: 2, max_tracked_users: 0}
histograms:
  - {name: campaigns, field: page, bins: [home, cart], group_by: campaign%s}
  - {name: devices, field: device, bins: [mobile, desktop]}
%sprivacy:
  mechanism: gaussian
  neighbour: replace
  budget: {epsilon: 1, delta: 1.0e-6, period: 10m}
state: {dir: %q}
`, own, views, dir)
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// TestReviewMovedSelectionNotCovered (review of issue 30): the sequence
// behind TestReviewSelectionKeyNamesWindowSizes, end to end in the
// Releaser. campaigns releases minutes 0 and 1 in 1-minute windows (its
// first unit makes the period's selection reservation, for 2 windows a
// user); the stage restarts with campaigns in 2-minute windows (K_h = 2,
// a fresh admission state: consume.RestoreAdmissions keeps one per window
// size). Its window [2m, 4m) must not be covered by the old reservation:
// a user admitted to minutes 0 and 1 is admitted again to two 2-minute
// windows, so the period's selections compose over 4 of a user's windows
// against a charge for 2. (On main it was covered: its count charge, a new
// view reservation, fits the room the unclosed views leave.)
func TestReviewMovedSelectionNotCovered(t *testing.T) {
	dir := t.TempDir()
	a := reviewMoveConfig(t, dir, false)
	led, err := ledger.Open(a.State.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	fa := newSelFixture(t, a, led, 1)
	keyA := release.SelectionReservationKey(fa.plan.Neighbour, fa.plan.Selection)
	for _, w := range []int64{0, minute} {
		units, err := fa.rel.Record(w, anyCounts{bigAndSmall()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if u := unitOf(t, units, "campaigns"); u.Status != ledger.StatusReleased || u.Selection == nil {
			t.Fatalf("1-minute campaigns@%d: %s, selection %+v", w, u.Status, u.Selection)
		}
	}
	b := reviewMoveConfig(t, dir, true)
	fb := newSelFixture(t, b, led, 2)
	units, err := fb.rel.Record(3*minute, anyCounts{bigAndSmall()}, nil) // the boundary at 4m: campaigns [2m, 4m)
	if err != nil {
		t.Fatal(err)
	}
	u := unitOf(t, units, "campaigns")
	t.Logf("2-minute campaigns@2m: %s, selection %+v (old reservation %s)", u.Status, u.Selection, keyA)
	if u.Status == ledger.StatusReleased && u.Selection != nil && u.Selection.CoveredBy == keyA {
		t.Errorf("campaigns moved to 2-minute windows (fresh admissions) released a selection covered by the 1-minute windows' reservation %s", keyA)
	}
}
