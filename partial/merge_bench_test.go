package partial

import (
	"fmt"
	"testing"

	"github.com/dpstage/stage/internal/lib/cputime"
)

// benchParts, benchGroups and benchBins are the benchmarks' window: 100
// source partitions' Partials of 10,000 (histogram, group) cells each
// (one histogram of 10,000 groups × 5 bins, every cell non-zero: the
// worst case a partial of that size can be).
const benchParts, benchGroups, benchBins = 100, 10000, 5

// benchPartials are the Partials of one window (window start 0).
func benchPartials() []*Partial {
	ps := make([]*Partial, benchParts)
	for p := range ps {
		cells := make([]Cell, benchGroups)
		for g := range cells {
			c := make([]float64, benchBins)
			for i := range c {
				c[i] = float64((p + g + i) % 7)
			}
			cells[g] = Cell{H: 0, G: g, Counts: c}
		}
		ps[p] = &Partial{V: Version, WindowMs: 1000, Partition: p, Partitions: benchParts, Next: 1000, Counts: cells}
	}
	return ps
}

// benchMerge runs b.N windows: window i's Partials are next(i, p) for
// every partition p, added, the window's merged cells read back (the
// releaser's Counts calls) and the window released.
func benchMerge(b *testing.B, next func(i, p int) *Partial) {
	var dst []float64
	var sum float64
	benchWindows(b, Layout{Bins: []int{benchBins}, Groups: []int{benchGroups}}, next, func(w *Window) {
		for g := range benchGroups {
			dst = w.Counts(0, g, dst)
			sum += dst[0]
		}
	})
	if sum == 0 {
		b.Fatal("no counts merged")
	}
}

// benchWindows runs b.N windows of layout: window i's Partials are
// next(i, p) for every partition p, added, the window read (read) and
// released.
func benchWindows(b *testing.B, layout Layout, next func(i, p int) *Partial, read func(w *Window)) {
	m, err := NewMerger(benchParts, 1000, 0, layout, "")
	if err != nil {
		b.Fatal(err)
	}
	off := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Now()
	for i := 0; i < b.N; i++ {
		start := int64(i) * 1000
		for p := range benchParts {
			pt := next(i, p)
			pt.WindowStart, pt.Next = start, start+1000
			if r, err := m.Add(pt, off); err != nil || r != Added {
				b.Fatalf("window %d partition %d: %v, %v", start, p, r, err)
			}
			off++
		}
		w, ok := m.Next()
		if !ok {
			b.Fatalf("window %d not complete", start)
		}
		read(w)
		m.Released(w)
	}
	b.StopTimer()
	// The process's CPU time per op (GC workers included): on a shared,
	// loaded machine the wall clock (ns/op) counts the time other
	// processes held the cores; this does not.
	b.ReportMetric(float64((cputime.Now()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
}

// BenchmarkMerge100x10000 merges one window per op, from decoded
// Partials. Issue 22 item 2: ≤ 50 ms per window on one core.
func BenchmarkMerge100x10000(b *testing.B) {
	ps := benchPartials()
	benchMerge(b, func(_, p int) *Partial { return ps[p] })
}

// BenchmarkDecodeMerge100x10000 is BenchmarkMerge100x10000 from the
// records' bytes: per op, one window's 100 record values are decoded
// (DecodeForMerge, the releaser's reader's) and merged. Sub-benchmarks:
// the Arrow encoding (Encode) and the JSON one of older versions
// (EncodeJSON), side by side, and arrow-cells: Arrow decoded by
// DecodePartial (a Cell per cell, as the releaser read it before). Issue
// 28 item 4: ≤ 50 ms per window for Arrow.
func BenchmarkDecodeMerge100x10000(b *testing.B) {
	for _, enc := range []struct {
		name   string
		encode func(*Partial) []byte
		decode func([]byte) (*Partial, error)
	}{{"arrow", (*Partial).Encode, DecodeForMerge}, {"json", (*Partial).EncodeJSON, DecodeForMerge}, {"arrow-cells", (*Partial).Encode, DecodePartial}} {
		b.Run(enc.name, func(b *testing.B) {
			vals := make([][]byte, benchParts)
			for p, pt := range benchPartials() {
				vals[p] = enc.encode(pt)
			}
			benchMerge(b, func(_, p int) *Partial {
				pt, err := enc.decode(vals[p])
				if err != nil {
					b.Fatal(err)
				}
				return pt
			})
		})
	}
}

// benchKeyedPartials are one window's Partials of a selecting histogram
// of benchBins bins: each of the 100 partitions has 10,000 keys of 16
// bytes, one user and one event each; shift is how far partition p's keys
// are from p−1's (10,000: disjoint, a window of 10⁶ keys; 100: ~20,000
// keys, most in every partition).
func benchKeyedPartials(shift int) []*Partial {
	ps := make([]*Partial, benchParts)
	c := make([]float64, benchBins)
	for p := range ps {
		k := KeyedCell{H: 0, Bins: benchBins}
		for g := range benchGroups {
			clear(c)
			c[g%benchBins] = 1
			k.Append(fmt.Sprintf("group-key-%06d", p*shift+g), 1, c)
		}
		ps[p] = &Partial{V: Version, WindowMs: 1000, Partition: p, Partitions: benchParts, Next: 1000, Keyed: []KeyedCell{k}}
	}
	return ps
}

// BenchmarkDecodeMergeKeys100x10000 (issue 30): per op, one window's 100
// Arrow record values of 10,000 keys each are decoded (DecodeForMerge),
// merged, every merged key read back (Window.Key, the releaser's) and the
// window released.
func BenchmarkDecodeMergeKeys100x10000(b *testing.B) {
	for _, tc := range []struct {
		name  string
		shift int
	}{{"shared", 100}, {"disjoint", benchGroups}} {
		b.Run(tc.name, func(b *testing.B) {
			vals := make([][]byte, benchParts)
			for p, pt := range benchKeyedPartials(tc.shift) {
				vals[p] = pt.Encode()
			}
			var dst []float64
			keys := 0
			benchWindows(b, Layout{Bins: []int{benchBins}, Groups: []int{0}, Selects: []bool{true}}, func(_, p int) *Partial {
				pt, err := DecodeForMerge(vals[p])
				if err != nil {
					b.Fatal(err)
				}
				return pt
			}, func(w *Window) {
				keys = w.Keys(0)
				for k := range keys {
					_, _, dst = w.Key(0, k, dst)
				}
			})
			b.ReportMetric(float64(keys), "keys")
			b.ReportMetric(float64(len(vals[0])), "record-bytes")
		})
	}
}

// BenchmarkSplitEncodeKeys100000 (issue 30): a bounder's side of one
// window with 100,000 keys of 16 bytes and 5 bins in one partition: the
// Partial split into parts (Split) and every part encoded, per op.
func BenchmarkSplitEncodeKeys100000(b *testing.B) {
	k := KeyedCell{H: 0, Bins: benchBins}
	c := make([]float64, benchBins)
	for g := range 100000 {
		clear(c)
		c[g%benchBins] = 1
		k.Append(fmt.Sprintf("group-key-%06d", g), 1, c)
	}
	pt := &Partial{V: Version, WindowMs: 1000, Partition: 0, Partitions: 1, Next: 1000, Keyed: []KeyedCell{k}}
	b.ReportAllocs()
	b.ResetTimer()
	parts, size := 0, 0
	for i := 0; i < b.N; i++ {
		ps := pt.Split(MaxRecordBytes)
		parts, size = len(ps), 0
		for _, q := range ps {
			size += len(q.Encode())
		}
	}
	b.ReportMetric(float64(parts), "parts")
	b.ReportMetric(float64(size), "bytes")
}
