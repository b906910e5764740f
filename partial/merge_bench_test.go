package partial

import "testing"

// BenchmarkMerge100x10000 merges one window per op: 100 source partitions'
// Partials of 10,000 (histogram, group) cells each (one histogram of
// 10,000 groups × 5 bins, every cell non-zero: the worst case a partial of
// that size can be), then reads every merged cell back (the releaser's
// Counts calls) and releases the window. Issue 22 item 2: ≤ 50 ms per
// window on one core.
func BenchmarkMerge100x10000(b *testing.B) {
	const parts, groups, bins = 100, 10000, 5
	layout := Layout{Bins: []int{bins}, Groups: []int{groups}}
	// The partials of one window, reused for every window (only the
	// window's start changes).
	ps := make([]*Partial, parts)
	for p := range ps {
		cells := make([]Cell, groups)
		for g := range cells {
			c := make([]float64, bins)
			for i := range c {
				c[i] = float64((p + g + i) % 7)
			}
			cells[g] = Cell{H: 0, G: g, Counts: c}
		}
		ps[p] = &Partial{V: Version, WindowMs: 1000, Partition: p, Partitions: parts, Counts: cells}
	}
	m, err := NewMerger(parts, 1000, 0, layout, "")
	if err != nil {
		b.Fatal(err)
	}
	var dst []float64
	var sum float64
	off := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := int64(i) * 1000
		for _, p := range ps {
			p.WindowStart, p.Next = start, start+1000
			if r, err := m.Add(p, off); err != nil || r != Added {
				b.Fatalf("window %d partition %d: %v, %v", start, p.Partition, r, err)
			}
			off++
		}
		w, ok := m.Next()
		if !ok {
			b.Fatalf("window %d not complete", start)
		}
		for g := range groups {
			dst = w.Counts(0, g, dst)
			sum += dst[0]
		}
		m.Released(w)
	}
	b.StopTimer()
	if sum == 0 {
		b.Fatal("no counts merged")
	}
}

// BenchmarkDecodeMerge100x10000 is BenchmarkMerge100x10000 from the
// records' bytes: per op, one window's 100 partial record values of
// 10,000 cells each are decoded (DecodePartial) and merged, the merged
// cells read back and the window released. Sub-benchmarks: the Arrow
// encoding (Encode) and the JSON one of older versions (EncodeJSON), side
// by side. Issue 28 item 4: ≤ 50 ms per window for Arrow.
func BenchmarkDecodeMerge100x10000(b *testing.B) {
	const parts, groups, bins = 100, 10000, 5
	layout := Layout{Bins: []int{bins}, Groups: []int{groups}}
	for _, enc := range []struct {
		name   string
		encode func(*Partial) []byte
	}{{"arrow", (*Partial).Encode}, {"json", (*Partial).EncodeJSON}} {
		b.Run(enc.name, func(b *testing.B) {
			// The record values of one window; the window's start is
			// shifted after decoding (a record value names its window).
			vals := make([][]byte, parts)
			for p := range vals {
				cells := make([]Cell, groups)
				for g := range cells {
					c := make([]float64, bins)
					for i := range c {
						c[i] = float64((p + g + i) % 7)
					}
					cells[g] = Cell{H: 0, G: g, Counts: c}
				}
				vals[p] = enc.encode(&Partial{WindowMs: 1000, Partition: p, Partitions: parts, Next: 1000, Counts: cells})
			}
			m, err := NewMerger(parts, 1000, 0, layout, "")
			if err != nil {
				b.Fatal(err)
			}
			var dst []float64
			var sum float64
			off := int64(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := int64(i) * 1000
				for _, v := range vals {
					p, err := DecodePartial(v)
					if err != nil {
						b.Fatal(err)
					}
					p.WindowStart, p.Next = start, start+1000
					if r, err := m.Add(p, off); err != nil || r != Added {
						b.Fatalf("window %d partition %d: %v, %v", start, p.Partition, r, err)
					}
					off++
				}
				w, ok := m.Next()
				if !ok {
					b.Fatalf("window %d not complete", start)
				}
				for g := range groups {
					dst = w.Counts(0, g, dst)
					sum += dst[0]
				}
				m.Released(w)
			}
			b.StopTimer()
			if sum == 0 {
				b.Fatal("no counts merged")
			}
		})
	}
}
