package partial

import (
	"bytes"
	"math"
)

// Merging the keyed cells of selecting histograms (keyed.go) into a
// Window, which then implements release.Keyed.
//
// A key's distinct users and counts in the window are the sums of its
// partitions' (each user is counted by the one partition its events are
// in). Each Partial's keys of a histogram come sorted, so the Merger keeps
// them as sorted runs, merged as a binary counter is incremented: a new
// run (one Partial) is merged with the last run while that one holds no
// more Partials than it — each key entry is merged at most ⌈log₂ N⌉ + 1
// times over N partitions, and keys several partitions share are summed
// into one entry as soon as their runs meet. Window.Keys merges the runs
// left (at most ⌈log₂ N⌉) into one. The cost of a window is O(E·log N)
// for E key entries over its Partials, each step a sequential pass; a map
// of keys would cost a hash and a lookup per entry, a string per
// distinct key, and a sort of the distinct keys at the end.
//
// Memory: the runs of a window hold, per key entry, its bytes, 8 bytes of
// offset, 8 of users and 8 per bin; keys several partitions share are held
// once per run until their runs merge, and the last cell added points
// into its record until the next one comes. The windows after the next
// one hold keys only while the pending windows' keyed cells are under
// DefaultKeyBytes (Merger, "Memory"); the next window holds all of its
// own, which its bounders' key sampling (selection.key_sample_rate)
// bounds.

// keyRun is a sorted run of keys: key i is data[offs[i]:offs[i+1]], with
// users[i] and counts[i·bins:(i+1)·bins]; parts is how many Partials'
// cells it merges.
type keyRun struct {
	data   []byte
	offs   []int
	users  []int64
	counts []float64
	parts  int
}

func (r *keyRun) len() int                  { return len(r.users) }
func (r *keyRun) keyBytes() int             { return len(r.data) }
func (r *keyRun) key(i int) []byte          { return r.data[r.offs[i]:r.offs[i+1]] }
func (r *keyRun) userAt(i int) int64        { return r.users[i] }
func (r *keyRun) row(i, bins int) []float64 { return r.counts[i*bins : (i+1)*bins] }

func (c *KeyedCell) len() int { return c.Len() }
func (c *KeyedCell) keyBytes() int {
	if c.Len() == 0 {
		return 0
	}
	return int(c.offs[c.Len()] - c.offs[0])
}
func (c *KeyedCell) userAt(i int) int64        { return int64(c.users[i]) }
func (c *KeyedCell) row(i, bins int) []float64 { return c.counts[i*bins : (i+1)*bins] }

// keySeq is a sorted run of keys: a keyRun, or one Partial's KeyedCell.
type keySeq interface {
	len() int
	keyBytes() int
	key(i int) []byte
	userAt(i int) int64
	row(i, bins int) []float64
}

// keyMerge is one selecting histogram's keys in a Window: runs, each
// holding more Partials than the next (see above), and at most one
// Partial's cell not merged yet (pend: it points into its record, which
// it keeps; the next cell added merges with it into a run). spare holds
// the buffers of runs merged away, for the next merges' output.
type keyMerge struct {
	bins  int
	runs  []keyRun
	pend  *KeyedCell
	spare []keyRun
}

// add merges one Partial's cell in.
func (km *keyMerge) add(c *KeyedCell) {
	if km.pend == nil {
		km.pend = c
		return
	}
	km.runs = append(km.runs, km.merge(km.pend, c, 2))
	km.pend = nil
	for k := len(km.runs); k >= 2 && km.runs[k-2].parts <= km.runs[k-1].parts; k-- {
		km.mergeLast()
	}
}

// mergeLast merges the last two runs into one.
func (km *keyMerge) mergeLast() {
	k := len(km.runs)
	a, b := km.runs[k-2], km.runs[k-1]
	km.runs[k-2] = km.merge(&a, &b, a.parts+b.parts)
	km.runs = km.runs[:k-1]
	km.spare = append(km.spare, a, b)
}

// merge merges a and b into a run of parts Partials, in spare buffers
// when one is large enough.
func (km *keyMerge) merge(a, b keySeq, parts int) keyRun {
	n := a.len() + b.len()
	var dst keyRun
	for i, r := range km.spare {
		if cap(r.users) >= n && cap(r.data) >= a.keyBytes()+b.keyBytes() && cap(r.counts) >= n*km.bins {
			dst = r
			km.spare = append(km.spare[:i], km.spare[i+1:]...)
			break
		}
	}
	if dst.users == nil {
		dst = keyRun{data: make([]byte, 0, a.keyBytes()+b.keyBytes()), offs: make([]int, 0, n+1), users: make([]int64, 0, n),
			counts: make([]float64, 0, n*km.bins)}
	}
	if len(km.spare) > 2 {
		km.spare = km.spare[len(km.spare)-2:] // the largest are the latest
	}
	dst.parts = parts
	mergeRuns(&dst, a, b, km.bins)
	return dst
}

// merged returns the one run of every cell added (merging what is left).
func (km *keyMerge) merged() *keyRun {
	if km.pend != nil {
		if k := len(km.runs); k > 0 {
			a := km.runs[k-1]
			km.runs[k-1] = km.merge(&a, km.pend, a.parts+1)
			km.spare = append(km.spare, a)
		} else {
			km.runs = append(km.runs, km.merge(km.pend, &keyRun{}, 1))
		}
		km.pend = nil
	}
	for len(km.runs) >= 2 {
		km.mergeLast()
	}
	km.spare = nil
	return &km.runs[0]
}

// mergeRuns merges two sorted runs into dst (emptied first), adding the
// users and counts of a key both hold.
func mergeRuns(dst *keyRun, a, b keySeq, bins int) {
	na, nb := a.len(), b.len()
	out := dst
	out.data, out.offs, out.users, out.counts = out.data[:0], append(out.offs[:0], 0), out.users[:0], out.counts[:0]
	i, j := 0, 0
	take := func(k []byte, u int64, row []float64) {
		out.data = append(out.data, k...)
		out.offs = append(out.offs, len(out.data))
		out.users = append(out.users, u)
		out.counts = append(out.counts, row...)
	}
	for i < na && j < nb {
		ka, kb := a.key(i), b.key(j)
		switch c := bytes.Compare(ka, kb); {
		case c < 0:
			take(ka, a.userAt(i), a.row(i, bins))
			i++
		case c > 0:
			take(kb, b.userAt(j), b.row(j, bins))
			j++
		default:
			take(ka, a.userAt(i)+b.userAt(j), a.row(i, bins))
			s := out.counts[len(out.counts)-bins:]
			for k, v := range b.row(j, bins) {
				s[k] += v
			}
			i++
			j++
		}
	}
	for ; i < na; i++ {
		take(a.key(i), a.userAt(i), a.row(i, bins))
	}
	for ; j < nb; j++ {
		take(b.key(j), b.userAt(j), b.row(j, bins))
	}
}

// sumKeyed merges p's keyed cells into w and returns their digest.
func (m *Merger) sumKeyed(w *Window, p *Partial) uint64 {
	if len(p.Keyed) == 0 {
		return 0
	}
	if w.keys == nil {
		w.keys = make([]*keyMerge, len(m.layout.Bins))
	}
	for j := range p.Keyed {
		c := &p.Keyed[j]
		if c.Len() == 0 {
			continue
		}
		if w.keys[c.H] == nil {
			w.keys[c.H] = &keyMerge{bins: c.Bins}
		}
		w.keys[c.H].add(c)
		n := keyedBytes(c)
		w.keyBytes += n
		m.keyBytes += n
	}
	return keyedDigest(p)
}

// DefaultKeyBytes bounds the keyed cells the windows after the next one
// hold (Merger, "Memory"): 256 MiB.
const DefaultKeyBytes = 256 << 20

// SetKeyBytesLimit sets how many bytes of keyed cells the pending windows
// after the next one may hold (NewMerger sets DefaultKeyBytes); past it, a
// Partial of such a window is spilled (read again once its window is
// next: Reread).
func (m *Merger) SetKeyBytesLimit(b int64) { m.keyLimit = b }

// keyedBytes is a keyed cell's size as the Merger holds it: per key its
// bytes, its offset, its users and its counts.
func keyedBytes(c *KeyedCell) int64 {
	return int64(c.keyBytes() + c.Len()*(16+8*c.Bins))
}

// keyedDigest is the digest of p's keyed cells (partialDigest's part):
// per key, cellDigest's steps over the key's bytes (8 at a time), users
// and counts, seeded by the histogram.
func keyedDigest(p *Partial) uint64 {
	var digest uint64
	for j := range p.Keyed {
		c := &p.Keyed[j]
		for i := range c.Len() {
			k, counts := c.key(i), c.counts[i*c.Bins:(i+1)*c.Bins]
			h := cellSeed(c.H, -1-len(k))
			for len(k) >= 8 {
				h = cellStep(h, math.Float64frombits(uint64(k[0])|uint64(k[1])<<8|uint64(k[2])<<16|uint64(k[3])<<24|
					uint64(k[4])<<32|uint64(k[5])<<40|uint64(k[6])<<48|uint64(k[7])<<56))
				k = k[8:]
			}
			var tail uint64
			for s, b := range k {
				tail |= uint64(b) << (8 * s)
			}
			h = cellStep(cellStep(h, math.Float64frombits(tail)), math.Float64frombits(c.users[i]))
			for _, v := range counts {
				h = cellStep(h, v)
			}
			digest += mix64(h)
		}
	}
	return digest
}

// Keys is the number of histogram h's keys in the window, merged over its
// Partials (release.Keyed; 0 for a histogram that does not select, or
// without keys).
func (w *Window) Keys(h int) int {
	if w == nil || h < 0 || h >= len(w.keys) || w.keys[h] == nil {
		return 0
	}
	return w.keys[h].merged().len()
}

// Key returns histogram h's i-th key in ascending byte order, its
// distinct users summed over the window's Partials, and appends its
// counts to dst[:0] (release.Keyed). Private, like Counts.
func (w *Window) Key(h, i int, dst []float64) (key string, users int64, counts []float64) {
	km := w.keys[h]
	r := km.merged()
	return string(r.key(i)), r.users[i], append(dst[:0], r.row(i, km.bins)...)
}

// KeyedTotal is the sum of histogram h's keys' counts in the window
// (private: for the operator's drop share only).
func (w *Window) KeyedTotal(h int) float64 {
	var n float64
	if w.Keys(h) > 0 {
		for _, v := range w.keys[h].merged().counts {
			n += v
		}
	}
	return n
}
