package pipeline_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// Config changes mid-period against ground rule 7 (found by the review of
// issue #13; each test failed on the code before its fix).

// waitDrop waits until the stage counted at least n drops of reason.
func waitDrop(t *testing.T, run *e2e.Running, reason string, n int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if run.Stage.Stats().Dropped()[reason] >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %d %s drops within %s: %v", n, reason, timeout, run.Stage.Stats().Dropped())
}

// windowBoundRaiseK runs: K = 1, user u in window 0 (admitted, released),
// then u's event of window 1 (dropped on arrival: u has K closed windows)
// — preceded, when withV, by an event of another user v of window 1 in the
// same partition — then a soft stop, then a restart with K = 2 (a config
// change the design supports mid-period: a new reservation) and window 1
// closed. It returns window 1's pages/US release (u's group; v is in DE).
func windowBoundRaiseK(t *testing.T, withV bool, k2 int) []float64 {
	h := e2e.New(t)
	// rdp_epsilon fixes each unit's noise (near-noiseless), and the budget
	// leaves room for both configurations' reservations.
	cfg := h.ConfigWith("mechanism: gaussian\n  rdp_epsilon: 1e6", 1e9)
	cfg.Contribution.MaxWindowsPerUser = 1
	cfg.Contribution.MaxTrackedUsers = 0
	cfg.Privacy.Budget.Period = config.Duration(3 * time.Minute)
	perWindow := len(e2e.Groups) + 1

	u0 := e2e.Event{User: "u", At: e2e.Base.Add(time.Second), Page: "home", Country: "US", Device: "mobile"}
	u1 := e2e.Event{User: "u", At: e2e.Base.Add(time.Minute + 10*time.Second), Page: "home", Country: "US", Device: "mobile"}
	v1 := e2e.Event{User: "v", At: e2e.Base.Add(time.Minute + 5*time.Second), Page: "cart", Country: "DE", Device: "desktop"}
	f1 := e2e.Event{User: "f", At: e2e.Base.Add(time.Minute + 30*time.Second), Page: "search", Country: "FR", Device: "desktop"}
	f2 := e2e.Event{User: "f", At: e2e.Base.Add(2*time.Minute + 30*time.Second), Page: "search", Country: "FR", Device: "desktop"}

	run := h.Start(cfg)
	h.ProduceTo(0, []e2e.Event{u0})
	// w (US, search) is in u's group of window 1 in both runs; f1 closes
	// window 0 (partition 0 goes idle).
	w1 := e2e.Event{User: "w", At: e2e.Base.Add(time.Minute + 20*time.Second), Page: "search", Country: "US", Device: "mobile"}
	h.ProduceTo(1, []e2e.Event{w1, f1})
	h.ReadOutput(perWindow, 60*time.Second, 0)
	second := []e2e.Event{u1}
	if withV {
		second = []e2e.Event{v1, u1}
	}
	h.ProduceTo(0, second)
	waitDrop(t, run, "bound_windows", 1, 30*time.Second)
	run.Stop(t)

	cfg2 := *cfg
	cfg2.Contribution.MaxWindowsPerUser = k2
	run = h.Start(&cfg2)
	// g (another user, window 2) makes partition 0 deliver in this run
	// too; f2 closes window 1.
	h.ProduceTo(0, []e2e.Event{{User: "g", At: e2e.Base.Add(2*time.Minute + 20*time.Second), Page: "cart", Country: "FR", Device: "mobile"}})
	h.ProduceTo(1, []e2e.Event{f2})
	out := h.ReadOutput(2*perWindow, 20*time.Second, time.Second)
	run.Stop(t)
	for _, r := range out.Releases {
		if r.Histogram == "pages" && r.Group == "US" && r.WindowStart == e2e.Base.Add(time.Minute).Format(time.RFC3339) {
			return r.Probabilities
		}
	}
	t.Fatalf("no pages/US release of window 1 in %d releases", len(out.Releases))
	return nil
}

// TestWindowBoundDropHeldUntilItsWindowIsReleased: whether u's
// event of window 1 counts must depend on u's events alone (ground rule 7).
// The stage drops it on arrival (u has K = 1 closed windows). It used to
// mark its offset processed at once, so the offset commit passed it unless
// an earlier event of another user in the same partition was still held
// for an open window; after a restart with max_windows_per_user raised to
// 2 (or 0), u's event counted if another user's event (v's, in window 1,
// before it in the partition) held the commit back, and was lost
// otherwise. The drop's offset is now held until its window is released
// (pipeline/consume.go). The pages/US release of window 1 (u's group only)
// must be the same with and without v.
func TestWindowBoundDropHeldUntilItsWindowIsReleased(t *testing.T) {
	t.Parallel()
	for _, k2 := range []int{2, 0} {
		t.Run(fmt.Sprintf("K_1_to_%d", k2), func(t *testing.T) {
			var without, with []float64
			t.Run("without_v", func(t *testing.T) { without = windowBoundRaiseK(t, false, k2) })
			t.Run("with_v", func(t *testing.T) { with = windowBoundRaiseK(t, true, k2) })
			if without == nil || with == nil {
				t.Fatal("a run failed")
			}
			// pages bins: home, search, cart, checkout, other. Without u the
			// US group holds w's search only; with u, home and search equally.
			t.Logf("window 1 pages/US: without v %v, with v %v", without, with)
			if counted := func(p []float64) bool { return p[0] > 0.4 }; counted(without) != counted(with) {
				t.Errorf("window 1 pages/US (user u's group) is %v without user v and %v with v: whether u's event counts depends on another user's event (rule 7)",
					without, with)
			}
		})
	}
}
