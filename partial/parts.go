package partial

import (
	"bytes"
	"strconv"
)

// A Partial in several records (issue 30).
//
// A selecting histogram's keys make a Partial's size depend on the data:
// about 81 bytes a key of 16 bytes and 5 bins, so a partition with more
// than about 12,000 keys in a window would make a record over Kafka's
// default 1 MB limit (franz-go's ProducerBatchMaxBytes and the brokers'
// max.message.bytes), which the producer refuses. So the bounder writes
// such a Partial as Parts records ([Partial.Split]), in the one
// transaction of its window, in order: parts 0 … Parts−2 carry keyed
// cells only, the last one the count cells, average cells and drops and
// the keys left. Each part has the whole header (window, partition, Next,
// Config, First, Prev) and Part, its index. A histogram's keys run on in
// ascending order from one part to the next.
//
// The Merger holds parts 0 … Parts−2 (decoded, pointing into their
// records: at most a transaction's worth per (window, partition), until
// its last part is read right after) and, at the last part, adds the
// whole as one Partial — presence, digest, checks and sums as for a
// Partial of one record. A sequence that breaks (a part missing, out of
// order, of another header, keys not ascending across parts) is refused
// at the part that shows it (ReasonDecode or ReasonKeys), and the
// partition's Partial of the window is then missing, like any refused
// Partial's. The commit point stays at or before a held part (a reader
// restarting there reads the whole sequence again), as does the offset a
// window spilled past the sums limit is read again from.
//
// Partials of one record (Parts 0 or 1) are as before; a releaser of an
// older version, which knows no parts, would take each part for a Partial
// of the same (window, partition) and keep the first: such a releaser runs
// no selecting histogram (its config validation refuses group_by without
// groups), so it never meets a Partial in parts.

// MaxRecordBytes is the size Split keeps each record's value within:
// under Kafka's default record limit (1,000,012 bytes for the batch, its
// framing included).
const MaxRecordBytes = 900_000

// maxParts bounds Parts (a header claiming more is refused): 2^20 parts
// of MaxRecordBytes are 900 GB of keys.
const maxParts = 1 << 20

// partKey names a (window, source partition).
type partKey struct {
	window    int64
	partition int
}

// heldParts are the parts of one (window, partition) read so far, the
// first read at from.
type heldParts struct {
	from  int64
	parts []*Partial
}

// checkParts checks a decoded Partial's Part and Parts (decodePartial).
func checkParts(p *Partial) error {
	if p.Parts < 0 || p.Parts > maxParts || p.Part < 0 || p.Part >= max(p.Parts, 1) {
		return Refuse(ReasonDecode, "partial of window %d partition %d: part %d of %d", p.WindowStart, p.Partition, p.Part, p.Parts)
	}
	return nil
}

// gather takes part p (Parts > 1) read at offset: an earlier part is held
// (whole nil); the last one returns the whole Partial and the offset of
// its first part.
func (m *Merger) gather(p *Partial, offset int64) (whole *Partial, from int64, err error) {
	k := partKey{p.WindowStart, p.Partition}
	h := m.held[k]
	if p.Part == 0 { // a sequence starts (again, when it is read again)
		h = &heldParts{from: offset}
		if m.held == nil {
			m.held = map[partKey]*heldParts{}
		}
		m.held[k] = h
	}
	if h == nil || len(h.parts) != p.Part || p.Part > 0 && !sameSequence(h.parts[0], p) {
		delete(m.held, k)
		return nil, 0, Refuse(ReasonDecode, "partial of window %d partition %d: part %d of %d without the parts before it", p.WindowStart, p.Partition, p.Part, p.Parts)
	}
	if p.Part < p.Parts-1 {
		if p.cols != nil || len(p.Counts) > 0 || len(p.Averages) > 0 || len(p.Dropped) > 0 {
			delete(m.held, k)
			return nil, 0, Refuse(ReasonShape, "partial of window %d partition %d: part %d of %d with more than keyed cells", p.WindowStart, p.Partition, p.Part, p.Parts)
		}
		h.parts = append(h.parts, p)
		return nil, 0, nil
	}
	delete(m.held, k)
	q := *p
	q.Keyed = nil
	for _, x := range h.parts {
		q.Keyed = append(q.Keyed, x.Keyed...)
	}
	q.Keyed = append(q.Keyed, p.Keyed...)
	if err := keysAscendAcross(&q); err != nil {
		return nil, 0, err
	}
	return &q, h.from, nil
}

// sameSequence reports whether parts a and b belong to one Partial: the
// same header.
func sameSequence(a, b *Partial) bool {
	return a.Parts == b.Parts && a.Config == b.Config && a.Next == b.Next && a.WindowMs == b.WindowMs && a.Partitions == b.Partitions &&
		a.First == b.First && (a.Prev == nil) == (b.Prev == nil) && (a.Prev == nil || *a.Prev == *b.Prev)
}

// keysAscendAcross checks that the keyed cells of one histogram in a
// Partial gathered from parts continue each other: each cell's first key
// after the previous cell's last.
func keysAscendAcross(p *Partial) error {
	last := map[int][]byte{}
	for j := range p.Keyed {
		c := &p.Keyed[j]
		if c.Len() == 0 {
			continue
		}
		if prev, ok := last[c.H]; ok && bytes.Compare(prev, c.key(0)) >= 0 {
			return p.refuseKey(c, 0, "keys not in strictly ascending byte order from one part to the next")
		}
		last[c.H] = c.key(c.Len() - 1)
	}
	return nil
}

// heldFrom is the smallest offset of a part held (end when none).
func (m *Merger) heldFrom(end int64) int64 {
	for _, h := range m.held {
		end = min(end, h.from)
	}
	return end
}

// partSuffix is the record key's suffix of part i of n (none for the last
// part, whose key is a one-record Partial's).
func partSuffix(i, n int) string {
	if n <= 1 || i == n-1 {
		return ""
	}
	return "/part/" + strconv.Itoa(i)
}

// Split returns p as the records of one emission, each encoding (Encode)
// within maxBytes as far as its keys allow: p itself when it fits, else
// parts (see above) — keyed cells spread over parts 0 … n−2 in order, the
// rest of p and the keys left in the last. A Partial without keyed cells
// is never split. (One key larger than a part is in a part of its own,
// over maxBytes.)
func (p *Partial) Split(maxBytes int) []*Partial {
	if len(p.Keyed) == 0 {
		return []*Partial{p}
	}
	rowBytes := func(c *KeyedCell, i int) int { return 25 + len(c.key(i)) + 8*c.Bins }
	keys := 0
	for j := range p.Keyed {
		for i := range p.Keyed[j].Len() {
			keys += rowBytes(&p.Keyed[j], i)
		}
	}
	const slack = 4096 // per record: the schema, the batch's metadata, buffers' padding
	rest := *p
	rest.Keyed = nil
	base := len(rest.Encode()) + slack
	if base+keys <= maxBytes {
		return []*Partial{p}
	}
	header := *p
	header.Counts, header.Averages, header.Dropped, header.Keyed, header.cols = nil, nil, nil, nil, nil
	room := max(maxBytes-len(header.Encode())-slack, 1)
	// Pack the keys into parts of room bytes, in order; the last pack goes
	// into the last part when it fits beside the rest of p.
	var packs [][]KeyedCell
	var cur []KeyedCell
	size := 0
	for j := range p.Keyed {
		c := &p.Keyed[j]
		lo := 0
		for i := range c.Len() {
			b := rowBytes(c, i)
			if size+b > room && (size > 0 || i > lo) {
				if i > lo {
					cur = append(cur, c.slice(lo, i))
				}
				packs, cur, size, lo = append(packs, cur), nil, 0, i
			}
			size += b
		}
		if c.Len() > lo {
			cur = append(cur, c.slice(lo, c.Len()))
		}
	}
	last := &rest
	if base+size <= maxBytes {
		last.Keyed = cur
	} else if len(cur) > 0 {
		packs = append(packs, cur)
	}
	out := make([]*Partial, 0, len(packs)+1)
	for _, k := range packs {
		q := header
		q.Keyed = k
		out = append(out, &q)
	}
	out = append(out, last)
	for i, q := range out {
		q.Part, q.Parts = i, len(out)
	}
	return out
}

// slice returns keys [lo, hi) of c as a cell of their own (sharing c's
// memory).
func (c *KeyedCell) slice(lo, hi int) KeyedCell {
	return KeyedCell{H: c.H, Bins: c.Bins, data: c.data, offs: c.offs[lo : hi+1], users: c.users[lo:hi], counts: c.counts[lo*c.Bins : hi*c.Bins]}
}
