package pipeline_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/plan"
)

// skipUnlessAccounted skips a test of contribution.max_windows_per_user
// while plan.DerivePlan still refuses it ("not accounted by this build
// yet": the accounting lands separately from the enforcement).
func skipUnlessAccounted(t *testing.T, cfg *config.Config) {
	t.Helper()
	if _, err := plan.DerivePlan(cfg); err != nil {
		t.Skipf("plan.DerivePlan refuses contribution.max_windows_per_user (%v): enable with the K-window accounting", err)
	}
}

// windowBoundEvents: users u0..u11 over windows 0..6 (one minute each from
// e2e.Base), present in about three windows of four, some with a second
// event in a window (max_events_per_user 1 keeps one by its hash).
func windowBoundEvents() []e2e.Event {
	var evs []e2e.Event
	for w := range 7 {
		for i := range 12 {
			if (i*5+w*3)%4 == 0 {
				continue
			}
			at := e2e.Base.Add(time.Duration(w)*time.Minute + time.Duration(i+1)*time.Second)
			user := fmt.Sprintf("u%d", i)
			e := e2e.Event{User: user, At: at, Page: e2e.Pages[(i+w)%5], Country: e2e.Groups[i%2], Device: e2e.Devices[(i*i+w)%2]}
			evs = append(evs, e)
			if (i+w)%3 == 0 {
				e.At, e.Page = e.At.Add(time.Millisecond), e2e.Pages[(i+2*w+1)%5]
				evs = append(evs, e)
			}
		}
	}
	return evs
}

// admittedEvents keeps, per user and budget period, the events of the k
// earliest windows in which the user has an event: the definition of
// contribution.max_windows_per_user, worked out from the event set alone.
func admittedEvents(evs []e2e.Event, size, period time.Duration, k int) []e2e.Event {
	type up struct {
		user string
		p    time.Time
	}
	windows := map[up][]time.Time{}
	for _, e := range evs {
		key := up{e.User, e.At.Truncate(period)}
		if w := e.At.Truncate(size); !slices.ContainsFunc(windows[key], w.Equal) {
			windows[key] = append(windows[key], w)
		}
	}
	var out []e2e.Event
	for _, e := range evs {
		ws := windows[up{e.User, e.At.Truncate(period)}]
		slices.SortFunc(ws, func(a, b time.Time) int { return a.Compare(b) })
		if i := slices.IndexFunc(ws, e.At.Truncate(size).Equal); i < k {
			out = append(out, e)
		}
	}
	return out
}

// TestEndToEndWindowBound: with contribution.max_windows_per_user = 2 and
// 3-minute budget periods, every user's events count in exactly its 2
// earliest windows of each period — through the broker, with exact
// releases (near-noiseless Gaussian) compared with the truth worked out
// from the event set alone — also across a restart in the middle of a
// period (the admissions of the windows released before it come back from
// the ledger). Events of later windows arrive while earlier ones are open,
// so users are tentatively present in windows they turn out not to be
// admitted to.
func TestEndToEndWindowBound(t *testing.T) {
	const k = 2
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	cfg.Contribution.MaxWindowsPerUser = k
	cfg.Contribution.MaxTrackedUsers = 0
	cfg.Privacy.Budget.Period = config.Duration(3 * time.Minute)
	skipUnlessAccounted(t, cfg)

	evs := windowBoundEvents()
	first, second := []e2e.Event{}, []e2e.Event{}
	for _, e := range evs {
		if e.At.Before(e2e.Base.Add(4 * time.Minute)) {
			first = append(first, e)
		} else {
			second = append(second, e)
		}
	}
	// The flush events count too (user "flush"): one in window 4, one in
	// window 7 (not released here).
	flush1 := e2e.Event{User: "flush", At: e2e.Base.Add(4*time.Minute + 30*time.Second), Page: "home", Country: "US", Device: "mobile"}
	flush2 := e2e.Event{User: "flush", At: e2e.Base.Add(7*time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"}
	all := append(append([]e2e.Event{}, evs...), flush1, flush2)
	tr := e2e.ComputeTruth(admittedEvents(all, time.Minute, 3*time.Minute, k))
	unbounded := e2e.ComputeTruth(all)
	perWindow := len(e2e.Groups) + 1

	// Windows 0–3, then a restart in the middle of the period of windows
	// 3–5, then windows 4–6.
	run := h.Start(cfg)
	h.ProduceEvents(first)
	h.Produce(flush1.Message(false))
	h.ReadOutput(4*perWindow, 60*time.Second, 0)
	run.Stop(t)
	run = h.Start(cfg)
	h.ProduceEvents(second)
	h.Produce(flush2.Message(false))
	out := h.ReadOutput(7*perWindow, 60*time.Second, time.Second)
	if len(out.Releases) != 7*perWindow {
		t.Fatalf("got %d releases, want %d", len(out.Releases), 7*perWindow)
	}
	differs := 0
	for _, r := range out.Releases {
		key := e2e.ReleaseKey(r)
		e2e.CheckExact(t, key, r, tr[key])
		if !slices.Equal(tr[key], unbounded[key]) {
			differs++
		}
	}
	if differs == 0 {
		t.Fatalf("the bound changes no release: the stream does not test it")
	}
	if d := run.Stage.Stats().Dropped(); d["bound_windows"] == 0 {
		t.Errorf("no bound_windows drops counted in the second run: %v", d)
	}
}
