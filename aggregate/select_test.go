package aggregate

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dpstage/stage/decode"
)

// tev is one test event: a user hash, a time, and per histogram a (bin,
// group) or -1.
type tev struct {
	user   uint64
	t      int64
	bins   []int32
	groups []int32
}

func (e tev) event() *decode.Event {
	return &decode.Event{User: e.user, TimeMs: e.t, Bins: slices.Clone(e.bins), Groups: slices.Clone(e.groups)}
}

// reference computes one window's counts by the definition in the package
// doc, from the set of events alone (no incremental state): the K smallest
// user keys among users with a part; per (user, histogram) the G first
// groups by (GroupHash, group), then the m first parts in them by
// (EventHash, group, bin).
func reference(s Spec, evs []tev) [][][]int64 {
	type part struct{ g, b int }
	users := map[uint64][][]part{} // key → per histogram its parts
	byUser := map[uint64][]tev{}
	var keys []uint64
	for _, e := range evs {
		key := max(e.user, 1)
		byUser[key] = append(byUser[key], e)
		for h, hs := range s.Histograms {
			b, g := int(e.bins[h]), int(e.groups[h])
			if b < 0 || g < 0 || b >= len(hs.Bins) || g >= len(hs.Groups) {
				continue
			}
			if users[key] == nil {
				users[key] = make([][]part, len(s.Histograms))
				keys = append(keys, key)
			}
			users[key][h] = append(users[key][h], part{g, b})
		}
	}
	slices.Sort(keys)
	if s.MaxTrackedUsers > 0 && len(keys) > s.MaxTrackedUsers {
		keys = keys[:s.MaxTrackedUsers]
	}
	// The user hash that ranks parts: the event's own User (not the key).
	// Tests use users ≠ 0, so the two agree.
	out := make([][][]int64, len(s.Histograms))
	for h, hs := range s.Histograms {
		out[h] = make([][]int64, len(hs.Groups))
		for g := range out[h] {
			out[h][g] = make([]int64, len(hs.Bins))
		}
	}
	for _, key := range keys {
		for h := range s.Histograms {
			ps := users[key][h]
			if len(ps) == 0 {
				continue
			}
			var gs []int
			for _, p := range ps {
				if !slices.Contains(gs, p.g) {
					gs = append(gs, p.g)
				}
			}
			slices.SortFunc(gs, func(x, y int) int {
				return cmp.Or(cmp.Compare(GroupHash(key, h, x), GroupHash(key, h, y)), cmp.Compare(x, y))
			})
			gs = gs[:min(len(gs), s.MaxGroupsPerUser)]
			type ranked struct {
				e    uint32
				g, b int
			}
			var rs []ranked
			for _, e := range byUser[key] {
				if int(e.bins[h]) < 0 || int(e.groups[h]) < 0 {
					continue
				}
				g, b := int(e.groups[h]), int(e.bins[h])
				if b >= len(s.Histograms[h].Bins) || g >= len(s.Histograms[h].Groups) || !slices.Contains(gs, g) {
					continue
				}
				rs = append(rs, ranked{EventHash(e.user, e.t, g, b), g, b})
			}
			slices.SortFunc(rs, func(x, y ranked) int {
				return cmp.Or(cmp.Compare(x.e, y.e), cmp.Compare(x.g, y.g), cmp.Compare(x.b, y.b))
			})
			for _, r := range rs[:min(len(rs), s.MaxEventsPerUser)] {
				out[h][r.g][r.b]++
			}
		}
	}
	return out
}

// countsOf closes window 0 and returns its counts and Displaced().
func countsOf(t *testing.T, a *Aggregator) ([][][]int64, int64) {
	t.Helper()
	wc, err := a.Close(0)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Release()
	out := make([][][]int64, len(a.hists))
	for h, hs := range a.Spec().Histograms {
		for g := range hs.Groups {
			var row []int64
			for _, c := range wc.Counts(h, g, nil) {
				row = append(row, int64(c))
			}
			out[h] = append(out[h], row)
		}
	}
	return out, wc.Displaced()
}

// randomInstance draws a small random spec and event set: few users, times,
// bins and groups, so that users exceed the bounds, identical events (ties)
// occur and the cap binds.
func randomInstance(r *rand.Rand) (Spec, []tev) {
	s := Spec{
		Histograms: []HistSpec{
			{Name: "a", Bins: []string{"0", "1", "2"}, Groups: []string{"x", "y", "z", "w"}},
			{Name: "b", Bins: []string{"0", "1"}, Groups: []string{"*"}},
			{Name: "c", Bins: []string{"0", "1", "2", "3", "4"}, Groups: []string{"x", "y"}},
		},
		MaxEventsPerUser: 1 + r.IntN(3),
		MaxGroupsPerUser: 1 + r.IntN(3),
		MaxTrackedUsers:  r.IntN(8), // 0: no cap
		WindowSize:       time.Minute,
	}
	nUsers := 1 + r.IntN(12)
	users := make([]uint64, nUsers)
	for i := range users {
		users[i] = mix64(r.Uint64()) | 1
	}
	evs := make([]tev, r.IntN(60))
	for i := range evs {
		e := tev{user: users[r.IntN(nUsers)], t: int64(r.IntN(4))}
		for _, hs := range s.Histograms {
			b, g := int32(r.IntN(len(hs.Bins))), int32(r.IntN(len(hs.Groups)))
			if r.IntN(6) == 0 {
				b, g = -1, -1
			}
			e.bins, e.groups = append(e.bins, b), append(e.groups, g)
		}
		evs[i] = e
	}
	return s, evs
}

// checkAccounting checks that every part is accounted for once on arrival
// and that Counted − Displaced is what the window counts.
func checkAccounting(t *testing.T, s Spec, evs []tev, o Outcome, displaced int64, got [][][]int64) {
	t.Helper()
	parts, total := 0, int64(0)
	for _, e := range evs {
		for h, hs := range s.Histograms {
			if b, g := e.bins[h], e.groups[h]; b >= 0 && g >= 0 && int(b) < len(hs.Bins) && int(g) < len(hs.Groups) {
				parts++
			}
		}
	}
	for _, hv := range got {
		for _, gv := range hv {
			for _, c := range gv {
				total += c
			}
		}
	}
	if o.Counted+o.DroppedUserEvents+o.DroppedUserGroups+o.DroppedCapacity != parts {
		t.Errorf("outcome %+v does not account for %d parts", o, parts)
	}
	if int64(o.Counted-o.Displaced)-displaced != total {
		t.Errorf("outcome %+v, Close displaced %d: Counted − Displaced − displaced ≠ total count %d", o, displaced, total)
	}
	if o.Displaced < 0 || displaced < 0 {
		t.Errorf("negative displaced: %+v, %d", o, displaced)
	}
}

// TestSelectionMatchesDefinition: on random small instances fed in a random
// order, one goroutine, the counts are the definition's (reference) and the
// outcomes account for every part.
func TestSelectionMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for it := range 3000 {
		s, evs := randomInstance(r)
		r.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
		a := mustNew(t, s)
		var o Outcome
		for _, e := range evs {
			o.Add(a.Add(0, e.event()))
		}
		got, displaced := countsOf(t, a)
		want := reference(s, evs)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("instance %d (m=%d G=%d K=%d, %d events): counts %v, definition %v", it, s.MaxEventsPerUser, s.MaxGroupsPerUser, s.MaxTrackedUsers, len(evs), got, want)
		}
		checkAccounting(t, s, evs, o, displaced, got)
		if a.TrackedUsers() != 0 {
			t.Fatalf("tracked %d after Close", a.TrackedUsers())
		}
	}
}

// TestSelectionIndependentOfInterleaving: the same events spread over
// simulated partitions (each read in its own order by its own goroutine,
// interleaved by the scheduler) give the same counts, the definition's,
// whatever the spread and the interleaving.
func TestSelectionIndependentOfInterleaving(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for it := range 400 {
		s, evs := randomInstance(r)
		want := reference(s, evs)
		for trial := range 5 {
			parts := make([][]tev, 1+r.IntN(4))
			for _, e := range evs {
				p := r.IntN(len(parts))
				parts[p] = append(parts[p], e)
			}
			a := mustNew(t, s)
			outs := make([]Outcome, len(parts))
			var wg sync.WaitGroup
			for p, pe := range parts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i, e := range pe {
						outs[p].Add(a.Add(0, e.event()))
						if (i+p+trial)%3 == 0 {
							runtime.Gosched()
						}
					}
				}()
			}
			wg.Wait()
			var o Outcome
			for _, x := range outs {
				o.Add(x)
			}
			got, displaced := countsOf(t, a)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("instance %d trial %d (m=%d G=%d K=%d, %d partitions): counts %v, definition %v", it, trial, s.MaxEventsPerUser, s.MaxGroupsPerUser, s.MaxTrackedUsers, len(parts), got, want)
			}
			checkAccounting(t, s, evs, o, displaced, got)
		}
	}
}

// TestSelectionConcurrentStress: many users over four goroutines, a cap
// far below them, so that evictions often hit a shard another goroutine
// holds (queued removals): the counts are the definition's, and once every
// shard has taken its queue the tables hold exactly the tracked users.
func TestSelectionConcurrentStress(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	s, _ := randomInstance(r)
	s.MaxEventsPerUser, s.MaxGroupsPerUser, s.MaxTrackedUsers = 2, 2, 300
	users := make([]uint64, 3000)
	for i := range users {
		users[i] = mix64(uint64(i)+77) | 1
	}
	evs := make([]tev, 30000)
	for i := range evs {
		e := tev{user: users[r.IntN(len(users))], t: int64(r.IntN(50))}
		for _, hs := range s.Histograms {
			e.bins = append(e.bins, int32(r.IntN(len(hs.Bins))))
			e.groups = append(e.groups, int32(r.IntN(len(hs.Groups))))
		}
		evs[i] = e
	}
	want := reference(s, evs)
	for trial := range 3 {
		a := mustNew(t, s)
		var wg sync.WaitGroup
		const workers = 4
		outs := make([]Outcome, workers)
		for p := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := p; i < len(evs); i += workers {
					outs[p].Add(a.Add(0, evs[i].event()))
				}
			}()
		}
		wg.Wait()
		for i := range a.shards {
			sh := &a.shards[i]
			sh.mu.Lock()
			if sh.npend.Load() != 0 {
				a.removeEvicted(sh)
			}
			sh.mu.Unlock()
		}
		records := 0
		for i := range a.shards {
			if sw := a.shards[i].wins[0]; sw != nil {
				records += sw.users.len()
			}
		}
		if records != s.MaxTrackedUsers || a.TrackedUsers() != s.MaxTrackedUsers {
			t.Fatalf("trial %d: %d records, %d tracked, want %d", trial, records, a.TrackedUsers(), s.MaxTrackedUsers)
		}
		var o Outcome
		for _, x := range outs {
			o.Add(x)
		}
		got, displaced := countsOf(t, a)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("trial %d: counts %v, definition %v", trial, got, want)
		}
		checkAccounting(t, s, evs, o, displaced, got)
	}
}

// TestSelectionBounds: whatever the input, each user counts at most m parts
// per histogram, in at most G groups, and at most K users count.
func TestSelectionBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 500 {
		s, evs := randomInstance(r)
		a := mustNew(t, s)
		users := map[uint64]bool{}
		for _, e := range evs {
			a.Add(0, e.event())
			users[e.user] = true
		}
		all, _ := countsOf(t, a)
		// Per user: the user's own events alone, through a fresh aggregator
		// (its selection depends on nothing else).
		tracked := 0
		for u := range users {
			b := mustNew(t, s)
			for _, e := range evs {
				if e.user == u {
					b.Add(0, e.event())
				}
			}
			got, _ := countsOf(t, b)
			any := false
			for h := range got {
				n, groups := int64(0), 0
				for _, gv := range got[h] {
					gn := int64(0)
					for _, c := range gv {
						gn += c
					}
					n += gn
					if gn > 0 {
						groups++
					}
				}
				if n > int64(s.MaxEventsPerUser) || groups > s.MaxGroupsPerUser {
					t.Fatalf("user %x histogram %d: %d parts in %d groups (m=%d G=%d)", u, h, n, groups, s.MaxEventsPerUser, s.MaxGroupsPerUser)
				}
				any = any || n > 0
			}
			if any {
				tracked++
			}
		}
		for h := range all {
			n := int64(0)
			for _, gv := range all[h] {
				for _, c := range gv {
					n += c
				}
			}
			if k := s.MaxTrackedUsers; k > 0 && n > int64(k*s.MaxEventsPerUser) {
				t.Fatalf("histogram %d counts %d parts: more than K·m = %d", h, n, k*s.MaxEventsPerUser)
			}
		}
	}
}

// TestEvictionFreesRecords: users evicted from a full window leave the
// tables (at once or with the next Add on their shard), so the bounder's
// memory stays that of the cap however many users are offered.
func TestEvictionFreesRecords(t *testing.T) {
	s := testSpec()
	s.MaxTrackedUsers = 1000
	a := mustNew(t, s)
	for i := range 20000 {
		a.Add(0, event(mix64(uint64(i)+1), 0, 0, 0))
	}
	for i := range a.shards { // every shard removes what it was left
		sh := &a.shards[i]
		sh.mu.Lock()
		if sh.npend.Load() != 0 {
			a.removeEvicted(sh)
		}
		sh.mu.Unlock()
	}
	records := 0
	for i := range a.shards {
		if sw := a.shards[i].wins[0]; sw != nil {
			records += sw.users.len()
		}
	}
	if records != 1000 || a.TrackedUsers() != 1000 {
		t.Fatalf("%d records, %d tracked; want the cap, 1000", records, a.TrackedUsers())
	}
	got := closeCounts(t, a, 0)
	if got[0][0][0] != 1000 || got[1][0][0] != 1000 {
		t.Fatalf("counts %v", got)
	}
}

// TestUserTableRemove: random inserts and removals keep every key
// reachable (backward-shift deletion across the table's wrap-around).
func TestUserTableRemove(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	tb := newUserTable(1)
	in := map[uint64]uint64{}
	var keys []uint64
	for range 200000 {
		if len(keys) > 0 && r.IntN(2) == 0 {
			i := r.IntN(len(keys))
			k := keys[i]
			keys[i] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
			slot, found := tb.probe(k)
			if !found {
				t.Fatalf("key %x lost", k)
			}
			tb.remove(slot)
			delete(in, k)
			continue
		}
		k := r.Uint64() | 1
		if r.IntN(4) == 0 {
			k = uint64(r.IntN(64))<<58 | 1 // crowd the first slots: long runs that wrap
		}
		if _, ok := in[k]; ok {
			continue
		}
		slot, _ := tb.probe(k)
		tb.insert(k, slot)[0] = k ^ 0xabc
		in[k] = k ^ 0xabc
		keys = append(keys, k)
	}
	if tb.len() != len(in) {
		t.Fatalf("len %d, want %d", tb.len(), len(in))
	}
	for k, v := range in {
		slot, found := tb.probe(k)
		if !found || tb.record(slot)[0] != v {
			t.Fatalf("key %x: found %v", k, found)
		}
	}
}

// TestEvictionQueuedWhileShardBusy: a user evicted while its shard is held
// by another goroutine is queued, and removed (its parts displaced) by the
// next holder of that shard's lock; a record found dead without its queued
// removal (as if the eviction came after the holder took the queue) is
// removed on sight, or left out by Close. Either way the user's events are
// dropped for capacity from then on and it is not counted.
func TestEvictionQueuedWhileShardBusy(t *testing.T) {
	s := testSpec()
	s.MaxTrackedUsers = 1
	for _, c := range []struct{ queueLost, againA bool }{{false, true}, {true, true}, {true, false}} {
		a := mustNew(t, s)
		userA := uint64(1000<<6 | 5) // shard 5
		userB := uint64(10<<6 | 6)   // shard 6, smaller hash
		if o := a.Add(0, event(userA, 0, 0, 0)); o.Counted != 2 {
			t.Fatalf("outcome %+v", o)
		}
		a.shards[5].mu.Lock() // shard 5 is busy
		if o := a.Add(0, event(userB, 1, 0, 1)); o.Counted != 2 {
			t.Fatalf("outcome %+v", o)
		}
		a.shards[5].mu.Unlock()
		if n := a.shards[5].npend.Load(); n != 1 {
			t.Fatalf("%d removals queued on shard 5, want 1", n)
		}
		if c.queueLost {
			a.shards[5].evicted = a.shards[5].evicted[:0]
			a.shards[5].npend.Store(0)
		}
		if c.againA {
			if o := a.Add(0, event(userA, 2, 0, 1)); o != (Outcome{DroppedCapacity: 2}) {
				t.Fatalf("%+v: the evicted user's event: outcome %+v", c, o)
			}
			if n := a.shards[5].wins[0].users.len(); n != 0 || a.shards[5].npend.Load() != 0 {
				t.Fatalf("%+v: shard 5 holds %d records, %d queued", c, n, a.shards[5].npend.Load())
			}
		}
		got, displaced := countsOf(t, a)
		if fmt.Sprint(got[0][0]) != "[0 1 0 0 0]" || fmt.Sprint(got[1][0]) != "[0 1]" || displaced != 2 {
			t.Fatalf("%+v: counts %v, displaced %d", c, got, displaced)
		}
	}
}
