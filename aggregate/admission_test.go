package aggregate

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/dpstage/stage/decode"
)

// reference: each user's admitted windows are the K earliest windows of the
// period in which it has an eligible event.
func admittedReference(eligible map[uint64][]int, k int) map[uint64][]int {
	out := map[uint64][]int{}
	for u, ws := range eligible {
		s := slices.Clone(ws)
		slices.Sort(s)
		s = slices.Compact(s)
		if len(s) > k {
			s = s[:k]
		}
		out[u] = s
	}
	return out
}

// Admissions admits each user to exactly its K earliest eligible windows,
// whatever the order in which events arrive (Admissible is asked at add time
// in a random interleaving), and a restart at any window — closed_u
// restored from the windows recorded before it — changes nothing.
func TestAdmissionsMatchDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for trial := 0; trial < 300; trial++ {
		k := 1 + r.IntN(6)
		windows := 1 + r.IntN(30)
		users := 1 + r.IntN(40)
		// eligible[u] = windows with an eligible event of u; events[w] =
		// the users with an event in w (with repeats: several events).
		eligible := map[uint64][]int{}
		events := make([][]uint64, windows)
		for u := 0; u < users; u++ {
			uh := r.Uint64()
			for w := 0; w < windows; w++ {
				if r.IntN(3) == 0 {
					eligible[uh] = append(eligible[uh], w)
					for n := 1 + r.IntN(3); n > 0; n-- {
						events[w] = append(events[w], uh)
					}
				}
			}
		}
		want := admittedReference(eligible, k)
		restartAt := r.IntN(windows + 1)
		a, _ := NewAdmissions(k)
		got := map[uint64][]int{}
		recorded := map[uint64]uint16{} // what the ledger would hold
		const period = 7
		// Events of later windows arrive early (up to 3 windows ahead,
		// before the earlier windows close), in random order: a user can be
		// tentatively present in several open windows at once.
		added := make([]int, windows) // events of w added so far
		present := make([][]uint64, windows)
		seen := make([]map[uint64]bool, windows)
		for w := range seen {
			seen[w] = map[uint64]bool{}
		}
		add := func(w int) {
			u := events[w][added[w]]
			added[w]++
			if !a.Admissible(u, period) {
				if slices.Contains(want[u], w) {
					t.Fatalf("trial %d: user %x refused at add time in window %d it is admitted to", trial, u, w)
				}
				return
			}
			if !seen[w][u] {
				seen[w][u] = true
				present[w] = append(present[w], u)
			}
		}
		for w := 0; w < windows; w++ {
			if w == restartAt {
				// A restart: the open windows' state is lost and re-read.
				a, _ = NewAdmissions(k)
				a.Restore(period, recorded)
				for v := w; v < windows; v++ {
					added[v], present[v], seen[v] = 0, nil, map[uint64]bool{}
				}
			}
			for v := w + 1; v < min(w+4, windows); v++ {
				for n := r.IntN(len(events[v]) - added[v] + 1); n > 0; n-- {
					add(v)
				}
			}
			for added[w] < len(events[w]) {
				add(w)
			}
			for _, u := range a.Close(period, present[w]) {
				got[u] = append(got[u], w)
				recorded[u]++
			}
		}
		for u, ws := range want {
			if !slices.Equal(got[u], ws) {
				t.Fatalf("trial %d (k=%d, restart at %d): user %x admitted to %v, want %v", trial, k, restartAt, u, got[u], ws)
			}
		}
		for u, ws := range got {
			if len(ws) > k {
				t.Fatalf("user %x admitted to %d > k=%d windows", u, len(ws), k)
			}
		}
	}
}

func TestAdmissionsPeriodsAreApart(t *testing.T) {
	a, _ := NewAdmissions(1)
	if got := a.Close(1, []uint64{5}); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("first window of period 1: %v", got)
	}
	if a.Admissible(5, 1) || a.Close(1, []uint64{5}) != nil && len(a.Close(1, []uint64{5})) != 0 {
		t.Errorf("user 5 admitted twice in period 1 with k = 1")
	}
	if !a.Admissible(5, 2) {
		t.Errorf("a new period must start afresh")
	}
	a.Forget(2)
	if a.Closed(5, 1) != 0 || a.Users() != 0 {
		t.Errorf("Forget(2) kept period 1")
	}
	if _, err := NewAdmissions(0); err == nil {
		t.Errorf("k = 0 accepted")
	}
}

// Memory per (user, period) entry, reported for the README.
func TestAdmissionsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~100 MB")
	}
	const n = 1_000_000
	users := make([]uint64, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range users {
		users[i] = r.Uint64()
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	a, _ := NewAdmissions(5)
	a.Close(0, users)
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("admission state: %.1f bytes per (user, period) at %d users", per, n)
	if a.Users() != n {
		t.Fatalf("%d entries, want %d", a.Users(), n)
	}
	if per > 100 {
		t.Errorf("%.1f bytes per user: more than expected of a map entry of 10 bytes", per)
	}
	runtime.KeepAlive(a)
}

// CloseAdmitted counts a user's events in exactly its K earliest eligible
// windows of the period, with events of later windows arriving while
// earlier ones are open (so a user is tentatively present in windows it is
// not admitted to), and accounts for every part: counted, dropped on
// arrival (not Admissible) or not admitted at the close.
func TestCloseAdmittedCountsKEarliest(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for trial := 0; trial < 100; trial++ {
		k := 1 + r.IntN(4)
		windows := 2 + r.IntN(10)
		users := 1 + r.IntN(30)
		s := testSpec()
		s.MaxEventsPerUser, s.MaxGroupsPerUser, s.MaxTrackedUsers = 8, 3, 0
		agg := mustNew(t, s)
		adm, _ := NewAdmissions(k)
		const size = 60_000
		type ev struct {
			user                  uint64
			page, country, device int32
		}
		events := make([][]ev, windows)
		eligible := map[uint64][]int{}
		for u := 0; u < users; u++ {
			uh := r.Uint64() | 1
			for w := 0; w < windows; w++ {
				if r.IntN(2) == 0 {
					continue
				}
				eligible[uh] = append(eligible[uh], w)
				for n := 1 + r.IntN(3); n > 0; n-- {
					events[w] = append(events[w], ev{uh, int32(r.IntN(5)), int32(r.IntN(3)), int32(r.IntN(2))})
				}
			}
		}
		admitted := admittedReference(eligible, k)
		// want[w]: the counts of the events of users admitted to w.
		want := make([][]float64, windows)
		for w := range windows {
			want[w] = make([]float64, 3*5+2)
			for _, e := range events[w] {
				if slices.Contains(admitted[e.user], w) {
					want[w][int(e.country)*5+int(e.page)]++
					want[w][15+int(e.device)]++
				}
			}
		}
		added := make([]int, windows)
		var droppedAtAdd, counted, notAdmitted int64
		add := func(w int) {
			e := events[w][added[w]]
			added[w]++
			if !adm.Admissible(e.user, 0) {
				droppedAtAdd += 2
				return
			}
			o := agg.Add(int64(w)*size, event(e.user, e.page, e.country, e.device))
			counted += int64(o.Counted)
		}
		total := int64(0)
		for w := range windows {
			total += 2 * int64(len(events[w]))
			for v := w + 1; v < min(w+3, windows); v++ {
				for n := r.IntN(len(events[v]) - added[v] + 1); n > 0; n-- {
					add(v)
				}
			}
			for added[w] < len(events[w]) {
				add(w)
			}
			var in []uint64
			wc, err := agg.CloseAdmitted(int64(w)*size, func(u uint64) bool {
				ok := adm.Admit(0, u)
				if ok {
					in = append(in, u)
				}
				return ok
			})
			if err != nil {
				t.Fatal(err)
			}
			notAdmitted += wc.NotAdmitted()
			if by := wc.NotAdmittedBy(0) + wc.NotAdmittedBy(1); by != wc.NotAdmitted() {
				t.Fatalf("trial %d window %d: not admitted per histogram %d + %d, want %d", trial, w, wc.NotAdmittedBy(0), wc.NotAdmittedBy(1), wc.NotAdmitted())
			}
			var got []float64
			for g := range 3 {
				got = append(got, wc.Counts(0, g, make([]float64, 5))...)
			}
			got = append(got, wc.Counts(1, 0, make([]float64, 2))...)
			var t0, t1 float64
			for i, x := range want[w] {
				if i < 15 {
					t0 += x
				} else {
					t1 += x
				}
			}
			if float64(wc.Total(0)) != t0 || float64(wc.Total(1)) != t1 {
				t.Fatalf("trial %d window %d: totals %d, %d, want %v, %v", trial, w, wc.Total(0), wc.Total(1), t0, t1)
			}
			wc.Release()
			if !slices.Equal(got, want[w]) {
				t.Fatalf("trial %d (k=%d) window %d: counts %v, want %v", trial, k, w, got, want[w])
			}
			slices.Sort(in)
			var wantIn []uint64
			for u, ws := range admitted {
				if slices.Contains(ws, w) {
					wantIn = append(wantIn, u)
				}
			}
			slices.Sort(wantIn)
			if !slices.Equal(in, wantIn) {
				t.Fatalf("trial %d window %d: admitted %x, want %x", trial, w, in, wantIn)
			}
		}
		if counted+droppedAtAdd != total {
			t.Fatalf("trial %d: counted %d + dropped on arrival %d != %d parts", trial, counted, droppedAtAdd, total)
		}
		var sum float64
		for _, c := range want {
			for _, x := range c {
				sum += x
			}
		}
		if float64(counted-notAdmitted) != sum {
			t.Fatalf("trial %d: counted %d − not admitted %d != %v counted in windows", trial, counted, notAdmitted, sum)
		}
	}
}

// The per-event cost of the cross-window bound on the add path (one
// Admissible call), with 10⁵ users admitted in the period.
func BenchmarkAdmissible(b *testing.B) {
	a, _ := NewAdmissions(5)
	r := rand.New(rand.NewPCG(5, 6))
	users := make([]uint64, 100_000)
	for i := range users {
		users[i] = r.Uint64()
	}
	a.Close(0, users)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if !a.Admissible(users[i%len(users)], 0) {
			b.Fatal("not admissible")
		}
	}
}

// The deferred Averager's window under the cross-window bound is the padded
// average of the Users smallest hashes among the users admitted to the
// window — the same as a plain Averager fed only the admitted users'
// vectors — although users arrive early in windows they turn out not to be
// admitted to.
func TestDeferredAveragerAdmitted(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for trial := 0; trial < 200; trial++ {
		k, windows, users, capUsers, bins := 1+r.IntN(3), 2+r.IntN(6), 1+r.IntN(12), 1+r.IntN(5), 3
		hists := []AverageHist{{Index: 0, Name: "h", Bins: bins, Users: capUsers}}
		avg, err := NewDeferredAverager(hists)
		if err != nil {
			t.Fatal(err)
		}
		adm, _ := NewAdmissions(k)
		events := make([][]avgEvent, windows)
		eligible := map[uint64][]int{}
		for u := 0; u < users; u++ {
			uh := r.Uint64() | 1
			for w := range windows {
				if r.IntN(2) == 0 {
					eligible[uh] = append(eligible[uh], w)
					for n := 1 + r.IntN(2); n > 0; n-- {
						events[w] = append(events[w], avgEvent{uh, randVec(r, bins)})
					}
				}
			}
		}
		admitted := admittedReference(eligible, k)
		ev := &decode.Event{Vectors: [][]float64{nil}, Drops: []decode.Reason{decode.ReasonNone}}
		added := make([]int, windows)
		add := func(w int) {
			e := events[w][added[w]]
			added[w]++
			if adm.Admissible(e.user, 0) {
				ev.User, ev.Vectors[0] = e.user, e.vec
				avg.Add(int64(w), ev)
			}
		}
		for w := range windows {
			for v := w + 1; v < min(w+3, windows); v++ {
				for n := r.IntN(len(events[v]) - added[v] + 1); n > 0; n-- {
					add(v)
				}
			}
			for added[w] < len(events[w]) {
				add(w)
			}
			decided := map[uint64]bool{}
			aw, err := avg.CloseAdmitted(int64(w), func(u uint64) bool {
				ok, seen := decided[u]
				if !seen {
					ok = adm.Admit(0, u)
					decided[u] = ok
				}
				return ok
			})
			if err != nil {
				t.Fatal(err)
			}
			if aw.NotAdmittedBy(0) != aw.NotAdmitted() {
				t.Fatalf("trial %d window %d: not admitted by histogram 0: %d, want %d", trial, w, aw.NotAdmittedBy(0), aw.NotAdmitted())
			}
			got := aw.Mean(0, make([]float64, bins))
			var in []avgEvent
			for _, e := range events[w] {
				if slices.Contains(admitted[e.user], w) {
					in = append(in, e)
				}
			}
			want, _ := padded(t, capUsers, bins, in)
			if l1(got, want) > 1e-12 {
				t.Fatalf("trial %d (k=%d, cap %d) window %d: mean %v, want %v", trial, k, capUsers, w, got, want)
			}
		}
	}
	if _, err := NewAverager([]AverageHist{{Index: 0, Name: "h", Bins: 2, Users: 1}}); err != nil {
		t.Fatal(err)
	}
}
