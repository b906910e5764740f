package partial

// The Merger's running sums, their limit and re-reading, and the
// per-(window, partition) digest (see Merger, "Merging is incremental").

import (
	"math"
)

// holdsSums reports whether the window starting at start is within the
// sums limit.
func (m *Merger) holdsSums(start int64) bool {
	return start < m.released+int64(m.limit)*m.sizeMs && (start == m.released || m.keyBytes < m.keyLimit)
}

// sum adds p's counts to w's sums, and sets its partition's digest, in
// one pass over the counts (the digest of the first Partial of a
// (window, partition) is needed only when a second one comes).
func (m *Merger) sum(w *Window, p *Partial) {
	cs := p.cells()
	if cs.len() > 0 && w.sums == nil {
		w.sums = make([]float64, m.cells)
	}
	var digest uint64
	for k := range cs.len() {
		hist, g, counts := cs.at(k)
		dst := w.sums[m.offs[hist]+g*len(counts):][:len(counts)]
		h := cellSeed(hist, g)
		for i, v := range counts {
			dst[i] += v
			h = cellStep(h, v)
		}
		digest += mix64(h)
	}
	w.digest[p.Partition] = digest + m.sumKeyed(w, p)
	for _, d := range p.Dropped {
		if d.H >= len(m.layout.Bins) {
			continue // not a histogram of this layout
		}
		if w.dropped == nil {
			w.dropped = make([]int64, len(m.layout.Bins))
		}
		w.dropped[d.H] += d.N
	}
}

// reread reports whether the record at offset is read again after a
// Reread (before end): it then changes nothing but a spilled Partial's
// counts. The re-read ends with the record before end.
func (m *Merger) reread(offset int64) bool {
	if !m.rereading || offset >= m.end {
		return false
	}
	if offset == m.end-1 {
		m.rereading = false
	}
	return true
}

// addAgain is Add for a Partial read again after a Reread: a spilled
// Partial of a window now within the sums limit has its counts summed
// (when they are the counts read the first time); any other is Skipped:
// it was fed before.
func (m *Merger) addAgain(p *Partial, foreign bool) AddResult {
	w := m.pending[p.WindowStart]
	if foreign || w == nil || w.state[p.Partition] != partSpilled || !m.holdsSums(p.WindowStart) {
		return Skipped
	}
	if partialDigest(p) != w.digest[p.Partition] {
		return Conflict // not the Partial read the first time (the window stays held)
	}
	m.sum(w, p)
	w.state[p.Partition] = partMerged
	w.spilled--
	return Skipped
}

// SetSumsLimit sets how many windows, from the next one to release on,
// hold running sums (at least 1; NewMerger sets DefaultSumsBytes' worth,
// and at least 4). A Partial of a window past the limit is kept as its
// presence and digest only, and its counts are read again later
// (Reread).
func (m *Merger) SetSumsLimit(windows int) { m.limit = max(windows, 1) }

// Reread returns the partials-topic offset to read from again, when the
// next window is complete but holds Partials whose counts were not kept
// (they came while it was past the sums limit): the caller seeks its
// reader there and feeds the records again (Add and SetIdle then only
// fill those counts in, until the record before the furthest one fed).
// false: nothing to read again, or a re-read is under way.
func (m *Merger) Reread() (int64, bool) {
	w := m.pending[m.released]
	if m.rereading || w == nil || w.spilled == 0 {
		return 0, false
	}
	m.rereading = true
	return w.spillFrom, true
}

// cellDigest is a 64-bit digest of one cell (its histogram, group and
// counts, in bin order): FNV-1a over 64-bit words (one multiply per
// count), then one splitmix64 finalizer per cell. A Partial's digest is
// the sum of its cells' (mod 2^64): the same whatever the order of its
// cells, as the old comparison of the sorted cells was. It only tells a
// Duplicate from a Conflict (the first Partial is kept either way); two
// Partials of one (window, partition) with different counts but the same
// digest — not a thing the bounders' transactions let happen at all —
// would be reported as a duplicate.
func cellDigest(hist, g int, counts []float64) uint64 {
	h := cellSeed(hist, g)
	for _, v := range counts {
		h = cellStep(h, v)
	}
	return mix64(h)
}

// partialDigest is the sum of p's cells' cellDigest.
func partialDigest(p *Partial) uint64 {
	var digest uint64
	cs := p.cells()
	for k := range cs.len() {
		digest += cellDigest(cs.at(k))
	}
	return digest + keyedDigest(p)
}

// cellSeed and cellStep are cellDigest's start and step (Add inlines the
// loop to sum and digest in one pass).
func cellSeed(hist, g int) uint64 { return uint64(hist)<<32 ^ uint64(uint32(g)) ^ 0xcbf29ce484222325 }

func cellStep(h uint64, v float64) uint64 { return (h ^ math.Float64bits(v)) * 0x100000001b3 }

// mix64 is splitmix64's finalizer: a bijection of uint64 with full
// avalanche.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
