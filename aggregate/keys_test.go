package aggregate

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/keyhash"
)

// kev is one test event of keyedSpec: a user, a time, a bin and key of the
// selecting histogram 0 (bin −1: no part), and a bin of the listed
// histogram 1 (−1: none).
type kev struct {
	user   uint64
	t      int64
	bin    int32
	key    string
	device int32
}

func (e kev) event() *decode.Event {
	ev := &decode.Event{User: e.user, TimeMs: e.t, Bins: []int32{e.bin, e.device}, Groups: []int32{0, 0}, Keys: [][]byte{nil, nil}}
	if e.bin >= 0 {
		ev.Keys[0] = []byte(e.key)
	} else {
		ev.Groups[0] = -1
	}
	if e.device < 0 {
		ev.Groups[1] = -1
	}
	return ev
}

func keyedSpec(m, g, k int) Spec {
	return Spec{
		Histograms: []HistSpec{
			{Name: "pages", Bins: []string{"0", "1", "2"}, Selects: true},
			{Name: "devices", Bins: []string{"mobile", "desktop"}, Groups: []string{"*"}},
		},
		MaxEventsPerUser: m, MaxGroupsPerUser: g, MaxTrackedUsers: k, WindowSize: time.Minute,
	}
}

// keyedOut is a window's keys of histogram 0: key → (users, counts).
type keyedOut map[string]keyedVal

type keyedVal struct {
	users  int64
	counts [3]int64
}

// keyedReference is the definition (keys.go) from the set of events alone:
// the K smallest users; per user the G first keys by (keyRank, key); the m
// first parts in them by (EventHash with keyFold, key, bin); each key's
// users with a selected part and its counts. admit nil: every user.
func keyedReference(s Spec, evs []kev, admit func(uint64) bool) keyedOut {
	users, byUser := trackedUsers(s, evs)
	out := keyedOut{}
	for _, u := range users {
		if admit != nil && !admit(u) {
			continue
		}
		ks := firstKeys(s, u, byUser[u])
		type ranked struct {
			e   uint32
			key string
			b   int
		}
		var rs []ranked
		for _, e := range byUser[u] {
			if e.bin >= 0 && slices.Contains(ks, e.key) {
				rs = append(rs, ranked{EventHash(e.user, e.t, keyFold(keyhash.String(e.key)), int(e.bin)), e.key, int(e.bin)})
			}
		}
		slices.SortFunc(rs, func(x, y ranked) int {
			return cmp.Or(cmp.Compare(x.e, y.e), strings.Compare(x.key, y.key), cmp.Compare(x.b, y.b))
		})
		seen := map[string]bool{}
		for _, r := range rs[:min(len(rs), s.MaxEventsPerUser)] {
			v := out[r.key]
			if !seen[r.key] {
				seen[r.key] = true
				v.users++
			}
			v.counts[r.b]++
			out[r.key] = v
		}
	}
	return out
}

// trackedUsers returns the tracked users (the K smallest of those with a
// part), sorted, and every user's events.
func trackedUsers(s Spec, evs []kev) ([]uint64, map[uint64][]kev) {
	byUser := map[uint64][]kev{}
	for _, e := range evs {
		if e.bin >= 0 || e.device >= 0 {
			byUser[max(e.user, 1)] = append(byUser[max(e.user, 1)], e)
		}
	}
	var users []uint64
	for u := range byUser {
		users = append(users, u)
	}
	slices.Sort(users)
	if s.MaxTrackedUsers > 0 && len(users) > s.MaxTrackedUsers {
		users = users[:s.MaxTrackedUsers]
	}
	return users, byUser
}

// firstKeys is user u's G first keys of histogram 0 by (keyRank, key).
func firstKeys(s Spec, u uint64, evs []kev) []string {
	var ks []string
	for _, e := range evs {
		if e.bin >= 0 && !slices.Contains(ks, e.key) {
			ks = append(ks, e.key)
		}
	}
	slices.SortFunc(ks, func(x, y string) int {
		return cmp.Or(cmp.Compare(keyRank(u, 0, keyhash.String(x)), keyRank(u, 0, keyhash.String(y))), strings.Compare(x, y))
	})
	return ks[:min(len(ks), s.MaxGroupsPerUser)]
}

// keyedOf reads histogram 0's keys from wc, checking their order and
// Users ≥ 1.
func keyedOf(t *testing.T, wc *WindowCounts) keyedOut {
	t.Helper()
	out := keyedOut{}
	prev := ""
	for i := range wc.Keys(0) {
		k, u, c := wc.Key(0, i, nil)
		if i > 0 && k <= prev {
			t.Fatalf("key %q after %q", k, prev)
		}
		if u < 1 || len(c) != 3 {
			t.Fatalf("key %q: %d users, counts %v", k, u, c)
		}
		prev = k
		out[k] = keyedVal{u, [3]int64{int64(c[0]), int64(c[1]), int64(c[2])}}
	}
	if wc.Keys(1) != 0 {
		t.Fatalf("a listed histogram has %d keys", wc.Keys(1))
	}
	return out
}

// randomKeyed draws a small instance: few users, keys, times, so that the
// bounds bind, keys are shared and identical events occur.
func randomKeyed(r *rand.Rand) (Spec, []kev) {
	s := keyedSpec(1+r.IntN(3), 1+r.IntN(3), r.IntN(8))
	nUsers := 1 + r.IntN(12)
	users := make([]uint64, nUsers)
	for i := range users {
		users[i] = mix64(r.Uint64()) | 1
	}
	keys := []string{"", "a", "b", "c", "home", "checkout", "Ü"}[:1+r.IntN(7)]
	evs := make([]kev, r.IntN(60))
	for i := range evs {
		e := kev{user: users[r.IntN(nUsers)], t: int64(r.IntN(4)), bin: int32(r.IntN(3)), key: keys[r.IntN(len(keys))], device: int32(r.IntN(2))}
		if r.IntN(6) == 0 {
			e.bin = -1
		}
		if r.IntN(6) == 0 {
			e.device = -1
		}
		evs[i] = e
	}
	return s, evs
}

// feedKeyed adds evs over parts goroutines and returns the outcomes.
func feedKeyed(a *Aggregator, evs []kev, parts int, r *rand.Rand) Outcome {
	ps := make([][]kev, parts)
	for _, e := range evs {
		p := r.IntN(parts)
		ps[p] = append(ps[p], e)
	}
	outs := make([]Outcome, parts)
	var wg sync.WaitGroup
	for p, pe := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, e := range pe {
				outs[p].Add(a.Add(0, e.event()))
				if i%3 == p%3 {
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
	return o
}

// keyedParts is the number of evs' parts of histogram h (0 or 1).
func keyedParts(evs []kev, h int) int {
	n := 0
	for _, e := range evs {
		if (h == 0 && e.bin >= 0) || (h == 1 && e.device >= 0) {
			n++
		}
	}
	return n
}

// TestKeyedMatchesDefinition: on random small instances, in a shuffled
// order over 1 to 4 goroutines, the keys, their users and counts are the
// definition's; every part is accounted for once, Counted − Displaced −
// Close's displaced is the total (Total includes the keys); and the
// dictionaries hold exactly the kept keys of the tracked users — at most
// max_groups_per_user of each — once queued evictions are done.
func TestKeyedMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 31))
	for it := range 1500 {
		s, evs := randomKeyed(r)
		want := keyedReference(s, evs, nil)
		r.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
		parts := 1 + r.IntN(4)
		a := mustNew(t, s)
		o := feedKeyed(a, evs, parts, r)
		held := a.keysHeld(0, 0)
		if w := heldReference(s, evs); held != w {
			t.Fatalf("instance %d (m=%d G=%d K=%d, %d events): dictionaries hold %d keys, the tracked users keep %d", it, s.MaxEventsPerUser, s.MaxGroupsPerUser, s.MaxTrackedUsers, len(evs), held, w)
		}
		wc, err := a.Close(0)
		if err != nil {
			t.Fatal(err)
		}
		got := keyedOf(t, wc)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("instance %d (m=%d G=%d K=%d, %d goroutines): keys %v, definition %v", it, s.MaxEventsPerUser, s.MaxGroupsPerUser, s.MaxTrackedUsers, parts, got, want)
		}
		if o.Counted+o.DroppedUserEvents+o.DroppedUserGroups+o.DroppedCapacity != keyedParts(evs, 0)+keyedParts(evs, 1) {
			t.Fatalf("instance %d: outcome %+v does not account for the parts", it, o)
		}
		if total := wc.Total(0) + wc.Total(1); int64(o.Counted-o.Displaced)-wc.Displaced() != total {
			t.Fatalf("instance %d: outcome %+v, displaced %d, total %d", it, o, wc.Displaced(), total)
		}
		wc.Release()
	}
}

// heldReference is the number of distinct keys among the tracked users'
// G first keys, per shard (each shard has its own dictionary), summed.
func heldReference(s Spec, evs []kev) int {
	users, byUser := trackedUsers(s, evs)
	all := map[string]bool{}
	for _, u := range users {
		shard := fmt.Sprint(u&(numShards-1), "/")
		for _, k := range firstKeys(s, u, byUser[u]) {
			all[shard+k] = true
		}
	}
	return len(all)
}

// TestKeyedOrderIndependent: the same events, shuffled and spread over
// several goroutines, give identical keys, users and counts, whatever
// order the keys were first seen in (which decides their ids).
func TestKeyedOrderIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(32, 33))
	for it := range 200 {
		s, evs := randomKeyed(r)
		var first string
		for trial := range 6 {
			r.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
			a := mustNew(t, s)
			feedKeyed(a, evs, 1+r.IntN(4), r)
			wc, err := a.Close(0)
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprint(keyedOf(t, wc))
			wc.Release()
			if trial == 0 {
				first = got
			} else if got != first {
				t.Fatalf("instance %d trial %d: %s, first trial %s", it, trial, got, first)
			}
		}
	}
}

// TestKeyedTieBreak: parts of equal EventHash in two keys, and keys of
// equal rank, are ordered by the keys, not by their ids (the order they
// were first seen in).
func TestKeyedTieBreak(t *testing.T) {
	l := &histLayout{binBits: 2}
	for _, first := range []string{"a", "b"} {
		d := newKeyDict()
		ia, _ := d.intern([]byte(first), 1<<20)
		ib, _ := d.intern([]byte(map[string]string{"a": "b", "b": "a"}[first]), 1<<20)
		if first == "b" {
			ia, ib = ib, ia
		}
		ea := uint64(7)<<32 | uint64(ia<<l.binBits|2) + 1
		eb := uint64(7)<<32 | uint64(ib<<l.binBits) + 1 // bin 0
		if !d.less(ea, eb, l.binBits) || d.less(eb, ea, l.binBits) {
			t.Errorf("first seen %q: equal EventHash not ordered by key", first)
		}
		d.hash[ia], d.hash[ib] = 42, 42 // equal public hashes: equal ranks
		if !d.before(5, 0, int(ia), int(ib)) || d.before(5, 0, int(ib), int(ia)) {
			t.Errorf("first seen %q: equal ranks not ordered by key", first)
		}
	}
}

// TestKeyedNeighbours: removing one user's events changes the users of at
// most max_groups_per_user keys, each by exactly 1 (in one direction), and
// the counts by at most max_events_per_user in L1; under the tracked-user
// cap, one user out and one in: at most 2·G keys, each by at most 1, the
// counts by at most 2m.
func TestKeyedNeighbours(t *testing.T) {
	r := rand.New(rand.NewPCG(34, 35))
	for it := range 1500 {
		s, evs := randomKeyed(r)
		if len(evs) == 0 {
			continue
		}
		gone := evs[r.IntN(len(evs))].user
		var rest []kev
		for _, e := range evs {
			if e.user != gone {
				rest = append(rest, e)
			}
		}
		x, y := keyedRun(t, s, evs, r), keyedRun(t, s, rest, r)
		changed, l1, up, down := 0, int64(0), 0, 0
		for k := range union(x, y) {
			du := x[k].users - y[k].users
			if du < -1 || du > 1 {
				t.Fatalf("instance %d: key %q users %d → %d", it, k, x[k].users, y[k].users)
			}
			if du != 0 {
				changed++
				if du > 0 {
					down++
				} else {
					up++
				}
			}
			for b := range 3 {
				l1 += abs(x[k].counts[b] - y[k].counts[b])
			}
		}
		g, m := s.MaxGroupsPerUser, int64(s.MaxEventsPerUser)
		if s.MaxTrackedUsers == 0 {
			if changed > g || up > 0 || l1 > m {
				t.Fatalf("instance %d (no cap, G=%d m=%d): %d keys changed (%d up), L1 %d", it, g, m, changed, up, l1)
			}
		} else if changed > 2*g || down > g || up > g || l1 > 2*m {
			t.Fatalf("instance %d (cap %d, G=%d m=%d): %d keys changed (%d down, %d up), L1 %d", it, s.MaxTrackedUsers, g, m, changed, down, up, l1)
		}
	}
}

func keyedRun(t *testing.T, s Spec, evs []kev, r *rand.Rand) keyedOut {
	t.Helper()
	a := mustNew(t, s)
	feedKeyed(a, evs, 2, r)
	wc, err := a.Close(0)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Release()
	return keyedOf(t, wc)
}

func union(x, y keyedOut) map[string]bool {
	u := map[string]bool{}
	for k := range x {
		u[k] = true
	}
	for k := range y {
		u[k] = true
	}
	return u
}

func abs(x int64) int64 { return max(x, -x) }

// TestKeyedDictionaryGC: users whose keys are displaced by keys ranked
// before them, and users evicted by the tracked-user cap, leave no key
// behind: the dictionaries hold at most G keys per tracked user however
// many distinct keys went through them.
func TestKeyedDictionaryGC(t *testing.T) {
	for _, c := range []struct {
		name          string
		g, cap, users int
		keysPerUser   int
	}{
		{"one user, 5000 keys, G=2", 2, 0, 1, 5000},
		{"100 users, 200 keys each, G=3", 3, 0, 100, 200},
		{"cap 10 of 500 users, 20 keys each, G=2", 2, 10, 500, 20},
	} {
		s := keyedSpec(2, c.g, c.cap)
		a := mustNew(t, s)
		var o Outcome
		for u := range c.users {
			user := mix64(uint64(u)+1) | 1
			for k := range c.keysPerUser {
				o.Add(a.Add(0, kev{user: user, t: int64(k), bin: 1, key: fmt.Sprintf("u%d-k%d", u, k), device: -1}.event()))
			}
		}
		tracked := c.users
		if c.cap > 0 {
			tracked = c.cap
		}
		held := a.keysHeld(0, 0)
		if held > c.g*tracked || held == 0 {
			t.Errorf("%s: %d keys held, at most %d", c.name, held, c.g*tracked)
		}
		if o.Displaced == 0 || o.DroppedUserGroups == 0 {
			t.Errorf("%s: no displacement exercised: %+v", c.name, o)
		}
		wc, err := a.Close(0)
		if err != nil {
			t.Fatal(err)
		}
		if n := wc.Keys(0); n > held {
			// A counted key is a kept key of a tracked user (one kept key
			// may have no selected part: m < G).
			t.Errorf("%s: %d keys counted, %d held", c.name, n, held)
		}
		t.Logf("%s: %d keys held of %d seen, %d counted", c.name, held, c.users*c.keysPerUser, wc.Keys(0))
		wc.Release()
		if h := a.keysHeld(0, 0); h != 0 {
			t.Errorf("%s: %d keys held after Close", c.name, h)
		}
	}
}

// TestKeyedCloseAdmitted: under CloseAdmitted a key's users are its
// admitted users only, and the parts of the others are NotAdmittedBy
// exactly.
func TestKeyedCloseAdmitted(t *testing.T) {
	r := rand.New(rand.NewPCG(36, 37))
	for it := range 500 {
		s, evs := randomKeyed(r)
		admit := func(u uint64) bool { return mix64(u)&1 == 0 }
		want := keyedReference(s, evs, admit)
		all := keyedReference(s, evs, nil)
		a := mustNew(t, s)
		feedKeyed(a, evs, 1, r)
		wc, err := a.CloseAdmitted(0, admit)
		if err != nil {
			t.Fatal(err)
		}
		got := keyedOf(t, wc)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("instance %d: keys %v, admitted definition %v", it, got, want)
		}
		var allParts, gotParts int64
		for _, v := range all {
			allParts += v.counts[0] + v.counts[1] + v.counts[2]
		}
		for _, v := range got {
			gotParts += v.counts[0] + v.counts[1] + v.counts[2]
		}
		if wc.NotAdmittedBy(0) != allParts-gotParts || wc.Total(0) != gotParts {
			t.Fatalf("instance %d: not admitted %d, want %d; total %d, want %d", it, wc.NotAdmittedBy(0), allParts-gotParts, wc.Total(0), gotParts)
		}
		wc.Release()
	}
}

// TestKeyedEmptyAndRecord: a window without events has no keys; the keys'
// rows follow the listed rows in the record, the key in the group column.
func TestKeyedEmptyAndRecord(t *testing.T) {
	a := mustNew(t, keyedSpec(3, 2, 0))
	wc, err := a.Close(0)
	if err != nil {
		t.Fatal(err)
	}
	if wc.Keys(0) != 0 || wc.Keys(1) != 0 || wc.Total(0) != 0 || wc.Record().NumRows() != 2 {
		t.Errorf("empty window: keys %d %d, total %d, rows %d", wc.Keys(0), wc.Keys(1), wc.Total(0), wc.Record().NumRows())
	}
	wc.Release()
	for _, e := range []kev{{1, 0, 2, "b", 0}, {1, 1, 0, "a", -1}, {3, 0, 1, "b", -1}} {
		a.Add(0, e.event())
	}
	wc, err = a.Close(0)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Release()
	rec := wc.Record()
	var rows []string
	for i := range int(rec.NumRows()) {
		rows = append(rows, fmt.Sprintf("%s/%s/%s=%d", rec.Column(0).(*array.String).Value(i), rec.Column(1).(*array.String).Value(i),
			rec.Column(4).(*array.String).Value(i), rec.Column(5).(*array.Int64).Value(i)))
	}
	want := "[devices/*/mobile=1 devices/*/desktop=0 pages/a/0=1 pages/a/1=0 pages/a/2=0 pages/b/0=0 pages/b/1=1 pages/b/2=1]"
	if fmt.Sprint(rows) != want {
		t.Errorf("rows %v, want %s", rows, want)
	}
	if k, u, c := wc.Key(0, 1, nil); k != "b" || u != 2 || fmt.Sprint(c) != "[0 1 1]" || wc.Total(0) != 3 {
		t.Errorf("key 1: %q %d %v, total %d", k, u, c, wc.Total(0))
	}
}

// TestKeyDictIDs: ids are reused once freed, and a dictionary whose ids
// are all held refuses a new key (the part is then dropped_capacity).
func TestKeyDictIDs(t *testing.T) {
	d := newKeyDict()
	a, _ := d.intern([]byte("a"), 2)
	b, _ := d.intern([]byte("b"), 2)
	d.ref(int(a))
	d.ref(int(b))
	if _, ok := d.intern([]byte("c"), 2); ok {
		t.Fatal("a third key interned under maxID 2")
	}
	if id, ok := d.intern([]byte("a"), 2); !ok || id != a {
		t.Fatalf("a held key: id %d ok %v, want %d", id, ok, a)
	}
	d.unref(int(b))
	c, ok := d.intern([]byte("c"), 2)
	if !ok || c != b || d.len() != 2 || d.keys[c] != "c" {
		t.Fatalf("c: id %d ok %v (b's was %d), %d keys", c, ok, b, d.len())
	}
	if _, held := d.ids["b"]; held {
		t.Fatal("a freed key is still mapped")
	}
	d.drop(c) // no holder: freed
	if d.len() != 1 {
		t.Fatalf("%d keys after dropping an unheld one", d.len())
	}
}

// TestKeyedSpecErrors: a selecting histogram lists no groups and has at
// most 2⁸ bins.
func TestKeyedSpecErrors(t *testing.T) {
	s := keyedSpec(1, 1, 0)
	s.Histograms[0].Groups = []string{"x"}
	if _, err := New(s); err == nil {
		t.Error("a selecting histogram with groups accepted")
	}
	s = keyedSpec(1, 1, 0)
	s.Histograms[0].Bins = make([]string, 1<<maxKeyedBinBits+1)
	for i := range s.Histograms[0].Bins {
		s.Histograms[0].Bins[i] = fmt.Sprint(i)
	}
	if _, err := New(s); err == nil {
		t.Error("too many bins accepted")
	}
}

// TestKeyedConcurrentStress: 3,000 users over four goroutines, a cap of 300
// (evictions often queued for a shard another goroutine holds), 200 keys:
// the keys are the definition's and, once the queues are done, the
// dictionaries hold exactly the tracked users' kept keys — an evicted
// user's keys are let go whichever goroutine removes its record.
func TestKeyedConcurrentStress(t *testing.T) {
	r := rand.New(rand.NewPCG(38, 39))
	s := keyedSpec(2, 2, 300)
	users := make([]uint64, 3000)
	for i := range users {
		users[i] = mix64(uint64(i)+77) | 1
	}
	evs := make([]kev, 30000)
	for i := range evs {
		evs[i] = kev{user: users[r.IntN(len(users))], t: int64(r.IntN(50)), bin: int32(r.IntN(3)), key: fmt.Sprint("k", r.IntN(200)), device: int32(r.IntN(2))}
	}
	want := fmt.Sprint(keyedReference(s, evs, nil))
	wantHeld := heldReference(s, evs)
	for trial := range 3 {
		a := mustNew(t, s)
		o := feedKeyed(a, evs, 4, r)
		if held := a.keysHeld(0, 0); held != wantHeld {
			t.Fatalf("trial %d: %d keys held, the tracked users keep %d", trial, held, wantHeld)
		}
		wc, err := a.Close(0)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(keyedOf(t, wc)); got != want {
			t.Fatalf("trial %d: keys differ from the definition", trial)
		}
		if total := wc.Total(0) + wc.Total(1); int64(o.Counted-o.Displaced)-wc.Displaced() != total {
			t.Fatalf("trial %d: outcome %+v, displaced %d, total %d", trial, o, wc.Displaced(), total)
		}
		wc.Release()
	}
}
