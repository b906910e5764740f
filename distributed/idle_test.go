package distributed_test

import (
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/partial"
	"github.com/dpstage/stage/release"
)

// TestDistEventModeIdlePartition: window.watermark event, 4 input
// partitions, idle timeout 1s. Partition 3 has no events at first: it is
// idle and must not hold releases (before partial.Idle it held every
// release forever: the review of issue 14).
//
//  1. Windows 0–4 of users of partitions 0–2. Their own watermarks pass
//     windows 0–2; after 1 s of silence they turn idle too, emitting their
//     windows up to that of their latest event: with every partition idle,
//     windows 0–4 are released, each exactly the bounded truth.
//  2. An event of u3 (partition 3) for the released window 1: partition 3
//     is active, counts it, turns idle again and emits window 1 — late at
//     the releaser: not released (counted in LatePartialCounts), and
//     window 1 is not released twice.
//  3. An event of u3 for window 6, and, once the releaser sees partition 3
//     active, windows 6 and 7 of the others, whose watermarks pass window
//     6 at once: window 6 waits for partition 3 (active again, it holds
//     windows) and is released with u3's event.
func TestDistEventModeIdlePartition(t *testing.T) {
	t.Parallel()
	const size, lateness = 2 * time.Second, 300 * time.Millisecond
	h := e2e.New(t)
	cfg := distRunConfig(t, h, size, lateness)
	cfg.Window.Watermark = config.WatermarkEvent
	cfg.Window.IdlePartitionTimeout = config.Duration(time.Second)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	const n, quiet = 4, 3
	var users []string
	seen := map[int]bool{}
	u3 := ""
	for i := 0; len(users) < 20 || len(seen) < quiet || u3 == ""; i++ {
		u := "user" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if p := e2e.Murmur2Partition(u, n); p != quiet {
			users, seen[p] = append(users, u), true
		} else if u3 == "" {
			u3 = u
		}
	}
	s := h.Start(cfg)
	st := s.Stage.Stats()
	time.Sleep(2 * time.Second) // the groups settle
	base := time.Now().Truncate(size).Add(size)
	at := func(w int, i int) time.Time {
		return base.Add(time.Duration(w)*size + time.Duration(i)*time.Millisecond)
	}
	ev := func(u string, w, i int) e2e.Event {
		return e2e.Event{User: u, At: at(w, i), Page: e2e.Pages[i%len(e2e.Pages)], Country: e2e.Groups[i%len(e2e.Groups)], Device: e2e.Devices[0]}
	}
	windows := func(from, to int) []e2e.Event {
		var evs []e2e.Event
		for w := from; w <= to; w++ {
			for i, u := range users {
				evs = append(evs, ev(u, w, i))
			}
		}
		return evs
	}
	check := func(out e2e.Output, evs []e2e.Event, from, to int) {
		t.Helper()
		tr := e2e.ComputeTruthIn(evs, size, 1, 1, 0)
		got := map[string]release.Release{}
		for _, r := range out.Releases {
			got[e2e.ReleaseKey(r)] = r
		}
		for w := from; w <= to; w++ {
			for _, g := range append([]string{"*"}, e2e.Groups...) {
				hist := "pages"
				if g == "*" {
					hist = "devices"
				}
				k := e2e.Key(hist, g, at(w, 0))
				if r, ok := got[k]; !ok {
					t.Errorf("missing release %s", k)
				} else {
					e2e.CheckExact(t, k, r, tr[k])
				}
			}
		}
	}
	idle := func(want int64) {
		t.Helper()
		e2e.WaitFor(t, "the releaser sees the idle partitions", 20*time.Second, func() bool { return st.PartitionsIdle.Load() == want })
	}

	// 1. Windows 0–4, partition 3 silent.
	first := windows(0, 4)
	produceKeyed(t, h, first)
	released := func(w int) func() bool {
		return func() bool {
			k := e2e.Key("devices", "*", at(w, 0))
			for _, r := range e2e.ReadOutput(t, h.Broker.Addr(), h.Output(), 0, time.Second, time.Second).Releases {
				if e2e.ReleaseKey(r) == k {
					return true
				}
			}
			return false
		}
	}
	e2e.WaitFor(t, "window 4 released with every partition idle", 30*time.Second, released(4))
	idle(n)

	// 2. A late event on partition 3.
	produceKeyed(t, h, []e2e.Event{ev(u3, 1, 1)})
	e2e.WaitFor(t, "partition 3's late partial", 20*time.Second, func() bool { return st.LatePartialCounts.Load() > 0 })
	if got := st.LatePartialCounts.Load(); got != 2 { // pages and devices
		t.Errorf("late partial contributions %d, want 2", got)
	}
	if st.Partials[partial.Late].Load() == 0 {
		t.Error("no partial counted late")
	}
	idle(n)

	// 3. Partition 3 active again holds window 6.
	produceKeyed(t, h, []e2e.Event{ev(u3, 6, 2)})
	idle(n - 1)
	produceKeyed(t, h, windows(6, 7))
	e2e.WaitFor(t, "window 7 released", 30*time.Second, released(7))

	out := h.ReadOutput(0, 2*time.Second, 2*time.Second)
	check(out, first, 0, 4)
	check(out, append(windows(6, 7), ev(u3, 6, 2)), 5, 7) // window 5: no events
	for id, copies := range out.Raw {
		if len(copies) != 1 {
			t.Errorf("release %s published %d times", id, len(copies))
		}
	}
	if late := st.Late.Load(); late != 0 {
		t.Errorf("%d events late at the bounders, want 0", late)
	}
}
