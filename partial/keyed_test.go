package partial

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

// keyedLayout: histogram 0 lists 2 groups of 3 bins; histograms 1 and 2
// select their groups (2 and 3 bins); max_events_per_user 4,
// max_groups_per_user 2 × max_tracked_users 50.
var keyedLayout = Layout{Bins: []int{3, 2, 3}, Groups: []int{2, 0, 0}, Selects: []bool{false, true, true},
	MaxKeyBytes: 64, MaxEventsPerUser: 4, MaxKeyUsers: 100, MaxTotal: []float64{200, 200, 200}}

// keyedOf builds a KeyedCell of histogram h from keys (sorted here),
// users and counts by key.
func keyedOf(h, bins int, rows map[string]keyRow) KeyedCell {
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	c := KeyedCell{H: h, Bins: bins}
	for _, k := range keys {
		c.Append(k, rows[k].users, rows[k].counts)
	}
	return c
}

type keyRow struct {
	users  int64
	counts []float64
}

// randomKeyed is a random keyed cell of histogram h: up to n keys from a
// pool shared by the partitions (so that they overlap), users in [1, 3],
// counts summing to within [users, users × 4].
func randomKeyed(rng *rand.Rand, h, bins, n int) (KeyedCell, map[string]keyRow) {
	rows := map[string]keyRow{}
	for range rng.IntN(n + 1) {
		k := fmt.Sprintf("k%03d", rng.IntN(3*n))
		if rng.IntN(5) == 0 {
			k += "\x00é" // bytes, not only letters
		}
		u := int64(1 + rng.IntN(3))
		c := make([]float64, bins)
		for range u + rng.Int64N(3*u+1) { // u to 4u events
			c[rng.IntN(bins)]++
		}
		rows[k] = keyRow{u, c}
	}
	return keyedOf(h, bins, rows), rows
}

// TestKeyedRoundTripMerge (issue 30): random windows of N partitions, each
// with keyed cells of both selecting histograms, encoded (Arrow),
// decoded both ways and merged: the window's keys are the union of the
// partitions' in ascending byte order, each key's users and counts the
// sums of its partitions' — against a map computed on the side. The
// decoded Partials equal the encoded ones; DecodePartial and
// DecodeForMerge merge alike.
func TestKeyedRoundTripMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 3))
	for trial := range 60 {
		n := 1 + rng.IntN(9)
		want := []map[string]keyRow{1: {}, 2: {}}
		ms := map[string]*Merger{}
		for _, name := range []string{"partial", "merge"} {
			m, err := NewMerger(n, testSize, 0, keyedLayout, "")
			if err != nil {
				t.Fatal(err)
			}
			ms[name] = m
		}
		for p := range n {
			pt := &Partial{V: Version, WindowMs: testSize, Partition: p, Partitions: n, Next: testSize,
				Counts: []Cell{{H: 0, G: 1, Counts: []float64{1, 0, 2}}}}
			for h, bins := range map[int]int{1: 2, 2: 3} {
				if rng.IntN(4) == 0 {
					continue // no keys of h in this partition
				}
				c, rows := randomKeyed(rng, h, bins, 12)
				if c.Len() == 0 {
					continue
				}
				pt.Keyed = append(pt.Keyed, c)
				for k, r := range rows {
					s := want[h][k]
					s.users += r.users
					if s.counts == nil {
						s.counts = make([]float64, bins)
					}
					for i, v := range r.counts {
						s.counts[i] += v
					}
					want[h][k] = s
				}
			}
			slices.SortFunc(pt.Keyed, func(a, b KeyedCell) int { return a.H - b.H })
			b := pt.Encode()
			got, err := DecodePartial(b)
			if err != nil {
				t.Fatalf("trial %d partition %d: %v", trial, p, err)
			}
			if !sameKeyed(got.Keyed, pt.Keyed) {
				t.Fatalf("trial %d partition %d: decoded keyed cells differ", trial, p)
			}
			if r, err := ms["partial"].Add(got, int64(p)); err != nil || r != Added {
				t.Fatalf("trial %d partition %d: %v, %v", trial, p, r, err)
			}
			col, err := DecodeForMerge(b)
			if err != nil {
				t.Fatal(err)
			}
			if r, err := ms["merge"].Add(col, int64(p)); err != nil || r != Added {
				t.Fatalf("trial %d partition %d: %v, %v", trial, p, r, err)
			}
		}
		for name, m := range ms {
			w, ok := m.Next()
			if !ok {
				t.Fatalf("trial %d: window not complete", trial)
			}
			for h := range 3 {
				var keys []string
				for k := range want[h] {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				if got := w.Keys(h); got != len(keys) {
					t.Fatalf("trial %d %s: histogram %d has %d keys, want %d", trial, name, h, got, len(keys))
				}
				var total float64
				for _, r := range want[h] {
					for _, v := range r.counts {
						total += v
					}
				}
				if got := w.KeyedTotal(h); got != total {
					t.Errorf("trial %d %s: histogram %d's keys total %v, want %v", trial, name, h, got, total)
				}
				var dst []float64
				for i, k := range keys {
					key, users, counts := w.Key(h, i, dst)
					if key != k || users != want[h][k].users || !slices.Equal(counts, want[h][k].counts) {
						t.Fatalf("trial %d %s: histogram %d key %d = %q, %d users, %v; want %q, %d, %v", trial, name, h, i, key, users, counts, k, want[h][k].users, want[h][k].counts)
					}
					dst = counts
				}
			}
			if c := w.Counts(0, 1, nil); c[0] != float64(n) {
				t.Errorf("trial %d %s: histogram 0's cells merged to %v", trial, name, c)
			}
		}
	}
}

// sameKeyed compares keyed cells by content.
func sameKeyed(a, b []KeyedCell) bool {
	if len(a) != len(b) {
		return false
	}
	for j := range a {
		if a[j].H != b[j].H || a[j].Bins != b[j].Bins || a[j].Len() != b[j].Len() {
			return false
		}
		for i := range a[j].Len() {
			k1, u1, c1 := a[j].Key(i)
			k2, u2, c2 := b[j].Key(i)
			if k1 != k2 || u1 != u2 || !slices.Equal(c1, c2) {
				return false
			}
		}
	}
	return true
}

// TestKeyedAbsent: a Partial without keyed cells — of this version, or
// of an older one (the Arrow encoding without the key column) — decodes
// with none, and its window has no keys.
func TestKeyedAbsent(t *testing.T) {
	pt := &Partial{V: Version, WindowMs: testSize, Partition: 0, Partitions: 1, Next: testSize, Counts: []Cell{{H: 0, G: 0, Counts: []float64{1, 2, 3}}}}
	b := pt.Encode()
	for _, dec := range []func([]byte) (*Partial, error){DecodePartial, DecodeForMerge} {
		got, err := dec(b)
		if err != nil || got.Keyed != nil {
			t.Fatalf("%v, %+v", err, got.Keyed)
		}
		m, _ := NewMerger(1, testSize, 0, keyedLayout, "")
		if _, err := m.Add(got, 0); err != nil {
			t.Fatal(err)
		}
		w, _ := m.Next()
		for h := range 3 {
			if w.Keys(h) != 0 {
				t.Errorf("histogram %d: %d keys", h, w.Keys(h))
			}
		}
	}
	// An empty window (no Partial) has no keys either.
	m, _ := NewMerger(1, testSize, 0, keyedLayout, "")
	m.SetIdle(idle1(testSize), 0)
	if w, ok := m.Next(); ok && w.Keys(1) != 0 {
		t.Errorf("empty window: %d keys", w.Keys(1))
	}
}

func idle1(next int64) *Idle {
	return &Idle{V: Version, Partition: 0, Partitions: 1, WindowMs: testSize, Next: next, Idle: true}
}

// TestKeyedRefused (issue 30): keyed cells no bounder makes are refused
// with ReasonKeys (or ReasonShape), by DecodePartial for what the cell
// itself shows and by Merger.Add against the config's layout.
func TestKeyedRefused(t *testing.T) {
	ok := func() KeyedCell {
		return keyedOf(1, 2, map[string]keyRow{"a": {1, []float64{1, 0}}, "b": {2, []float64{3, 1}}})
	}
	raw := func(h, bins int, keys []string, users []int64, counts ...float64) KeyedCell {
		c := KeyedCell{H: h, Bins: bins}
		for i, k := range keys {
			c.Append(k, users[i], counts[i*bins:(i+1)*bins])
		}
		return c
	}
	for _, tc := range []struct {
		name   string
		cells  []KeyedCell
		decode bool // refused by DecodePartial (else by Merger.Add)
		reason Reason
	}{
		{"keys not ascending", []KeyedCell{raw(1, 2, []string{"b", "a"}, []int64{1, 1}, 1, 0, 1, 0)}, true, ReasonKeys},
		{"a key twice", []KeyedCell{raw(1, 2, []string{"a", "a"}, []int64{1, 1}, 1, 0, 1, 0)}, true, ReasonKeys},
		{"empty key after another", []KeyedCell{raw(1, 2, []string{"a", ""}, []int64{1, 1}, 1, 0, 1, 0)}, true, ReasonKeys},
		{"empty key twice", []KeyedCell{raw(1, 2, []string{"", ""}, []int64{1, 1}, 1, 0, 1, 0)}, true, ReasonKeys},
		{"no users", []KeyedCell{raw(1, 2, []string{"a"}, []int64{0}, 1, 0)}, true, ReasonKeys},
		{"negative users", []KeyedCell{raw(1, 2, []string{"a"}, []int64{-1}, 1, 0)}, true, ReasonKeys},
		{"negative count", []KeyedCell{raw(1, 2, []string{"a"}, []int64{1}, 3, -1)}, true, ReasonKeys},
		{"fractional count", []KeyedCell{raw(1, 2, []string{"a"}, []int64{1}, 1.5, 0)}, true, ReasonKeys},
		{"NaN count", []KeyedCell{raw(1, 2, []string{"a"}, []int64{1}, math.NaN(), 1)}, true, ReasonKeys},
		{"fewer events than users", []KeyedCell{raw(1, 2, []string{"a"}, []int64{3}, 1, 1)}, true, ReasonKeys},
		{"two cells of one histogram, in a row", []KeyedCell{ok(), ok()}, true, ReasonKeys}, // decoded as one: its keys repeat
		{"two cells of one histogram", []KeyedCell{ok(), raw(2, 3, []string{"a"}, []int64{1}, 1, 0, 0), ok()}, true, ReasonShape},
		{"more events than users allow", []KeyedCell{raw(1, 2, []string{"a"}, []int64{2}, 5, 4)}, false, ReasonKeys},
		{"key longer than an event", []KeyedCell{raw(1, 2, []string{strings.Repeat("x", 65)}, []int64{1}, 1, 0)}, false, ReasonKeys},
		{"more users than the window's", []KeyedCell{raw(1, 2, []string{"a", "b"}, []int64{60, 41}, 60, 0, 41, 0)}, false, ReasonKeys},
		{"more events than the window's", []KeyedCell{raw(2, 3, []string{"a", "b"}, []int64{50, 50}, 150, 0, 0, 60, 0, 0)}, false, ReasonKeys},
		{"not a selecting histogram", []KeyedCell{raw(0, 3, []string{"a"}, []int64{1}, 1, 0, 0)}, false, ReasonShape},
		{"histogram out of range", []KeyedCell{raw(3, 2, []string{"a"}, []int64{1}, 1, 0)}, false, ReasonShape},
		{"bins of another histogram", []KeyedCell{raw(1, 3, []string{"a"}, []int64{1}, 1, 0, 0)}, false, ReasonShape},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pt := &Partial{V: Version, WindowMs: testSize, Partition: 0, Partitions: 1, Next: testSize, Keyed: tc.cells}
			got, err := DecodePartial(pt.Encode())
			if tc.decode {
				if err == nil || ReasonOf(err) != tc.reason {
					t.Fatalf("DecodePartial: %v, want reason %v", err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodePartial: %v", err)
			}
			m, _ := NewMerger(1, testSize, 0, keyedLayout, "")
			if _, err := m.Add(got, 0); err == nil || ReasonOf(err) != tc.reason {
				t.Fatalf("Merger.Add: %v, want reason %v", err, tc.reason)
			}
			if w, ok := m.Next(); ok || w != nil {
				t.Error("the refused Partial completed its window")
			}
		})
	}
	// The good cells pass both: the empty string is a key (decode keeps a
	// group_by field's value "").
	for _, c := range []KeyedCell{ok(), raw(1, 2, []string{"", "a"}, []int64{1, 1}, 1, 0, 1, 0)} {
		pt := &Partial{V: Version, WindowMs: testSize, Partition: 0, Partitions: 1, Next: testSize, Keyed: []KeyedCell{c}}
		got, err := DecodePartial(pt.Encode())
		if err != nil {
			t.Fatal(err)
		}
		m, _ := NewMerger(1, testSize, 0, keyedLayout, "")
		if _, err := m.Add(got, 0); err != nil {
			t.Fatal(err)
		}
		if w, ok := m.Next(); !ok || w.Keys(1) != 2 {
			t.Fatalf("window complete %v", ok)
		}
	}
}

// TestKeyedDigest: a second Partial of the same (window, partition) with
// the same keyed cells is a Duplicate; with a key's users, counts or
// bytes changed, a Conflict.
func TestKeyedDigest(t *testing.T) {
	mk := func(k string, users int64, c0 float64) *Partial {
		return &Partial{V: Version, WindowMs: testSize, Partition: 0, Partitions: 2, Next: testSize,
			Keyed: []KeyedCell{keyedOf(1, 2, map[string]keyRow{k: {users, []float64{c0, 1}}, "zz": {1, []float64{1, 0}}})}}
	}
	for _, tc := range []struct {
		name string
		p    *Partial
		want AddResult
	}{
		{"same", mk("abc", 2, 3), Duplicate},
		{"users", mk("abc", 1, 3), Conflict},
		{"counts", mk("abc", 2, 4), Conflict},
		{"key", mk("abd", 2, 3), Conflict},
	} {
		m, _ := NewMerger(2, testSize, 0, keyedLayout, "")
		if r, err := m.Add(mk("abc", 2, 3), 0); err != nil || r != Added {
			t.Fatal(r, err)
		}
		if r, err := m.Add(tc.p, 1); err != nil || r != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, r, err, tc.want)
		}
	}
}

// TestKeyedSpilled: keyed cells of a Partial past the sums limit, or past
// the keyed cells' bytes limit (SetKeyBytesLimit), are read again with its
// counts (Reread) once their window is next, and merge as if never
// spilled; the next window always holds its own.
func TestKeyedSpilled(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit func(m *Merger)
	}{{"sums", func(m *Merger) { m.SetSumsLimit(1) }}, {"key bytes", func(m *Merger) { m.SetKeyBytesLimit(1) }}} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := NewMerger(1, testSize, 0, keyedLayout, "")
			tc.limit(m)
			ps := []*Partial{}
			for w := range 3 {
				ps = append(ps, &Partial{V: Version, WindowStart: int64(w) * testSize, WindowMs: testSize, Partition: 0, Partitions: 1, Next: int64(w+1) * testSize,
					Keyed: []KeyedCell{keyedOf(1, 2, map[string]keyRow{fmt.Sprint("w", w): {1, []float64{float64(w + 1), 0}}})}})
			}
			for i, p := range ps {
				if _, err := m.Add(p, int64(i)); err != nil {
					t.Fatal(err)
				}
			}
			if m.Summed(testSize, 0) || !m.Summed(0, 0) {
				t.Fatalf("summed: window 0 %v, window 1 %v; want the next window only", m.Summed(0, 0), m.Summed(testSize, 0))
			}
			rereads := 0
			for w := range 3 {
				if off, ok := m.Reread(); ok {
					rereads++
					for i := int(off); i < len(ps); i++ {
						if _, err := m.Add(ps[i], int64(i)); err != nil {
							t.Fatal(err)
						}
					}
				}
				win, ok := m.Next()
				if !ok {
					t.Fatalf("window %d not complete", w)
				}
				if k, u, c := win.Key(1, 0, nil); win.Keys(1) != 1 || k != fmt.Sprint("w", w) || u != 1 || c[0] != float64(w+1) {
					t.Fatalf("window %d: %d keys, %q %d %v", w, win.Keys(1), k, u, c)
				}
				m.Released(win)
			}
			if rereads != 2 {
				t.Errorf("%d re-reads, want 2 (windows 1 and 2 spilled)", rereads)
			}
		})
	}
}

// TestMergeRunsOrder: the binary-counter merge of sorted runs gives the
// same result whatever the order the Partials come in.
func TestMergeRunsOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 30))
	var cells []KeyedCell
	for range 13 {
		c, _ := randomKeyed(rng, 1, 2, 40)
		if c.Len() > 0 {
			cells = append(cells, c)
		}
	}
	render := func(order []int) string {
		km := &keyMerge{bins: 2}
		for _, i := range order {
			km.add(&cells[i])
		}
		r := km.merged()
		var b strings.Builder
		for i := range r.len() {
			fmt.Fprintf(&b, "%q:%d:%v ", r.key(i), r.users[i], r.row(i, 2))
		}
		return b.String()
	}
	first := render(rng.Perm(len(cells)))
	for range 5 {
		if got := render(rng.Perm(len(cells))); got != first {
			t.Fatalf("merge depends on order:\n%s\n%s", got, first)
		}
	}
	if first == "" {
		t.Fatal("nothing merged")
	}
}

// fakeKeyed is a closed window's keys (release.Keyed) by histogram.
type fakeKeyed map[int][]struct {
	key    string
	users  int64
	counts []float64
}

func (f fakeKeyed) Keys(h int) int { return len(f[h]) }

func (f fakeKeyed) Key(h, i int, dst []float64) (string, int64, []float64) {
	k := f[h][i]
	return k.key, k.users, append(dst[:0], k.counts...)
}

// TestKeyedFrom: a bounder's KeyedCell of a closed window's keys
// (KeyedFrom) holds them in order, nil without any, and survives the
// record.
func TestKeyedFrom(t *testing.T) {
	src := fakeKeyed{1: {{"a", 1, []float64{1, 0}}, {"b/c", 2, []float64{2, 3}}, {"é", 1, []float64{0, 4}}}}
	if c := KeyedFrom(src, 2, 2); c != nil {
		t.Fatalf("histogram without keys: %+v", c)
	}
	c := KeyedFrom(src, 1, 2)
	pt := &Partial{V: Version, WindowMs: testSize, Partition: 0, Partitions: 1, Next: testSize, Keyed: []KeyedCell{*c}}
	got, err := DecodePartial(pt.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Keyed) != 1 || got.Keyed[0].Len() != 3 {
		t.Fatalf("decoded %+v", got.Keyed)
	}
	for i, want := range src[1] {
		k, u, counts := got.Keyed[0].Key(i)
		if k != want.key || u != want.users || !slices.Equal(counts, want.counts) {
			t.Errorf("key %d: %q %d %v, want %+v", i, k, u, counts, want)
		}
	}
}
