package pipeline_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// viewBoundRaiseK runs (issue 28 item 2): minute windows under
// contribution.max_windows_per_user = baseK over 6-minute budget periods,
// and devices3, the devices histogram in 3-minute windows of its own with
// histograms[].max_windows_per_user = 1. User u's desktop event of minute 0
// is admitted to devices3's [0, 3m); minutes 0–2 and [0, 3m) are released.
// Then u's desktop event of minute 3 — preceded in its partition, when
// withV, by an event of another user v of minute 3 — is dropped on arrival
// by devices3's bound (u has its 1 window of that size) and, with baseK 1,
// by the base bound too; minute 3 is released and the stage soft-stopped.
// The restart raises devices3's bound to k2 inside its open window
// [3m, 6m), which then closes. It returns devices3's release of [3m, 6m):
// [mobile, desktop], where everyone but u is mobile.
func viewBoundRaiseK(t *testing.T, withV bool, baseK, k2 int) []float64 {
	h := e2e.New(t)
	// rdp_epsilon fixes each unit's noise (near-noiseless), and the budget
	// leaves room for both configurations' reservations.
	mk := func(kView int) *config.Config {
		cfg := h.ConfigWith("mechanism: gaussian\n  rdp_epsilon: 1e6", 1e9)
		cfg.Contribution.MaxWindowsPerUser = baseK
		cfg.Contribution.MaxTrackedUsers = 0
		cfg.Privacy.Budget.Period = config.Duration(6 * time.Minute)
		dev := cfg.Histograms[slices.IndexFunc(cfg.Histograms, func(h config.Histogram) bool { return h.Name == "devices" })]
		dev.Name, dev.Window, dev.MaxWindowsPerUser = "devices3", config.Duration(3*time.Minute), kView
		cfg.Histograms = append(cfg.Histograms, dev)
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	at := func(d time.Duration) time.Time { return e2e.Base.Add(d) }
	ev := func(user string, d time.Duration, device string) e2e.Event {
		return e2e.Event{User: user, At: at(d), Page: "home", Country: "FR", Device: device}
	}
	u0, u1 := ev("u", time.Second, "desktop"), ev("u", 3*time.Minute+10*time.Second, "desktop")
	v1 := ev("v", 3*time.Minute+5*time.Second, "mobile")
	f1, f2, f3 := ev("f", 3*time.Minute+30*time.Second, "mobile"), ev("f", 4*time.Minute+30*time.Second, "mobile"), ev("f", 6*time.Minute+30*time.Second, "mobile")
	g := ev("g", 4*time.Minute+40*time.Second, "mobile")
	perWindow := len(e2e.Groups) + 1 // pages per group, devices

	run := h.Start(mk(1))
	h.ProduceTo(0, []e2e.Event{u0})
	h.ProduceTo(1, []e2e.Event{f1}) // closes minutes 0–2 and [0, 3m) (partition 0 goes idle)
	h.ReadOutput(3*perWindow+1, 60*time.Second, 0)
	second := []e2e.Event{u1}
	if withV {
		second = []e2e.Event{v1, u1}
	}
	h.ProduceTo(0, second)
	waitDrop(t, run, "bound_windows", 1, 30*time.Second)
	h.ProduceTo(1, []e2e.Event{f2}) // closes minute 3: its offsets may be committed
	h.ReadOutput(4*perWindow+1, 60*time.Second, 0)
	run.Stop(t)

	run = h.Start(mk(k2))
	// g makes partition 0 deliver in this run too; f3 closes minutes 4–5
	// and [3m, 6m).
	h.ProduceTo(0, []e2e.Event{g})
	h.ProduceTo(1, []e2e.Event{f3})
	out := h.ReadOutput(6*perWindow+2, 60*time.Second, time.Second)
	run.Stop(t)
	for _, r := range out.Releases {
		if r.Histogram == "devices3" && r.WindowStart == at(3*time.Minute).Format(time.RFC3339) {
			return r.Probabilities
		}
	}
	t.Fatalf("no devices3 release of [3m, 6m) in %d releases", len(out.Releases))
	return nil
}

// TestViewBoundRaiseRereadsTheOpenViewWindow (issue 28 item 2): whether
// u's minute-3 event counts in devices3's open window [3m, 6m) after a
// restart that raised devices3's max_windows_per_user must depend on u's
// events alone (ground rule 7). The stage drops it on arrival (u has its K
// = 1 window of 3 minutes). Its offset used to be held only until its base
// window (minute 3) was released, so the commit passed it unless an
// earlier event of another user (v, counted into [3m, 6m)) still held the
// partition's commit point back: after the raise to K = 2 the release of
// [3m, 6m) was [1, 0] without v (u's event not re-read) and [0.75, 0.25]
// with v (re-read and admitted). An event's offset is now held until the
// window of every size it belongs to is released, whether a bound dropped
// it there or not (consume/windows.go), so a restart re-reads every event
// of every open window. Without the raise u's event never counts (the
// control: it is re-read and dropped again).
func TestViewBoundRaiseRereadsTheOpenViewWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		baseK, k2 int
		counted   bool // u's event counts after the restart
	}{
		{6, 2, true}, // the view's bound only dropped it
		{1, 2, true}, // the base bound dropped it too (nothing of it counted)
		{6, 1, false},
	} {
		t.Run(fmt.Sprintf("baseK_%d_view_K_1_to_%d", tc.baseK, tc.k2), func(t *testing.T) {
			var without, with []float64
			t.Run("without_v", func(t *testing.T) { without = viewBoundRaiseK(t, false, tc.baseK, tc.k2) })
			t.Run("with_v", func(t *testing.T) { with = viewBoundRaiseK(t, true, tc.baseK, tc.k2) })
			if without == nil || with == nil {
				t.Fatal("a run failed")
			}
			t.Logf("devices3 [3m, 6m) [mobile, desktop]: without v %.3f, with v %.3f", without, with)
			counted := func(p []float64) bool { return p[1] > 0.1 } // u is the only desktop user
			if counted(without) != counted(with) {
				t.Errorf("devices3 [3m, 6m) is %.3f without user v and %.3f with v: whether u's event counts depends on another user's event (rule 7)", without, with)
			}
			if counted(without) != tc.counted || counted(with) != tc.counted {
				t.Errorf("u's event counted: %v without v, %v with v; want %v", counted(without), counted(with), tc.counted)
			}
		})
	}
}
