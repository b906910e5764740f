package pipeline_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dpstage/stage/internal/e2e"
)

// TestEndToEndSelectionIndependentOfInterleaving: which users and which of
// their events count does not depend on how the input partitions interleave.
// Every user has three events on partition 0 (US, mobile) and three on
// partition 1 (DE, desktop), with max_events_per_user 2,
// max_groups_per_user 1 and a cap of 40 of the 60 users. One run has the
// stage read all of partition 0 before partition 1 is even written, the
// other the reverse; both must release (near-noiseless Gaussian, exact
// counts: σ ≈ 0.02 at this ε, P[|Z| ≥ 1] < 1e-1000) exactly the
// order-independent selection worked out from the event set alone — the 40
// smallest user hashes, each user's group and events ranked by their keyed
// hashes (computeTruthWith). Arrival order ("first events of a user", "first
// users of a window") would give the US side to one run and the DE side to
// the other.
func TestEndToEndSelectionIndependentOfInterleaving(t *testing.T) {
	t.Parallel()
	const users, capUsers = 60, 40
	var side [2][]e2e.Event
	for u := range users {
		user := fmt.Sprintf("u%d", u)
		at := e2e.Base.Add(time.Duration(u) * 500 * time.Millisecond)
		for k, page := range []string{"home", "search", "cart"} {
			side[0] = append(side[0], e2e.Event{User: user, At: at.Add(time.Duration(k) * time.Millisecond), Page: page, Country: "US", Device: "mobile"})
		}
		for k, page := range []string{"cart", "checkout", "pricing"} { // pricing: the overflow bin
			side[1] = append(side[1], e2e.Event{User: user, At: at.Add(time.Duration(10+k) * time.Millisecond), Page: page, Country: "DE", Device: "desktop"})
		}
	}
	tr := e2e.ComputeTruthWith(append(append([]e2e.Event{}, side[0]...), side[1]...), 2, 1, capUsers)
	// The truth takes both sides (else the test could not tell the orders
	// apart).
	if tr[e2e.Key("pages", "US", e2e.Base)] == nil || tr[e2e.Key("pages", "DE", e2e.Base)] == nil {
		t.Fatalf("the truth selects one side only: %v", tr)
	}
	for _, first := range []int{0, 1} {
		t.Run(fmt.Sprintf("partition %d first", first), func(t *testing.T) {
			h := e2e.New(t)
			cfg := h.Config("gaussian", 1e7)
			cfg.Contribution.MaxEventsPerUser = 2
			cfg.Contribution.MaxGroupsPerUser = 1
			cfg.Contribution.MaxTrackedUsers = capUsers
			run := h.Start(cfg)
			st := run.Stage.Stats()
			h.ProduceTo(first, side[first])
			e2e.WaitFor(t, "the condition", 30*time.Second, func() bool { return st.Consumed.Load() >= int64(len(side[first])) })
			h.ProduceTo(1-first, side[1-first])
			e2e.WaitFor(t, "the condition", 30*time.Second, func() bool { return st.Consumed.Load() >= int64(users*6) })
			h.ProduceTo(0, []e2e.Event{{User: "flush", At: e2e.Base.Add(time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"}})
			h.ProduceTo(1, []e2e.Event{{User: "flush", At: e2e.Base.Add(time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"}})
			out := h.ReadOutput(len(e2e.Groups)+1, 60*time.Second, time.Second)
			if len(out.Releases) != len(e2e.Groups)+1 {
				t.Fatalf("got %d releases, want %d", len(out.Releases), len(e2e.Groups)+1)
			}
			for _, r := range out.Releases {
				ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
				k := e2e.Key(r.Histogram, r.Group, ws)
				e2e.CheckExact(t, k, r, tr[k])
			}
			// Every part counted on arrival and later displaced is said so:
			// what remains is 2 parts per histogram for each tracked user,
			// and the flush user's 4 parts in window 1 (two identical events,
			// both within max_events_per_user 2).
			d := st.Dropped()
			if n := st.Counted.Load() - d["bound_displaced"]; n != 2*2*capUsers+4 {
				t.Errorf("counted %d − displaced %d = %d, want %d", st.Counted.Load(), d["bound_displaced"], n, 2*2*capUsers+4)
			}
		})
	}
}
