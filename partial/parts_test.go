package partial

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// partsLayout is partsLayout without the bound on a partition's users.
var partsLayout = func() Layout { l := keyedLayout; l.MaxKeyUsers, l.MaxTotal = 0, nil; return l }()

// bigKeyed is a Partial of window w, partition p of n, with count cells,
// drops, and n keys of histograms 1 and 2 (partsLayout) of varying length.
func bigKeyed(rng *rand.Rand, w int64, p, n, keys int) *Partial {
	pt := &Partial{V: Version, WindowStart: w, WindowMs: testSize, Partition: p, Partitions: n, Next: w + testSize, Config: "c",
		Counts: []Cell{{H: 0, G: 1, Counts: []float64{1, 0, 2}}}, Dropped: []DropCell{{H: 1, N: 3}}}
	for h, bins := range []int{0, 2, 3} {
		if h == 0 {
			continue
		}
		rows := map[string]keyRow{}
		for range keys {
			k := fmt.Sprintf("%s-%d", string(make([]byte, rng.IntN(40))), rng.IntN(10*keys))
			c := make([]float64, bins)
			c[rng.IntN(bins)] = 1
			rows[k] = keyRow{1, c}
		}
		pt.Keyed = append(pt.Keyed, keyedOf(h, bins, rows))
	}
	return pt
}

// TestSplitParts (issue 30): a Partial whose keys exceed the record limit
// is split into parts, each within it, whose merge equals the merge of the
// Partial whole (same keys, users, counts, cells and drops); the whole
// Partial fed after its parts is a Duplicate (same digest); one that fits
// is not split.
func TestSplitParts(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 5))
	const limit = 12000
	for trial := range 10 {
		n := 2 + rng.IntN(3)
		whole, _ := NewMerger(n, testSize, 0, partsLayout, "c")
		split, _ := NewMerger(n, testSize, 0, partsLayout, "c")
		var recs []*Partial // every partition's parts, interleaved by partition
		var wholes []*Partial
		maxParts := 0
		for p := range n {
			pt := bigKeyed(rng, 0, p, n, 100+rng.IntN(400))
			wholes = append(wholes, pt)
			parts := pt.Split(limit)
			maxParts = max(maxParts, len(parts))
			for i, q := range parts {
				b := q.Encode()
				if len(b) > limit {
					t.Fatalf("trial %d partition %d: part %d of %d is %d bytes, over %d", trial, p, i, len(parts), len(b), limit)
				}
				d, err := DecodeForMerge(b)
				if err != nil {
					t.Fatalf("trial %d partition %d part %d: %v", trial, p, i, err)
				}
				recs = append(recs, d)
			}
		}
		if maxParts < 3 {
			t.Fatalf("trial %d: at most %d parts: the test splits too little", trial, maxParts)
		}
		// Interleave the partitions' records, each partition's in order.
		order := interleave(rng, recs)
		for off, q := range order {
			if _, err := split.Add(q, int64(off)); err != nil {
				t.Fatalf("trial %d: part %d of %d of partition %d: %v", trial, q.Part, q.Parts, q.Partition, err)
			}
		}
		for p, pt := range wholes {
			if r, err := whole.Add(pt, int64(p)); err != nil || r != Added {
				t.Fatal(r, err)
			}
		}
		a, ok1 := whole.Next()
		b, ok2 := split.Next()
		if !ok1 || !ok2 {
			t.Fatalf("trial %d: complete %v (whole) %v (split)", trial, ok1, ok2)
		}
		if got, want := renderKeys(b), renderKeys(a); got != want {
			t.Fatalf("trial %d: split merge differs:\n%s\nwant\n%s", trial, got, want)
		}
		if c := b.Counts(0, 1, nil); c[0] != float64(n) || b.Dropped(1) != int64(3*n) {
			t.Errorf("trial %d: cells %v, drops %d", trial, c, b.Dropped(1))
		}
		for p, pt := range wholes {
			if r, err := split.Add(pt, int64(len(order)+p)); err != nil || r != Duplicate {
				t.Errorf("trial %d partition %d: the whole after its parts: %v, %v; want duplicate", trial, p, r, err)
			}
		}
	}
	small := &Partial{V: Version, WindowMs: testSize, Partition: 0, Partitions: 1, Next: testSize,
		Keyed: []KeyedCell{keyedOf(1, 2, map[string]keyRow{"a": {1, []float64{1, 0}}})}}
	if ps := small.Split(limit); len(ps) != 1 || ps[0] != small {
		t.Errorf("a small Partial split in %d", len(ps))
	}
}

// interleave shuffles records across partitions, keeping each partition's
// order.
func interleave(rng *rand.Rand, recs []*Partial) []*Partial {
	by := map[int][]*Partial{}
	var ps []int
	for _, q := range recs {
		if by[q.Partition] == nil {
			ps = append(ps, q.Partition)
		}
		by[q.Partition] = append(by[q.Partition], q)
	}
	var out []*Partial
	for len(out) < len(recs) {
		p := ps[rng.IntN(len(ps))]
		if len(by[p]) > 0 {
			out = append(out, by[p][0])
			by[p] = by[p][1:]
		}
	}
	return out
}

// renderKeys renders a window's keys of histograms 1 and 2.
func renderKeys(w *Window) string {
	var s strings.Builder
	for h := 1; h <= 2; h++ {
		for i := range w.Keys(h) {
			k, u, c := w.Key(h, i, nil)
			fmt.Fprintf(&s, "%d %q %d %v\n", h, k, u, c)
		}
	}
	return s.String()
}

// TestPartsRefused: a sequence of parts that breaks is refused at the part
// that shows it, and the partition's Partial of the window is then
// missing; the commit point stays at the first part held.
func TestPartsRefused(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 30))
	mk := func() []*Partial {
		ps := bigKeyed(rng, 0, 0, 1, 300).Split(6000)
		if len(ps) < 3 {
			t.Fatalf("%d parts", len(ps))
		}
		return ps
	}
	for _, tc := range []struct {
		name   string
		mutate func(ps []*Partial) []*Partial
		reason Reason
	}{
		{"a part missing", func(ps []*Partial) []*Partial { return append(ps[:1:1], ps[2:]...) }, ReasonDecode},
		{"the first part missing", func(ps []*Partial) []*Partial { return ps[1:] }, ReasonDecode},
		{"parts swapped", func(ps []*Partial) []*Partial { ps[0], ps[1] = ps[1], ps[0]; return ps }, ReasonDecode},
		{"another header", func(ps []*Partial) []*Partial { q := *ps[1]; q.Config = "d"; ps[1] = &q; return ps }, ReasonDecode},
		{"counts in an earlier part", func(ps []*Partial) []*Partial {
			q := *ps[0]
			q.Counts = []Cell{{H: 0, G: 0, Counts: []float64{1, 0, 0}}}
			ps[0] = &q
			return ps
		}, ReasonShape},
		{"keys repeated across parts", func(ps []*Partial) []*Partial {
			q := *ps[1]
			q.Keyed = slices.Clone(q.Keyed)
			q.Keyed[0] = ps[0].Keyed[len(ps[0].Keyed)-1]
			ps[1] = &q
			return ps
		}, ReasonKeys},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := tc.mutate(mk())
			m, _ := NewMerger(1, testSize, 0, partsLayout, "c")
			var err error
			for off, q := range ps {
				d, derr := DecodeForMerge(q.Encode())
				if derr != nil {
					t.Fatal(derr)
				}
				if _, err = m.Add(d, int64(off)); err != nil {
					break
				}
			}
			if err == nil || ReasonOf(err) != tc.reason {
				t.Fatalf("%v, want reason %v", err, tc.reason)
			}
			if _, ok := m.Next(); ok {
				t.Error("the window completed without the partition's Partial")
			}
		})
	}
	// Held parts keep the commit point at the first one.
	ps := mk()
	m, _ := NewMerger(1, testSize, 0, partsLayout, "c")
	for i, q := range ps[:len(ps)-1] {
		if r, err := m.Add(q, int64(5+i)); err != nil || r != Added {
			t.Fatal(r, err)
		}
	}
	m.Skip(100)
	if c := m.CommitPoint(); c != 5 {
		t.Errorf("commit point %d with parts held from offset 5", c)
	}
	if _, err := m.Add(ps[len(ps)-1], 101); err != nil {
		t.Fatal(err)
	}
	if c := m.CommitPoint(); c != 5 {
		t.Errorf("commit point %d with the window of parts from offset 5 pending", c)
	}
	m.Released(mustNext(t, m, true))
	if c := m.CommitPoint(); c != 102 {
		t.Errorf("commit point %d after the window's release, want 102", c)
	}
	// Parts whose last part never comes (refused when read) are dropped
	// when their window is released, and no longer hold the commit point.
	m, _ = NewMerger(1, testSize, 0, partsLayout, "c")
	for i, q := range ps[:len(ps)-1] {
		if _, err := m.Add(q, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	one := &Partial{V: Version, WindowStart: 0, WindowMs: testSize, Partition: 0, Partitions: 1, Next: testSize, Config: "c"}
	if _, err := m.Add(one, 50); err != nil {
		t.Fatal(err)
	}
	if c := m.CommitPoint(); c != 0 {
		t.Fatalf("commit point %d with parts held from 0", c)
	}
	m.Released(mustNext(t, m, true))
	if c := m.CommitPoint(); c != 51 {
		t.Errorf("commit point %d after the window's release, want 51", c)
	}
}

func mustNext(t *testing.T, m *Merger, complete bool) *Window {
	t.Helper()
	w, ok := m.Next()
	if ok != complete {
		t.Fatalf("window complete: %v, want %v", ok, complete)
	}
	return w
}

// TestPartsSpilled: the parts of a Partial past the sums limit are read
// again from its first part (Reread), and merge as if never spilled.
func TestPartsSpilled(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	m, _ := NewMerger(1, testSize, 0, partsLayout, "c")
	m.SetSumsLimit(1)
	ref, _ := NewMerger(1, testSize, 0, partsLayout, "c")
	var recs, wholes []*Partial
	for w := range 3 {
		pt := bigKeyed(rng, int64(w)*testSize, 0, 1, 200)
		pt.Prev = nil
		wholes = append(wholes, pt)
		recs = append(recs, pt.Split(6000)...)
	}
	for i, q := range recs {
		if _, err := m.Add(q, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, q := range wholes {
		if _, err := ref.Add(q, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	for w := range 3 {
		if off, ok := m.Reread(); ok {
			if recs[off].Part != 0 {
				t.Fatalf("window %d: read again from part %d", w, recs[off].Part)
			}
			for i := int(off); i < len(recs); i++ {
				if _, err := m.Add(recs[i], int64(i)); err != nil {
					t.Fatal(err)
				}
			}
		}
		got, want := mustNext(t, m, true), mustNext(t, ref, true)
		if renderKeys(got) != renderKeys(want) || renderKeys(got) == "" {
			t.Fatalf("window %d: keys differ after the re-read", w)
		}
		m.Released(got)
		ref.Released(want)
	}
}

// TestPartsCorrupt: a Partial in parts with bytes flipped at random in one
// of its parts is refused or merged, never a panic, by DecodeForMerge and
// a Merger fed every part that decodes (then read through Keys and Key).
// Deterministic seed; each trial flips 1 to 4 bytes of one part.
func TestPartsCorrupt(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 28))
	var vals [][]byte
	for _, q := range bigKeyed(rng, 0, 0, 1, 60).Split(5200) {
		vals = append(vals, q.Encode())
	}
	if len(vals) < 3 {
		t.Fatalf("%d parts", len(vals))
	}
	decoded := make([]*Partial, len(vals)) // read-only: reused by every trial
	for i, v := range vals {
		p, err := DecodeForMerge(v)
		if err != nil {
			t.Fatal(err)
		}
		decoded[i] = p
	}
	completed := 0
	for trial := range 1500 {
		k := rng.IntN(len(vals))
		b := slices.Clone(vals[k])
		for range 1 + rng.IntN(4) {
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		}
		func() {
			defer func() {
				if e := recover(); e != nil {
					t.Fatalf("trial %d: panicked: %v", trial, e)
				}
			}()
			m, _ := NewMerger(1, testSize, 0, partsLayout, "c")
			for i, p := range decoded {
				if i == k {
					var err error
					if p, err = DecodeForMerge(b); err != nil {
						continue
					}
				}
				_, _ = m.Add(p, int64(i))
			}
			if w, ok := m.Next(); ok {
				completed++
				for h := range partsLayout.Bins {
					for i := range w.Keys(h) {
						_, _, _ = w.Key(h, i, nil)
					}
				}
			}
		}()
	}
	if completed == 0 {
		t.Error("no trial completed its window: the corruption never reached the merge")
	}
}
