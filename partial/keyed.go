package partial

import (
	"bytes"
	"fmt"
)

// Selecting histograms (histograms[] with group_by and no groups: issue
// 30) in the distributed mode.
//
// Their groups are not listed, so a Partial cannot carry them as count
// cells by group index. It carries, for each selecting histogram whose
// window ends with it, the group keys the partition's bounder tracked in
// the window (a KeyedCell): each key once, in ascending byte order, with
// its distinct users after bounding and its count vector. Users are
// partition-local (the bounder drops events whose user does not hash to
// their partition), so each user is counted by one partition, and the
// window's distinct users of a key are the sum of its partitions' (the
// Merger adds them key by key: Window.Keys, Window.Key). The releaser's
// selection thresholds them (package selection): what the keys and their
// counts are is private, like every count of a Partial.
//
// A user counted toward a key has at least one counted event in it, and at
// most max_events_per_user over all its keys of the histogram; each user
// counts toward at most max_groups_per_user keys. So a key with u users
// has a total count in [u, u·m], and a partition's keys hold at most
// l0·U users in all (U its window's users: max_tracked_users when set).
// DecodePartial (checkKeyed) and Merger.Add (checkKeyedFit, with the
// config's Layout) refuse a section that breaks any of these (ReasonKeys).
//
// JSON partials (kafka.distributed.partials_format json, Version 1) do not
// carry keys: config validation refuses that format with a selecting
// histogram.

// KeyedCell is one selecting histogram's tracked group keys in one
// Partial's window: key i is Key(i), with its distinct users and its
// count vector of Bins counts. Build one with Append; a decoded one
// points into the record value (read-only).
type KeyedCell struct {
	// H is the histogram's index in the config's histograms list.
	H int
	// Bins is the histogram's number of bins: each key's count vector.
	Bins int
	// data holds the keys back to back; key i is data[offs[i]:offs[i+1]]
	// (offs has Len()+1 entries, or none when empty).
	data   []byte
	offs   []int32
	users  []uint64
	counts []float64 // Len()·Bins, key by key
}

// Len is the number of keys.
func (c *KeyedCell) Len() int { return len(c.users) }

// key returns key i's bytes (not to be written).
func (c *KeyedCell) key(i int) []byte { return c.data[c.offs[i]:c.offs[i+1]] }

// Key returns key i, its distinct users and its counts (not to be
// written).
func (c *KeyedCell) Key(i int) (key string, users int64, counts []float64) {
	return string(c.key(i)), int64(c.users[i]), c.counts[i*c.Bins : (i+1)*c.Bins]
}

// Append adds a key after the others (keys must come in ascending byte
// order, each once; DecodePartial refuses the Partial otherwise). A cell
// holds at most 2 GiB of key bytes (int32 offsets, as Arrow's binary
// column): 4·10⁶ keys of decode's longest, 512 bytes.
func (c *KeyedCell) Append(key string, users int64, counts []float64) {
	if len(c.offs) == 0 {
		c.offs = append(c.offs, 0)
	}
	c.data = append(c.data, key...)
	c.offs = append(c.offs, int32(len(c.data)))
	c.users = append(c.users, uint64(users))
	c.counts = append(c.counts, counts...)
}

// KeySource is what a bounder's closed window gives of its tracked keys:
// release.Keyed, by config histogram index.
type KeySource interface {
	Keys(h int) int
	Key(h, i int, dst []float64) (key string, users int64, counts []float64)
}

// KeyedFrom returns histogram h's keys in src as a KeyedCell of bins
// counts per key, nil when it has none.
func KeyedFrom(src KeySource, h, bins int) *KeyedCell {
	n := src.Keys(h)
	if n == 0 {
		return nil
	}
	c := &KeyedCell{H: h, Bins: bins, users: make([]uint64, 0, n), counts: make([]float64, 0, n*bins), offs: make([]int32, 1, n+1)}
	var dst []float64
	for i := range n {
		var k string
		var u int64
		k, u, dst = src.Key(h, i, dst[:0])
		c.Append(k, u, dst)
	}
	return c
}

// checkKeyed checks what a Partial's KeyedCells make checkable whatever
// the config: one cell per histogram, keys strictly ascending, users ≥ 1, counts whole numbers whose sum is at least the
// key's users (each user counted toward a key has an event in it).
func checkKeyed(p *Partial) error {
	for j := range p.Keyed {
		c := &p.Keyed[j]
		if c.H < 0 || c.Bins < 1 || len(c.counts) != c.Len()*c.Bins || c.Len() > 0 && len(c.offs) != c.Len()+1 {
			return Refuse(ReasonShape, "partial of window %d partition %d: keyed cell of histogram %d (%d keys, %d bins, %d counts)",
				p.WindowStart, p.Partition, c.H, c.Len(), c.Bins, len(c.counts))
		}
		for k := range j {
			if p.Keyed[k].H == c.H {
				return Refuse(ReasonShape, "partial of window %d partition %d: two keyed cells of histogram %d", p.WindowStart, p.Partition, c.H)
			}
		}
		if err := checkKeys(p, c); err != nil {
			return err
		}
	}
	return nil
}

// checkKeys checks one KeyedCell's keys (checkKeyed).
func checkKeys(p *Partial, c *KeyedCell) error {
	var prev []byte
	for i := range c.Len() {
		lo, hi := c.offs[i], c.offs[i+1]
		if lo < 0 || hi < lo || int(hi) > len(c.data) {
			return Refuse(ReasonShape, "partial of window %d partition %d: keyed cell of histogram %d: key %d's bytes out of range", p.WindowStart, p.Partition, c.H, i)
		}
		k := c.data[lo:hi]
		switch { // the empty string is a key (a group_by field's value ""), the first when there
		case i > 0 && bytes.Compare(prev, k) >= 0:
			return p.refuseKey(c, i, "keys not in strictly ascending byte order")
		case c.users[i] < 1 || c.users[i] > maxExact:
			return p.refuseKey(c, i, fmt.Sprintf("%d users (a key has at least 1)", c.users[i]))
		}
		prev = k
		var sum float64
		for _, v := range c.counts[i*c.Bins : (i+1)*c.Bins] {
			if !wholeCount(v) {
				return p.refuseKey(c, i, fmt.Sprintf("count %v (a count is a whole number in [0, 2^53])", v))
			}
			sum += v
		}
		if sum < float64(c.users[i]) {
			return p.refuseKey(c, i, fmt.Sprintf("%v events for %d users (each user counted toward a key has an event in it)", sum, c.users[i]))
		}
	}
	return nil
}

// refuseKey refuses p for key i of c (ReasonKeys).
func (p *Partial) refuseKey(c *KeyedCell, i int, why string) error {
	return Refuse(ReasonKeys, "partial of window %d partition %d: keyed cell of histogram %d, key %d: %s", p.WindowStart, p.Partition, c.H, i, why)
}

// checkKeyedFit checks p's KeyedCells against the Merger's layout: each
// is a selecting histogram's with its bins, its keys within
// Layout.MaxKeyBytes, a key's total count at most its users ×
// max_events_per_user, and the keys' users in all at most
// max_groups_per_user × max_tracked_users (when set).
func (m *Merger) checkKeyedFit(p *Partial) error {
	l := &m.layout
	if len(p.Keyed) == 0 {
		return nil
	}
	// A Partial in parts (parts.go) has a cell of a histogram per part.
	users, totals := make([]float64, len(l.Bins)), make([]float64, len(l.Bins))
	for j := range p.Keyed {
		c := &p.Keyed[j]
		if c.H >= len(l.Bins) || c.H >= len(l.Selects) || !l.Selects[c.H] || c.Bins != l.Bins[c.H] {
			return Refuse(ReasonShape, "partial of window %d partition %d: keyed cell of histogram %d with %d bins does not fit the config's selecting histograms",
				p.WindowStart, p.Partition, c.H, c.Bins)
		}
		for i := range c.Len() {
			if n := c.offs[i+1] - c.offs[i]; l.MaxKeyBytes > 0 && int(n) > l.MaxKeyBytes {
				return p.refuseKey(c, i, fmt.Sprintf("%d bytes, longer than a key may be (%d)", n, l.MaxKeyBytes))
			}
			var sum float64
			for _, v := range c.counts[i*c.Bins : (i+1)*c.Bins] {
				sum += v
			}
			u := float64(c.users[i])
			if l.MaxEventsPerUser > 0 && sum > u*float64(l.MaxEventsPerUser) {
				return p.refuseKey(c, i, fmt.Sprintf("%v events for %v users, more than max_events_per_user (%d) each", sum, u, l.MaxEventsPerUser))
			}
			users[c.H], totals[c.H] = users[c.H]+u, totals[c.H]+sum
		}
	}
	for h := range users {
		if b := l.MaxKeyUsers; b > 0 && users[h] > b {
			return Refuse(ReasonKeys, "partial of window %d partition %d: the keys of histogram %d count %v users, more than max_groups_per_user × max_tracked_users (%v)",
				p.WindowStart, p.Partition, h, users[h], b)
		}
		if h < len(l.MaxTotal) && l.MaxTotal[h] > 0 && totals[h] > l.MaxTotal[h] {
			return Refuse(ReasonKeys, "partial of window %d partition %d: the keys of histogram %d count %v contributions, more than its users allow (%v)",
				p.WindowStart, p.Partition, h, totals[h], l.MaxTotal[h])
		}
	}
	return nil
}
