package partial

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

// TestDecodeForMergeRefusesRogueArrow: DecodeForMerge, which keeps an
// Arrow partial's count cells as columns and checks them in one loop,
// refuses every rogue count DecodePartial refuses, with the same reason
// and message, wherever the bad value lies (first cell, last cell, last
// bin).
func TestDecodeForMergeRefusesRogueArrow(t *testing.T) {
	good := func() *Partial {
		return &Partial{V: Version, WindowStart: 60, WindowMs: 60, Partition: 0, Partitions: 2, Next: 120,
			Counts: []Cell{{H: 0, G: 0, Counts: []float64{1, 2}}, {H: 0, G: 1, Counts: []float64{0, 3}}, {H: 1, G: 0, Counts: []float64{4, 5, 6}}}}
	}
	for _, tc := range []struct {
		name   string
		cell   int
		bin    int
		value  float64
		reason Reason
	}{
		{"negative count first cell", 0, 0, -1, ReasonCount},
		{"fractional count middle cell", 1, 1, 0.5, ReasonCount},
		{"NaN last cell last bin", 2, 2, math.NaN(), ReasonCount},
		{"+Inf", 2, 0, math.Inf(1), ReasonCount},
		{"-Inf", 0, 1, math.Inf(-1), ReasonCount},
		{"above 2^53", 1, 0, 1 << 54, ReasonCount},
		{"tiny fraction", 0, 0, 5e-324, ReasonCount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good()
			p.Counts[tc.cell].Counts[tc.bin] = tc.value
			b := p.Encode()
			_, want := DecodePartial(b)
			_, got := DecodeForMerge(b)
			if !errors.Is(got, ErrFormat) || ReasonOf(got) != tc.reason || want == nil || got.Error() != want.Error() {
				t.Fatalf("DecodeForMerge = %v, want the DecodePartial's refusal %v (reason %v)", got, want, tc.reason)
			}
		})
	}
	p := good()
	p.Counts[1].G = -1
	if _, err := DecodeForMerge(p.Encode()); ReasonOf(err) != ReasonShape {
		t.Errorf("a cell of group -1: %v, want a ReasonShape refusal", err)
	}
	p = good()
	p.Counts[0].Counts[0] = math.Copysign(0, -1)
	p.Counts[2].Counts[2] = 1 << 53
	if _, err := DecodeForMerge(p.Encode()); err != nil {
		t.Errorf("counts -0 and 2^53 refused: %v", err)
	}
}

// TestDecodeForMergeSameMerge: a Partial DecodeForMerge read (columns)
// and the same one DecodePartial read (Cells) have the same cells, the
// same total, the same encodings, and merge to the same sums; one is the
// other's Duplicate, and a different count a Conflict; a cell that does
// not fit the layout is refused the same way.
func TestDecodeForMergeSameMerge(t *testing.T) {
	p := &Partial{V: Version, WindowStart: 0, WindowMs: 60, Partition: 0, Partitions: 2, Next: 60,
		Counts:   []Cell{{H: 0, G: 2, Counts: []float64{1, 2}}, {H: 1, G: 0, Counts: []float64{4, 5, 6}}},
		Averages: []AverageCell{{H: 2, Users: []uint64{7}, Vectors: [][]float64{{0.25, 0.75}}}}}
	b := p.Encode()
	cells, err := DecodePartial(b)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := DecodeForMerge(b)
	if err != nil {
		t.Fatal(err)
	}
	if cols.cols == nil || cols.Counts != nil {
		t.Fatalf("DecodeForMerge kept no columns (Counts %v)", cols.Counts)
	}
	if !reflect.DeepEqual(cols.Cells(), cells.Counts) || !reflect.DeepEqual(cols.Averages, cells.Averages) || cols.Total() != 18 || cells.Total() != 18 {
		t.Fatalf("columns %v (total %v), cells %v (total %v)", cols.Cells(), cols.Total(), cells.Counts, cells.Total())
	}
	for _, enc := range []func(*Partial) []byte{(*Partial).Encode, (*Partial).EncodeJSON} {
		back, err := DecodePartial(enc(cols))
		if err != nil || !reflect.DeepEqual(back.Counts, cells.Counts) {
			t.Fatalf("re-encoded from columns: %v, %v", back, err)
		}
	}
	layout := Layout{Bins: []int{2, 3}, Groups: []int{3, 1}}
	merged := func(first, second *Partial) ([][]float64, AddResult) {
		m, err := NewMerger(1, 60, 0, layout, "")
		if err != nil {
			t.Fatal(err)
		}
		first.Partitions, second.Partitions = 1, 1
		if r, err := m.Add(first, 0); err != nil || r != Added {
			t.Fatalf("Add = %v, %v", r, err)
		}
		r, err := m.Add(second, 1)
		if err != nil {
			t.Fatal(err)
		}
		w, ok := m.Next()
		if !ok {
			t.Fatal("window not complete")
		}
		return [][]float64{w.Counts(0, 2, nil), w.Counts(1, 0, nil), w.Counts(0, 0, nil)}, r
	}
	s1, r1 := merged(cols, cells)
	s2, r2 := merged(cells, cols)
	want := [][]float64{{1, 2}, {4, 5, 6}, {0, 0}}
	if !reflect.DeepEqual(s1, want) || !reflect.DeepEqual(s2, want) || r1 != Duplicate || r2 != Duplicate {
		t.Fatalf("merged %v (%v), %v (%v), want %v as duplicates", s1, r1, s2, r2, want)
	}
	other := *p
	other.Counts = []Cell{{H: 0, G: 2, Counts: []float64{1, 3}}, {H: 1, G: 0, Counts: []float64{4, 5, 6}}}
	changed, err := DecodeForMerge(other.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if _, r := merged(cells, changed); r != Conflict {
		t.Errorf("a different count from columns: %v, want Conflict", r)
	}
	m, err := NewMerger(1, 60, 0, Layout{Bins: []int{2, 2}, Groups: []int{3, 1}}, "")
	if err != nil {
		t.Fatal(err)
	}
	cols.Partitions = 1
	if _, err := m.Add(cols, 0); ReasonOf(err) != ReasonShape {
		t.Errorf("a cell of 3 bins for a histogram of 2, from columns: %v, want ReasonShape", err)
	}
}

// TestWholeCounts: wholeCounts, the branch-free check of a column of
// counts, agrees with wholeCount on every special value, alone and
// among counts.
func TestWholeCounts(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), 1, 2, 3, 1e15, 1<<53 - 1, 1 << 53, 1<<53 + 2, 1 << 54, 1e300,
		0.5, 1.5, 5e-324, -5e-324, 2.2250738585072014e-308, -1, -2, -(1 << 53), -(1 << 63), 1 << 63, 1 << 64,
		math.Inf(1), math.Inf(-1), math.NaN(), -math.NaN(), math.Float64frombits(0x7ff0000000000001), math.Float64frombits(0xfff8000000000001),
		math.Nextafter(1<<53, 0), math.Nextafter(1, 2), math.Nextafter(1<<52, 0), math.MaxFloat64, math.SmallestNonzeroFloat64}
	for _, v := range vals {
		want := wholeCount(v)
		for _, col := range [][]float64{{v}, {1, 2, v, 3}, {v, 0, 0}} {
			if got := wholeCounts(col); got != want {
				t.Errorf("wholeCounts(%v) = %v, wholeCount(%v) = %v", col, got, v, want)
			}
		}
	}
}
