package release_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/consume"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/release/releasetest"
)

// TestSelectionStream is issue 30's acceptance stream: hourly windows, a
// day's budget of ε=2 (δ=1e-6), one histogram selecting its groups, and in
// every window groups of 3, 30, 300 and 3,000 distinct users (each user
// one event in one group), through the real decoder, aggregator and
// releaser. Over 120 windows (5 periods):
//
//   - a group of 3 users is never released (per key and window at most
//     window_delta ≈ 1e-8: over 600 keys a false failure of ~6e-6);
//   - a group of 3,000 is released in every window (its miss probability
//     is under 1e-30 at this plan);
//   - groups of 30 and 300 are released at the rate the derivation gives,
//     Threshold.PassProbability(n): the count of releases is within 4.5
//     binomial standard errors of n·p (false failure ≈ 7e-6 each), and a
//     rate of 0 must be observed as 0.
//
// The releases of the selected groups carry their shares (the 3,000-user
// groups' home share is 0.6 by construction: checked within 0.05).
func TestSelectionStream(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical stream test")
	}
	const hour = int64(3_600_000)
	const windows = 120
	sizes := []struct {
		users, groups int
	}{{3, 5}, {30, 5}, {300, 5}, {3000, 2}}
	y := fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1h, watermark: event, start: "2026-01-01T00:00:00Z"}
histograms:
  - {name: campaigns, field: page, bins: [home, cart], group_by: campaign}
privacy:
  budget: {epsilon: 2, delta: 1.0e-6, period: 24h}
state: {dir: %q}
`, t.TempDir())
	cfg := releasetest.Config(t, y)
	rel, p, _ := releasetest.Releaser(t, cfg, nil, [32]byte{30})
	th := p.Selection.Selection.Threshold
	agg, err := aggregate.New(consume.AggregateSpec(cfg))
	if err != nil {
		t.Fatal(err)
	}
	dec, err := decode.New(cfg, siphash.MustNewKey())
	if err != nil {
		t.Fatal(err)
	}
	ev := dec.NewEvent()
	released := map[int]int{} // by group size
	buf := make([]byte, 0, 128)
	for w := int64(0); w < windows; w++ {
		start := w * hour
		user := 0
		for _, s := range sizes {
			for g := range s.groups {
				key := fmt.Sprintf("g%d-%d", s.users, g)
				for i := range s.users {
					page := "home"
					if i%5 >= 3 {
						page = "cart"
					}
					buf = fmt.Appendf(buf[:0], `{"ts":%d,"user_id":"u%d","page":%q,"campaign":%q}`, start+int64(user%3_600_000), user, page, key)
					user++
					if r := dec.Decode(buf, ev); r != decode.ReasonNone {
						t.Fatalf("decode: %v", r)
					}
					agg.Add(start, ev)
				}
			}
		}
		counts, err := agg.Close(start)
		if err != nil {
			t.Fatal(err)
		}
		units, err := rel.Record(start, counts, nil)
		counts.Release()
		if err != nil {
			t.Fatalf("window %d: %v", w, err)
		}
		if len(units) != 1 || units[0].Status != ledger.StatusReleased {
			t.Fatalf("window %d: units %+v", w, units)
		}
		st, rels := selectionMessages(t, units[0])
		if st.Status != release.StatusGroupsSelected || len(st.Groups) != len(rels) {
			t.Fatalf("window %d: status %s with %d groups and %d releases", w, st.Status, len(st.Groups), len(rels))
		}
		for _, g := range st.Groups {
			var n, k int
			if _, err := fmt.Sscanf(g, "g%d-%d", &n, &k); err != nil {
				t.Fatalf("selected group %q: %v", g, err)
			}
			released[n]++
			if n == 3000 {
				if s := rels[g].Probabilities[0]; math.Abs(s-0.6) > 0.05 {
					t.Errorf("window %d: %s home share %.3f, want 0.6", w, g, s)
				}
			}
		}
	}
	for _, s := range sizes {
		n := windows * s.groups
		pr := th.PassProbability(int64(s.users))
		got := released[s.users]
		sd := math.Sqrt(float64(n) * pr * (1 - pr))
		t.Logf("groups of %d users: released %d of %d (%.4f), derivation %.4f", s.users, got, n, float64(got)/float64(n), pr)
		switch {
		case s.users == 3 && got != 0:
			t.Errorf("a group of 3 users was released %d times", got)
		case s.users == 3000 && got != n:
			t.Errorf("groups of 3,000 users released in %d of %d windows", got, n)
		case math.Abs(float64(got)-float64(n)*pr) > 4.5*sd+1e-9:
			t.Errorf("groups of %d users released %d of %d, derivation %.4f (±%.1f)", s.users, got, n, pr, 4.5*sd)
		}
	}
}
