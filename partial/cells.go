package partial

// A Partial's count cells as its checks and the Merger read them: from
// Counts, or — a Partial DecodeForMerge read from the Arrow encoding —
// from the record's columns, without a Cell per cell. Issue 28 item 4:
// at 100 partitions × 10,000 cells a window's Partials made a million
// Cells (40 MB of pointer-holding memory per window for the collector),
// about a third of decode + merge (BenchmarkDecodeMerge100x10000, on a
// 2-core machine: 66–69 CPU-ms a window with the Cells, 42–47 without;
// 0.6 MB allocated a window instead of 40.8).

// countColumns are the count cells of an Arrow-decoded Partial: cell i is
// (h[i], g[i], vals[offs[i]:offs[i+1]]), pointing into the record value.
// fillCells checked offs: non-decreasing, within vals, len(h)+1 of them.
type countColumns struct {
	h, g []int32
	offs []int32
	vals []float64
}

// cellView reads a Partial's count cells, whichever way they are held.
type cellView struct {
	list []Cell
	cols *countColumns
}

// cells returns the view of p's count cells: its columns when
// DecodeForMerge kept them, else Counts.
func (p *Partial) cells() cellView { return cellView{list: p.Counts, cols: p.cols} }

// len is the number of cells.
func (c cellView) len() int {
	if c.cols != nil {
		return len(c.cols.h)
	}
	return len(c.list)
}

// at returns cell i: its histogram, group and counts (not to be written).
func (c cellView) at(i int) (h, g int, counts []float64) {
	if k := c.cols; k != nil {
		return int(k.h[i]), int(k.g[i]), k.vals[k.offs[i]:k.offs[i+1]]
	}
	x := &c.list[i]
	return x.H, x.G, x.Counts
}

// values returns all the cells' counts, in cell order, as one slice when
// they are held as columns (ok false otherwise).
func (c cellView) values() (vals []float64, ok bool) {
	k := c.cols
	if k == nil {
		return nil, false
	}
	return k.vals[k.offs[0]:k.offs[len(k.h)]], true
}

// Cells returns p's count cells: Counts, or, for a Partial DecodeForMerge
// read from the Arrow encoding, its cells made from the record's columns
// (their Counts point into the record value; not to be written).
func (p *Partial) Cells() []Cell {
	c := p.cells()
	if c.cols == nil {
		return p.Counts
	}
	out := make([]Cell, c.len())
	for i := range out {
		h, g, v := c.at(i)
		out[i] = Cell{H: h, G: g, Counts: v[:len(v):len(v)]}
	}
	return out
}

// DecodeForMerge is DecodePartial, with the same checks, for a reader
// that hands the Partial to a Merger (the releaser's): an Arrow-encoded
// Partial's count cells stay in the record's columns — Counts is nil,
// Cells returns them — instead of one Cell per cell. The Partial is
// read-only (a Counts set on it later would hide the columns from
// Merger.Add).
func DecodeForMerge(b []byte) (*Partial, error) { return decodePartial(b, true) }
