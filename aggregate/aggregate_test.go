package aggregate

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/dpstage/stage/decode"
)

func testSpec() Spec {
	return Spec{
		Histograms: []HistSpec{
			{Name: "pages", Bins: []string{"home", "search", "cart", "checkout", "other"}, Groups: []string{"US", "DE", "FR"}},
			{Name: "devices", Bins: []string{"mobile", "desktop"}, Groups: []string{"*"}},
		},
		MaxEventsPerUser: 1,
		MaxGroupsPerUser: 1,
		MaxTrackedUsers:  1000,
		WindowSize:       time.Minute,
	}
}

func mustNew(t testing.TB, s Spec) *Aggregator {
	t.Helper()
	a, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// event builds an Event for histograms (pages, devices); -1 drops a part.
func event(user uint64, page, country, device int32) *decode.Event {
	ev := &decode.Event{User: user, Bins: []int32{page, device}, Groups: []int32{country, 0}, Drops: make([]decode.Reason, 2)}
	if page < 0 || country < 0 {
		ev.Bins[0], ev.Groups[0] = -1, -1
	}
	if device < 0 {
		ev.Bins[1], ev.Groups[1] = -1, -1
	}
	return ev
}

func closeCounts(t *testing.T, a *Aggregator, start int64) [][][]float64 {
	t.Helper()
	wc, err := a.Close(start)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Release()
	var out [][][]float64
	for h, hs := range a.Spec().Histograms {
		var hv [][]float64
		for g := range hs.Groups {
			hv = append(hv, wc.Counts(h, g, nil))
		}
		out = append(out, hv)
	}
	return out
}

func TestNewErrors(t *testing.T) {
	for name, mutate := range map[string]func(*Spec){
		"no histograms":   func(s *Spec) { s.Histograms = nil },
		"empty name":      func(s *Spec) { s.Histograms[0].Name = "" },
		"duplicate name":  func(s *Spec) { s.Histograms[1].Name = "pages" },
		"no bins":         func(s *Spec) { s.Histograms[0].Bins = nil },
		"duplicate bin":   func(s *Spec) { s.Histograms[0].Bins = []string{"a", "a"} },
		"no groups":       func(s *Spec) { s.Histograms[1].Groups = nil },
		"duplicate group": func(s *Spec) { s.Histograms[0].Groups = []string{"US", "US"} },
		"events":          func(s *Spec) { s.MaxEventsPerUser = 0 },
		"groups":          func(s *Spec) { s.MaxGroupsPerUser = -1 },
		"tracked":         func(s *Spec) { s.MaxTrackedUsers = -1 },
		"window":          func(s *Spec) { s.WindowSize = 0 },
		"window sub-ms":   func(s *Spec) { s.WindowSize = time.Second + time.Microsecond },
	} {
		s := testSpec()
		mutate(&s)
		if _, err := New(s); err == nil {
			t.Errorf("%s: New succeeded", name)
		} else if !strings.HasPrefix(err.Error(), "aggregate: ") {
			t.Errorf("%s: error %q lacks the prefix", name, err)
		}
	}
}

// feed adds evs to window 0 in order and returns the total outcome.
func feed(a *Aggregator, evs []tev) (o Outcome) {
	for _, e := range evs {
		o.Add(a.Add(0, e.event()))
	}
	return o
}

func TestBoundingMaxEvents(t *testing.T) {
	s := testSpec()
	s.MaxEventsPerUser = 3
	heavy := mix64(42)
	var evs []tev
	for i := range 10000 {
		evs = append(evs, tev{user: heavy, t: int64(i), bins: []int32{int32(i % 5), int32(i % 2)}, groups: []int32{1, 0}})
	}
	// Another user, one event.
	evs = append(evs, tev{user: mix64(7), bins: []int32{0, -1}, groups: []int32{0, -1}})
	want := reference(s, evs)
	for _, order := range []string{"forward", "reversed"} {
		a := mustNew(t, s)
		o := feed(a, evs)
		got, displaced := countsOf(t, a)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: counts %v, want %v", order, got, want)
		}
		// The heavy user counts 3 parts per histogram; every part is
		// accounted for on arrival.
		if o.Counted-o.Displaced != 3+3+1 || displaced != 0 || o.Counted+o.DroppedUserEvents != 2*10000+1 || o.DroppedUserGroups+o.DroppedCapacity != 0 {
			t.Fatalf("%s: outcome %+v", order, o)
		}
		slices.Reverse(evs)
	}
	n := int64(0)
	for _, c := range want[0][1] {
		n += c
	}
	if n != 3 || fmt.Sprint(want[0][0]) != "[1 0 0 0 0]" {
		t.Fatalf("definition %v", want)
	}
}

func TestBoundingMaxGroups(t *testing.T) {
	s := testSpec()
	s.MaxEventsPerUser = 100
	s.MaxGroupsPerUser = 2
	u := mix64(1)
	var evs []tev
	for i := range 10000 {
		evs = append(evs, tev{user: u, t: int64(i), bins: []int32{int32(i % 5), -1}, groups: []int32{int32((i + 1) % 3), -1}})
	}
	a := mustNew(t, s)
	o := feed(a, evs)
	got, _ := countsOf(t, a)
	if want := reference(s, evs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	// 100 parts in the two groups ranked first by GroupHash; the third
	// group's parts are dropped_user_groups from the start or once it is
	// displaced.
	last := 0
	for g := 1; g < 3; g++ {
		if groupBefore(GroupHash(u, 0, last), last, GroupHash(u, 0, g), g) {
			last = g
		}
	}
	n := int64(0)
	for g, gv := range got[0] {
		for _, c := range gv {
			n += c
			if g == last && c != 0 {
				t.Fatalf("group %d ranks last but counts: %v", g, got[0])
			}
		}
	}
	if n != 100 || o.Counted-o.Displaced != 100 || o.DroppedUserGroups == 0 || o.Counted+o.DroppedUserEvents+o.DroppedUserGroups != 10000 {
		t.Fatalf("counted %d, outcome %+v", n, o)
	}
}

func TestBoundingPerWindowAndHistogram(t *testing.T) {
	a := mustNew(t, testSpec())
	for _, w := range []int64{0, 60000, 120000} {
		for range 5 {
			a.Add(w, event(9, 2, 2, 1))
		}
	}
	if got := fmt.Sprint(a.OpenWindows()); got != "[0 60000 120000]" {
		t.Fatalf("open windows %s", got)
	}
	for _, w := range []int64{120000, 0, 60000} {
		got := closeCounts(t, a, w)
		if fmt.Sprint(got) != "[[[0 0 0 0 0] [0 0 0 0 0] [0 0 1 0 0]] [[0 1]]]" {
			t.Fatalf("window %d: %v", w, got)
		}
	}
}

func TestDroppedPartsIgnored(t *testing.T) {
	a := mustNew(t, testSpec())
	if o := a.Add(0, event(1, -1, -1, -1)); o != (Outcome{}) || a.TrackedUsers() != 0 {
		t.Fatalf("outcome %+v, tracked %d", o, a.TrackedUsers())
	}
	// Out-of-range indices (an event for another configuration) are ignored.
	ev := &decode.Event{User: 1, Bins: []int32{99, 1}, Groups: []int32{0, 5}}
	if o := a.Add(0, ev); o != (Outcome{}) {
		t.Fatalf("outcome %+v", o)
	}
	if o := a.Add(0, &decode.Event{User: 1}); o != (Outcome{}) {
		t.Fatalf("outcome %+v", o)
	}
	// A dropped part does not use up the user's bound.
	a.Add(0, event(2, -1, -1, 0))
	if o := a.Add(0, event(2, 1, 1, -1)); o.Counted != 1 {
		t.Fatalf("outcome %+v", o)
	}
}

func TestEmptyWindowHasEveryDeclaredCell(t *testing.T) {
	a := mustNew(t, testSpec())
	a.Add(0, event(1, 0, 0, 0)) // another window holds data
	wc, err := a.Close(5 * 60000)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Release()
	rec := wc.Record()
	if rec.NumRows() != 5*3+2*1 {
		t.Fatalf("%d rows", rec.NumRows())
	}
	for i, c := range rec.Column(5).(*array.Int64).Int64Values() {
		if c != 0 {
			t.Fatalf("row %d count %d", i, c)
		}
	}
	if wc.Start() != 300000 || wc.End() != 360000 {
		t.Fatalf("window [%d, %d)", wc.Start(), wc.End())
	}
	if got := fmt.Sprint(a.OpenWindows()); got != "[0]" {
		t.Fatalf("open windows %s", got)
	}
}

func TestRecord(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s := Spec{
		Histograms: []HistSpec{
			{Name: "p", Bins: []string{"a", "b"}, Groups: []string{"X", "Y"}},
			{Name: "q", Bins: []string{"c", "d", "e"}, Groups: []string{"*"}},
		},
		MaxEventsPerUser: 1, MaxGroupsPerUser: 1, MaxTrackedUsers: 10, WindowSize: 10 * time.Second, Mem: mem,
	}
	a := mustNew(t, s)
	a.Add(1_700_000_000_000, &decode.Event{User: 1, Bins: []int32{1, 2}, Groups: []int32{1, 0}})
	a.Add(1_700_000_000_000, &decode.Event{User: 2, Bins: []int32{1, -1}, Groups: []int32{1, -1}})
	a.Add(1_700_000_000_000, &decode.Event{User: 3, Bins: []int32{0, 0}, Groups: []int32{0, 0}})
	wc, err := a.Close(1_700_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	rec := wc.Record()
	if !rec.Schema().Equal(Schema) {
		t.Fatalf("schema %v", rec.Schema())
	}
	if rec.Schema().Field(2).Type.(*arrow.TimestampType).Unit != arrow.Millisecond {
		t.Fatal("window_start unit")
	}
	var rows []string
	for i := range int(rec.NumRows()) {
		rows = append(rows, fmt.Sprintf("%s/%s/%d/%d/%s/%d",
			rec.Column(0).(*array.String).Value(i), rec.Column(1).(*array.String).Value(i),
			rec.Column(2).(*array.Timestamp).Value(i), rec.Column(3).(*array.Timestamp).Value(i),
			rec.Column(4).(*array.String).Value(i), rec.Column(5).(*array.Int64).Value(i)))
	}
	want := []string{
		"p/X/1700000000000/1700000010000/a/1", "p/X/1700000000000/1700000010000/b/0",
		"p/Y/1700000000000/1700000010000/a/0", "p/Y/1700000000000/1700000010000/b/2",
		"q/*/1700000000000/1700000010000/c/1", "q/*/1700000000000/1700000010000/d/0", "q/*/1700000000000/1700000010000/e/1",
	}
	if !slices.Equal(rows, want) {
		t.Fatalf("rows\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	if got := wc.Counts(0, 1, make([]float64, 7)); fmt.Sprint(got) != "[0 2]" {
		t.Fatalf("counts %v", got)
	}
	if got := wc.Counts(1, 0, nil); fmt.Sprint(got) != "[1 0 1]" {
		t.Fatalf("counts %v", got)
	}
	// A retained record outlives the WindowCounts.
	rec.Retain()
	wc.Release()
	wc.Release() // idempotent
	if rec.NumRows() != 7 {
		t.Fatal("retained record")
	}
	rec.Release()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Counts after Release did not panic")
			}
		}()
		wc.Counts(0, 0, nil)
	}()
}

func TestCapacity(t *testing.T) {
	s := testSpec()
	s.MaxTrackedUsers = 10
	a := mustNew(t, s)
	users := make([]uint64, 20)
	for i := range users {
		users[i] = mix64(uint64(i) + 1)
	}
	var o Outcome
	for _, u := range users {
		o.Add(a.Add(0, event(u, 0, 0, 0)))
	}
	if o.Counted+o.DroppedCapacity != 40 || o.Counted < 20 || a.TrackedUsers() != 10 {
		t.Fatalf("outcome %+v tracked %d", o, a.TrackedUsers())
	}
	// The tracked users are the 10 smallest hashes.
	sorted := slices.Sorted(slices.Values(users))
	// Tracked users are still bounded (an identical event adds nothing);
	// an untracked user's events are dropped for capacity.
	if o := a.Add(0, event(sorted[0], 0, 0, 0)); o != (Outcome{DroppedUserEvents: 2}) {
		t.Fatalf("outcome %+v", o)
	}
	if o := a.Add(0, event(sorted[10], 1, 0, 1)); o != (Outcome{DroppedCapacity: 2}) {
		t.Fatalf("outcome %+v", o)
	}
	// The cap is per window: a full window 0 never blocks window 1, so one
	// user's events in one window cannot displace a user in another.
	for _, u := range sorted[10:] {
		if o := a.Add(60000, event(u, 1, 0, 1)); o.Counted != 2 {
			t.Fatalf("window 1, user %x: outcome %+v", u, o)
		}
	}
	if o := a.Add(60000, event(sorted[0], 1, 0, 1)); o != (Outcome{Counted: 2}) || a.TrackedUsers() != 20 {
		t.Fatalf("window 1, a smaller hash: outcome %+v, tracked %d", o, a.TrackedUsers())
	}
	wc, err := a.Close(0)
	if err != nil {
		t.Fatal(err)
	}
	if c := wc.Counts(0, 0, nil); c[0] != 10 || int64(o.Counted)-wc.Displaced() != 20 {
		t.Fatalf("counts %v, displaced %d, outcome %+v", c, wc.Displaced(), o)
	}
	wc.Release()
	// Closing frees the window's users.
	if a.TrackedUsers() != 10 {
		t.Fatalf("tracked %d after closing window 0, want window 1's 10", a.TrackedUsers())
	}
	wc, err = a.Close(60000)
	if err != nil {
		t.Fatal(err)
	}
	if c := wc.Counts(0, 0, nil); c[1] != 10 || wc.Displaced() != 2 {
		t.Fatalf("window 1: counts %v, displaced %d", c, wc.Displaced())
	}
	wc.Release()
	if a.TrackedUsers() != 0 {
		t.Fatalf("tracked %d after closing both", a.TrackedUsers())
	}
	if o := a.Add(60000, event(users[15], 1, 0, 1)); o.Counted != 2 {
		t.Fatalf("outcome %+v", o)
	}
}

// TestCapDisplacement states exactly what the cap does across users: in a
// window at its cap, adding one user with a smaller hash than the largest
// tracked one — whenever it arrives — displaces that user: the per-window
// change is one user's events out and one user's in, which the plan charges
// for (plan/plan.go).
func TestCapDisplacement(t *testing.T) {
	run := func(withA, first bool) [][][]float64 {
		s := testSpec()
		s.MaxTrackedUsers = 3
		a := mustNew(t, s)
		addA := func() {
			if withA {
				a.Add(0, event(5, 2, 0, 2)) // user A: the smallest hash
			}
		}
		if first {
			addA()
		}
		for _, u := range []uint64{10, 20, 30, 40, 50} {
			a.Add(0, event(u, 0, 0, 0))
		}
		if !first {
			addA()
		}
		return closeCounts(t, a, 0)
	}
	for _, first := range []bool{true, false} {
		with, without := run(true, first), run(false, first)
		// Histogram 0, group 0: with A, bins {0: 2, 2: 1}; without, {0: 3}.
		if with[0][0][0] != 2 || with[0][0][2] != 1 || without[0][0][0] != 3 || without[0][0][2] != 0 {
			t.Fatalf("A first %v: with A %v, without A %v", first, with, without)
		}
		// Histogram 1: user 30 out (A's device part is out of range).
		if with[1][0][0] != 2 || without[1][0][0] != 3 {
			t.Fatalf("A first %v: with A %v, without A %v", first, with, without)
		}
	}
}

func TestCloseRemovesState(t *testing.T) {
	a := mustNew(t, testSpec())
	a.Add(0, event(1, 0, 0, 0))
	closeCounts(t, a, 0)
	if len(a.OpenWindows()) != 0 || a.TrackedUsers() != 0 {
		t.Fatalf("open %v tracked %d", a.OpenWindows(), a.TrackedUsers())
	}
	// A second Close of the same window has nothing: all zeros.
	if got := closeCounts(t, a, 0); got[0][0][0] != 0 || got[1][0][0] != 0 {
		t.Fatalf("counts %v", got)
	}
	// The same user in a reopened window starts afresh (reused state is clean).
	if o := a.Add(0, event(1, 0, 0, 0)); o.Counted != 2 {
		t.Fatalf("outcome %+v", o)
	}
	for i := range a.shards {
		for _, sw := range a.shards[i].wins {
			if sw.users.len() > 1 {
				t.Fatal("stale users")
			}
		}
	}
}

func TestReset(t *testing.T) {
	a := mustNew(t, testSpec())
	for u := range uint64(100) {
		a.Add(int64(u%3)*60000, event(u, 0, 0, 0))
	}
	a.Reset()
	if len(a.OpenWindows()) != 0 || a.TrackedUsers() != 0 {
		t.Fatalf("open %v tracked %d", a.OpenWindows(), a.TrackedUsers())
	}
	if got := closeCounts(t, a, 0); got[0][0][0] != 0 {
		t.Fatalf("counts %v", got)
	}
	if o := a.Add(0, event(1, 0, 0, 0)); o.Counted != 2 {
		t.Fatalf("outcome %+v", o)
	}
}

func TestConcurrentAdd(t *testing.T) {
	s := testSpec()
	s.MaxEventsPerUser = 2
	s.MaxGroupsPerUser = 2
	s.MaxTrackedUsers = 1 << 20
	a := mustNew(t, s)
	const workers, users, perUser = 4, 2000, 5
	var wg sync.WaitGroup
	outs := make([]Outcome, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each worker owns users ≡ w mod workers (a partition), plus a
			// few users shared by every worker.
			for i := range users * perUser {
				u := uint64(i%users*workers + w)
				if i%10 == 0 {
					u = 1 << 40 // shared user
				}
				outs[w].Add(a.Add(int64(i%2)*60000, event(u, int32(i%5), int32(u%3), int32(u%2))))
			}
		}()
	}
	// Read-only calls concurrently.
	for range 100 {
		a.OpenWindows()
		a.TrackedUsers()
	}
	wg.Wait()
	var o Outcome
	for _, x := range outs {
		o.Add(x)
	}
	total := 0
	for _, w := range []int64{0, 60000} {
		got := closeCounts(t, a, w)
		for _, hv := range got {
			for _, gv := range hv {
				for _, c := range gv {
					total += int(c)
				}
			}
		}
	}
	if total != o.Counted {
		t.Fatalf("counted %d, outcome says %d", total, o.Counted)
	}
	// Each user has at most 2 counted events per window and histogram.
	maxTotal := (users*workers + 1) * 2 * 2 * 2
	if total > maxTotal || total == 0 || o.DroppedCapacity != 0 || o.DroppedUserGroups != 0 {
		t.Fatalf("total %d (max %d), outcome %+v", total, maxTotal, o)
	}
}

func TestAddAllocs(t *testing.T) {
	s := testSpec()
	s.MaxTrackedUsers = 1 << 20
	a := mustNew(t, s)
	evs := make([]*decode.Event, 1000)
	for i := range evs {
		evs[i] = event(uint64(i), int32(i%5), int32(i%3), int32(i%2))
	}
	// Warm: open and close a window so its tables are reused.
	for _, ev := range evs {
		a.Add(0, ev)
	}
	closeCounts(t, a, 0)
	i := 0
	allocs := testing.AllocsPerRun(5000, func() {
		a.Add(60000, evs[i%len(evs)])
		i++
	})
	if allocs != 0 {
		t.Fatalf("%.2f allocs per Add", allocs)
	}
}

// TestBytesPerActiveUser measures the bounder's heap per active (user,
// window) pair at 1,000,000 users in one window.
func TestBytesPerActiveUser(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~100 MB")
	}
	for _, c := range []struct {
		name  string
		spec  Spec
		limit float64
	}{
		{"1 histogram, group_by, max_groups 1", Spec{Histograms: testSpec().Histograms[:1]}, 100},
		{"2 histograms, max_groups 1", Spec{Histograms: testSpec().Histograms}, 100},
	} {
		s := c.spec
		s.MaxEventsPerUser, s.MaxGroupsPerUser, s.MaxTrackedUsers, s.WindowSize = 1, 1, 2_000_000, time.Minute
		bpu := bytesPerUser(t, s, 1_000_000)
		t.Logf("%s: %.1f bytes per active (user, window)", c.name, bpu)
		if bpu > c.limit {
			t.Errorf("%s: %.1f bytes per active user > %.0f", c.name, bpu, c.limit)
		}
	}
}

func bytesPerUser(t testing.TB, s Spec, n int) float64 {
	a := mustNew(t, s)
	evs := make([]*decode.Event, 64)
	for i := range evs {
		evs[i] = &decode.Event{Bins: make([]int32, len(s.Histograms)), Groups: make([]int32, len(s.Histograms))}
	}
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	seed := maphash.MakeSeed()
	var buf [8]byte
	for u := range n {
		ev := evs[u%len(evs)]
		buf[0], buf[1], buf[2], buf[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		ev.User = maphash.Bytes(seed, buf[:])
		if o := a.Add(0, ev); o.Counted != len(s.Histograms) {
			t.Fatalf("user %d: outcome %+v", u, o)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	if a.TrackedUsers() != n {
		t.Fatalf("tracked %d", a.TrackedUsers())
	}
	runtime.KeepAlive(a)
	return float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc)) / float64(n)
}

// ---- benchmarks ----

func BenchmarkBytesPerActiveUser(b *testing.B) {
	s := testSpec()
	s.Histograms = s.Histograms[:1]
	s.MaxTrackedUsers = 2_000_000
	for b.Loop() {
		b.ReportMetric(bytesPerUser(b, s, 1_000_000), "bytes/user")
	}
}

// BenchmarkAdd: single goroutine, 100,000 users with a skewed activity, the
// window advancing every 200,000 events (closed as it goes).
func BenchmarkAdd(b *testing.B) {
	s := testSpec()
	s.MaxEventsPerUser, s.MaxGroupsPerUser, s.MaxTrackedUsers = 3, 1, 1_000_000
	a := mustNew(b, s)
	r := rand.New(rand.NewPCG(1, 1))
	evs := make([]decode.Event, 1<<16)
	for i := range evs {
		u := uint64(r.IntN(100_000))
		u = u * u / 100_000 // skewed
		evs[i] = *event(u*0x9E3779B97F4A7C15, int32(r.IntN(5)), int32(u%3), int32(r.IntN(2)))
		evs[i].TimeMs = int64(i) // distinct events (they rank by their content)
	}
	b.ReportAllocs()
	var o Outcome
	i := 0
	window := int64(0)
	for b.Loop() {
		if i%200_000 == 0 && i > 0 {
			wc, _ := a.Close(window)
			wc.Release()
			window += 60000
		}
		o.Add(a.Add(window, &evs[i&(len(evs)-1)]))
		i++
	}
	b.ReportMetric(float64(o.Counted)/float64(i), "counted/event")
}

func TestUserTableSurvivesGrowth(t *testing.T) {
	s := testSpec()
	s.MaxTrackedUsers = 1 << 20
	s.MaxGroupsPerUser = 2
	a := mustNew(t, s)
	const n = 100_000
	seed := maphash.MakeSeed()
	user := func(i int) uint64 {
		if i == 0 {
			return 0 // the free-slot marker, stored as 1
		}
		return maphash.Comparable(seed, i)
	}
	for i := range n {
		if o := a.Add(0, event(user(i), 0, int32(i%3), 0)); o.Counted != 2 {
			t.Fatalf("user %d: %+v", i, o)
		}
	}
	for i := range n {
		// The same event again: over the event bound (a tie adds nothing).
		// Records survived every resize.
		if o := a.Add(0, event(user(i), 0, int32(i%3), 0)); o != (Outcome{DroppedUserEvents: 2}) {
			t.Fatalf("user %d: %+v", i, o)
		}
	}
	if a.TrackedUsers() != n {
		t.Fatalf("tracked %d", a.TrackedUsers())
	}
	got := closeCounts(t, a, 0)
	if got[0][0][0]+got[0][1][0]+got[0][2][0] != n || got[1][0][0] != n {
		t.Fatalf("counts %v", got)
	}
}
