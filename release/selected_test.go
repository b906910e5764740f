package release_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/release/releasetest"
)

// keyedCounts is a window's counts with keys for histogram 0 (campaigns,
// which selects) and one group for histogram 1 (devices): release.Counts
// and release.Keyed as the aggregator and the merged partials give them.
type keyedCounts struct {
	keys   []string
	users  []int64
	counts [][]float64
}

func (k keyedCounts) Counts(h, g int, dst []float64) []float64 {
	if h != 1 || g != 0 {
		panic(fmt.Sprintf("Counts(%d, %d) of a selecting histogram", h, g))
	}
	return append(dst[:0], 7, 3)
}

func (k keyedCounts) Keys(h int) int {
	if h != 0 {
		return 0
	}
	return len(k.keys)
}

func (k keyedCounts) Key(h, i int, dst []float64) (string, int64, []float64) {
	return k.keys[i], k.users[i], append(dst[:0], k.counts[i]...)
}

// selectConfig: campaigns selects its groups (group_by, no groups) at ε=1
// a period of 5 one-minute windows; devices is listed.
func selectConfig(t testing.TB, dir, selection string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1m, watermark: event, start: "2026-01-01T00:00:00Z"}
histograms:
  - {name: campaigns, field: page, bins: [home, cart], group_by: campaign}
  - {name: devices, field: device, bins: [mobile, desktop]}
privacy:
  mechanism: gaussian
  neighbour: replace
  budget: {epsilon: 1, delta: 1.0e-6, period: 5m}
%s
state: {dir: %q}
`, selection, dir)
	return releasetest.Config(t, y)
}

type selFixture struct {
	cfg  *config.Config
	plan *plan.Plan
	led  *ledger.Ledger
	rel  *release.Releaser
}

func newSelFixture(t testing.TB, cfg *config.Config, led *ledger.Ledger, seed byte) *selFixture {
	t.Helper()
	rel, p, _ := releasetest.Releaser(t, cfg, led, [32]byte{seed})
	return &selFixture{cfg: cfg, plan: p, led: led, rel: rel}
}

// bigAndSmall: five keys, two of them far above any threshold of this
// plan, three of one user each (a key one user created).
func bigAndSmall() keyedCounts {
	return keyedCounts{
		keys:   []string{"a-solo", "big-1", "big-2", "m-solo", "z-solo"},
		users:  []int64{1, 100000, 50000, 1, 1},
		counts: [][]float64{{1, 0}, {60000, 40000}, {10000, 40000}, {0, 1}, {1, 0}},
	}
}

func unitOf(t *testing.T, units []*ledger.Unit, name string) *ledger.Unit {
	t.Helper()
	for _, u := range units {
		if u.Histogram == name {
			return u
		}
	}
	t.Fatalf("no unit of %s", name)
	return nil
}

// selectionMessages splits a selecting unit's messages: the status (first)
// and the releases by group.
func selectionMessages(t *testing.T, u *ledger.Unit) (release.Status, map[string]release.Release) {
	t.Helper()
	if len(u.Messages) == 0 {
		t.Fatalf("unit %s@%d has no message", u.Histogram, u.WindowStart)
	}
	var st release.Status
	if err := json.Unmarshal(u.Messages[0].Value, &st); err != nil {
		t.Fatal(err)
	}
	rels := map[string]release.Release{}
	for _, m := range u.Messages[1:] {
		var r release.Release
		if err := json.Unmarshal(m.Value, &r); err != nil {
			t.Fatal(err)
		}
		rels[r.Group] = r
	}
	return st, rels
}

// TestSelectionRelease: a selecting histogram's unit charges the period's
// selection reservation once (the first unit of the period makes it, the
// later ones — also after a restart — are covered), names the selected
// groups in a groups_selected status first, and releases exactly those,
// each with the public selection block; a group one user created is not
// released (at this plan, P ≤ window_delta ≈ 1e-7 per key: 3 keys × 3
// windows ≈ 1e-6 false failure), the groups of 50,000 and more users are.
func TestSelectionRelease(t *testing.T) {
	dir := t.TempDir()
	cfg := selectConfig(t, dir, "")
	led, err := ledger.Open(cfg.State.Dir)
	if err != nil {
		t.Fatal(err)
	}
	f := newSelFixture(t, cfg, led, 1)
	sp := f.plan.Selection
	if sp == nil {
		t.Fatal("no selection plan")
	}
	key := release.SelectionReservationKey(f.plan.Neighbour, sp)
	var before ledger.Approx
	for i, w := range []int64{0, minute} {
		units, err := f.rel.Record(w, bigAndSmall(), nil)
		if err != nil {
			t.Fatal(err)
		}
		u := unitOf(t, units, "campaigns")
		if u.Status != ledger.StatusReleased || u.Selection == nil {
			t.Fatalf("window %d: status %s, selection %+v", i, u.Status, u.Selection)
		}
		a, _, err := led.ApproxSpent(u.Period)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if u.Selection.Reservation != key || u.Selection.Approx == nil ||
				u.Selection.Approx.Epsilon != sp.Epsilon || u.Selection.Approx.Delta != sp.Delta {
				t.Fatalf("first unit's selection %+v, want reservation %s of (%g, %g)", u.Selection, key, sp.Epsilon, sp.Delta)
			}
			if a.Epsilon < sp.Epsilon || a.Delta < sp.Delta {
				t.Fatalf("approx spend %+v after the selection reservation (%g, %g)", a, sp.Epsilon, sp.Delta)
			}
			before = a
		} else {
			if u.Selection.CoveredBy != key || u.Selection.Reservation != "" {
				t.Fatalf("second unit's selection %+v, want covered by %s", u.Selection, key)
			}
			if a != before {
				t.Fatalf("approx spend %+v after a covered selection, was %+v", a, before)
			}
		}
		st, rels := selectionMessages(t, u)
		if st.Status != release.StatusGroupsSelected || st.Selection == nil || st.Selection.ChargeID != key {
			t.Fatalf("status %+v", st)
		}
		if want := []string{"big-1", "big-2"}; !slices.Equal(st.Groups, want) {
			t.Fatalf("window %d: groups %v, want %v", i, st.Groups, want)
		}
		if len(rels) != 2 {
			t.Fatalf("window %d: %d releases, want 2", i, len(rels))
		}
		for g, r := range rels {
			if r.Selection == nil || r.Selection.Threshold != sp.Selection.Threshold.T || r.ReleaseID != release.ReleaseID("campaigns", g, w) {
				t.Errorf("release %s: selection %+v, id %s", g, r.Selection, r.ReleaseID)
			}
		}
		if p := rels["big-1"].Probabilities; p[0] < 0.55 || p[0] > 0.65 {
			t.Errorf("big-1 home share %v, want about 0.6", p[0])
		}
		if d := unitOf(t, units, "devices"); d.Status != ledger.StatusReleased || d.Selection != nil || len(d.Messages) != 1 {
			t.Errorf("devices unit: %s, selection %+v, %d messages", d.Status, d.Selection, len(d.Messages))
		}
		// The unit's messages are what a restart republishes: asked again,
		// the same bytes.
		again, err := f.rel.Record(w, bigAndSmall(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range again {
			if a.Histogram == "campaigns" && (len(a.Messages) != len(u.Messages) || !bytes.Equal(a.Messages[0].Value, u.Messages[0].Value)) {
				t.Errorf("window %d recorded again: other messages", i)
			}
		}
	}
	// A restart: the book is restored from the ledger; the period's
	// reservation is held, so a third window is covered.
	f2 := newSelFixture(t, cfg, led, 2)
	units, err := f2.rel.Record(2*minute, bigAndSmall(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if u := unitOf(t, units, "campaigns"); u.Selection == nil || u.Selection.CoveredBy != key {
		t.Fatalf("after a restart: selection %+v, want covered by %s", u.Selection, key)
	}
	// The next period makes its own.
	units, err = f2.rel.Record(5*minute, bigAndSmall(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if u := unitOf(t, units, "campaigns"); u.Selection == nil || u.Selection.Reservation != key {
		t.Fatalf("next period: selection %+v, want the reservation %s made", u.Selection, key)
	}
}

// TestSelectionWithheld: a window whose distinct keys are far over
// selection.max_keys_per_window is withheld (the noisy test: σ_k is a
// few users here, the excess 500 keys) — a selection_withheld status and no
// release, charged all the same.
func TestSelectionWithheld(t *testing.T) {
	cfg := selectConfig(t, t.TempDir(), "selection: {max_keys_per_window: 10}")
	led, err := ledger.Open(cfg.State.Dir)
	if err != nil {
		t.Fatal(err)
	}
	f := newSelFixture(t, cfg, led, 1)
	var kc keyedCounts
	for i := range 510 {
		kc.keys = append(kc.keys, fmt.Sprintf("k%04d", i))
		kc.users = append(kc.users, 100000)
		kc.counts = append(kc.counts, []float64{1, 1})
	}
	units, err := f.rel.Record(0, kc, nil)
	if err != nil {
		t.Fatal(err)
	}
	u := unitOf(t, units, "campaigns")
	st, rels := selectionMessages(t, u)
	if st.Status != release.StatusSelectionWithheld || st.Selection == nil || !st.Selection.Withheld || len(rels) != 0 || len(st.Groups) != 0 {
		t.Fatalf("status %+v with %d releases, want withheld and none", st, len(rels))
	}
	if u.Selection == nil || u.Selection.Reservation == "" {
		t.Fatalf("a withheld window is charged like any other: %+v", u.Selection)
	}
}

// TestSelectionRefusesUnsortedKeys: keys out of order are a bug of the
// counts' producer, never released.
func TestSelectionRefusesUnsortedKeys(t *testing.T) {
	cfg := selectConfig(t, t.TempDir(), "")
	led, err := ledger.Open(cfg.State.Dir)
	if err != nil {
		t.Fatal(err)
	}
	f := newSelFixture(t, cfg, led, 1)
	kc := bigAndSmall()
	kc.keys[0], kc.keys[1] = kc.keys[1], kc.keys[0]
	if _, err := f.rel.Record(0, kc, nil); err == nil {
		t.Fatal("unsorted keys recorded")
	}
	if _, ok, _ := led.Lookup("campaigns", 0); ok {
		t.Fatal("a unit was recorded")
	}
}
