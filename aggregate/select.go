package aggregate

// The selection rule (see the package doc for why it is order-independent
// and what it does to the sensitivity) and its incremental state.

// mix64 is MurmurHash3's 64-bit finalizer: a bijection of uint64 whose
// output bits each depend on every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// EventHash is the hash that ranks one histogram part of an event among the
// same user's parts in the same window and histogram: the part with group
// index group and bin index bin of an event of the user whose keyed hash is
// user (decode.Event.User), at event time timeMs. Parts are ranked by
// (EventHash, group, bin), smallest first.
//
// It is a function of the event's own content, never of where or when the
// event arrived, and it is keyed through user (a keyed hash with a secret
// key), so a producer cannot predict it.
func EventHash(user uint64, timeMs int64, group, bin int) uint32 {
	return eventHash(eventKey(user, timeMs), group, bin)
}

// eventKey is the part of EventHash shared by an event's parts.
func eventKey(user uint64, timeMs int64) uint64 {
	return user ^ uint64(timeMs)*0x9e3779b97f4a7c15
}

func eventHash(key uint64, group, bin int) uint32 {
	return uint32(mix64(key^(uint64(uint32(group))<<32|uint64(uint32(bin)))*0xbf58476d1ce4e5b9) >> 32)
}

// GroupHash is the hash that ranks the groups of histogram hist (its index
// in decode.Event: Spec.EventIndex, or its index in the Spec) that one
// user's parts in one window fall in. Groups are
// ranked by (GroupHash, group), smallest first. Like EventHash it is keyed
// through user.
func GroupHash(user uint64, hist, group int) uint64 {
	x := mix64(user + 0x632be59bd9b4e019)
	return mix64(x ^ (uint64(uint32(hist))<<32 | uint64(uint32(group))))
}

// groupBefore reports whether group g1 (hash h1) ranks before g2 (hash h2).
func groupBefore(h1 uint64, g1 int, h2 uint64, g2 int) bool {
	return h1 < h2 || (h1 == h2 && g1 < g2)
}

// A user record holds, per histogram, slots·m entries (m =
// MaxEventsPerUser): slot j is entries [j·m, (j+1)·m). Each entry is one
// kept part, EventHash<<32 | (cell+1), where cell = group<<binBits | bin, so
// that entries compare as their parts rank — (EventHash, group, bin) — and 0
// is an empty entry. A slot's entries are sorted ascending, empty ones last.
//
// A histogram whose group bound binds (max_groups_per_user < its number of
// groups) has slots = max_groups_per_user slots, each holding one group's
// m smallest parts; the slots in use are the first ones (a slot is in use iff
// its first entry is), and a slot's group is that of its entries. Any other
// histogram has one slot holding the user's m smallest parts in all groups.

// entry is the entry of part (g, b) of an event whose eventKey is ek.
func entry(l *histLayout, ek uint64, g, b int) uint64 {
	return uint64(eventHash(ek, g, b))<<32 | uint64(uint32(g)<<l.binBits|uint32(b)) + 1
}

// entryGroup is the group of a (non-empty) entry.
func entryGroup(e uint64, binBits uint) int { return int((uint32(e) - 1) >> binBits) }

// entryCell returns the group and bin of a (non-empty) entry.
func entryCell(e uint64, binBits uint) (g, b int) {
	c := uint32(e) - 1
	return int(c >> binBits), int(c & (1<<binBits - 1))
}

// insertSorted inserts x into the sorted slot s (len m) that has room or
// whose last entry is larger than x; a full slot's last entry falls out.
func insertSorted(s []uint64, x uint64) {
	i := 0
	for i < len(s) && s[i] != 0 && s[i] <= x {
		i++
	}
	copy(s[i+1:], s[i:len(s)-1])
	s[i] = x
}

// used is the number of entries in use in a slot.
func used(s []uint64) int {
	n := 0
	for n < len(s) && s[n] != 0 {
		n++
	}
	return n
}

// bound bounds one part (group g, bin b) of an event of user into
// the user's record r for histogram h (layout l) and accounts for it in o.
//
// The part is counted if, with it, it is among the parts the rule selects
// from the user's parts so far; else it is dropped (for its group or for the
// event bound). Displaced counts the parts counted earlier that this part
// takes out of the selection, net of parts it lets back in (which only a
// displaced group with max_groups_per_user ≥ 2 can do): the sum of Counted
// minus Displaced over a user's parts is always the number selected.
//
// x is the part's entry (see entry). kd is nil for a listed histogram; for
// one that selects its groups (keys.go) g is a key id of kd, groups are
// ranked by their keys and the slots' holders counted in kd.
func (a *Aggregator) bound(h int, l *histLayout, r []uint64, user, x uint64, g int, o *Outcome, kd *keyDict) {
	m := a.m
	if l.slots == 1 {
		// One slot: the user's m smallest parts (in its one group, when the
		// group bound binds), all selected.
		s := r[:m]
		if l.grouped && s[0] != 0 {
			if sg := entryGroup(s[0], l.binBits); sg != g {
				if rankedBefore(kd, user, h, sg, g) {
					o.DroppedUserGroups++
					return
				}
				o.Displaced += used(s) // the slot's group is displaced
				clear(s)
				kd.unref(sg)
			}
		}
		if s[0] == 0 {
			kd.ref(g)
		}
		if last := s[m-1]; last != 0 {
			if x >= last {
				o.DroppedUserEvents++
				return
			}
			o.Displaced++
		}
		insertSorted(s, x)
		o.Counted++
		return
	}
	// Group slots: find g's slot, or a free one.
	gi, free := -1, false
	for j := 0; j < l.slots; j++ {
		first := r[j*m]
		if first == 0 {
			gi, free = j, true
			break
		}
		if entryGroup(first, l.binBits) == g {
			gi = j
			break
		}
	}
	if gi >= 0 && !free {
		// g is kept: the part is a candidate iff among g's m smallest.
		s := r[gi*m : (gi+1)*m]
		if last := s[m-1]; last != 0 && x >= last {
			o.DroppedUserEvents++
			return
		}
	}
	before := 0
	for j := 0; j < l.slots && r[j*m] != 0; j++ {
		before += used(r[j*m : (j+1)*m])
	}
	after := before + 1
	switch {
	case gi >= 0 && !free:
		s := r[gi*m : (gi+1)*m]
		if s[m-1] != 0 {
			after-- // g's largest kept part falls out
		}
		insertSorted(s, x)
	case free:
		r[gi*m] = x
		kd.ref(g)
	default:
		// Every slot holds another group: g replaces the last-ranked of
		// them if it ranks before it. A group out of the slots can never
		// come back: every group ranked before it is still there.
		wg := -1
		if kd != nil {
			// By the keys' ranks (keys.go).
			for j := 0; j < l.slots; j++ {
				if sg := entryGroup(r[j*m], l.binBits); wg < 0 || kd.before(user, h, wg, sg) {
					gi, wg = j, sg
				}
			}
			if kd.before(user, h, wg, g) {
				o.DroppedUserGroups++
				return
			}
		} else {
			gh := GroupHash(user, h, g)
			var wh uint64
			for j := 0; j < l.slots; j++ {
				sg := entryGroup(r[j*m], l.binBits)
				if sh := GroupHash(user, h, sg); wg < 0 || groupBefore(wh, wg, sh, sg) {
					gi, wh, wg = j, sh, sg
				}
			}
			if groupBefore(wh, wg, gh, g) {
				o.DroppedUserGroups++
				return
			}
		}
		s := r[gi*m : (gi+1)*m]
		after -= used(s)
		clear(s)
		s[0] = x
		kd.unref(wg)
		kd.ref(g)
	}
	// Counted iff fewer than m kept parts rank strictly before x. (A kept
	// entry equal to x is the same part of an identical event, necessarily
	// in x's slot: which copy is said to be counted changes nothing.)
	below := 0
	for j := 0; j < l.slots && r[j*m] != 0 && below < m; j++ {
		for _, e := range r[j*m : (j+1)*m] {
			if e == 0 || (kd == nil && e >= x) || (kd != nil && !kd.less(e, x, l.binBits)) {
				break
			}
			below++
		}
	}
	c := 0
	if below < m {
		c = 1
		o.Counted++
	} else {
		o.DroppedUserEvents++
	}
	o.Displaced += min(m, before) + c - min(m, after)
}

// rankedBefore reports whether group g1 ranks before g2 for user in
// histogram h: by GroupHash for a listed histogram (kd nil), by key.
func rankedBefore(kd *keyDict, user uint64, h, g1, g2 int) bool {
	if kd == nil {
		return groupBefore(GroupHash(user, h, g1), g1, GroupHash(user, h, g2), g2)
	}
	return kd.before(user, h, g1, g2)
}

// countSelected adds to counts (a window's count vector) the parts the rule
// selects from a user's record r for histogram layout l: the m smallest
// entries over all slots (cur: scratch of at least l.slots ints).
func (a *Aggregator) countSelected(l *histLayout, r []uint64, cur []int, counts []int64) {
	m := a.m
	if l.slots == 1 {
		for _, e := range r[:m] {
			if e == 0 {
				return
			}
			g, b := entryCell(e, l.binBits)
			counts[l.cellOff+g*l.nBins+b]++
		}
		return
	}
	cur = cur[:l.slots]
	clear(cur)
	for range m {
		bx, ok := nextSelected(r, cur, m, nil, l.binBits)
		if !ok {
			return
		}
		g, b := entryCell(bx, l.binBits)
		counts[l.cellOff+g*l.nBins+b]++
	}
}

// nextSelected takes the next entry of the selection from the slots of
// record r (m entries each; cur[j]: slot j's entries taken so far): the
// smallest untaken one — by the keys' order when kd is not nil — and
// advances its slot; ok is false when none is left.
func nextSelected(r []uint64, cur []int, m int, kd *keyDict, binBits uint) (bx uint64, ok bool) {
	best := -1
	for j := range cur {
		if cur[j] >= m {
			continue
		}
		if e := r[j*m+cur[j]]; e != 0 && (best < 0 || (kd == nil && e < bx) || (kd != nil && kd.less(e, bx, binBits))) {
			best, bx = j, e
		}
	}
	if best < 0 {
		return 0, false
	}
	cur[best]++
	return bx, true
}

// trackedHeap is a max-heap of the keys of a window's tracked users.
type trackedHeap []uint64

// init orders h as a heap.
func (h trackedHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h trackedHeap) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1] > h[c] {
			c++
		}
		if h[i] >= h[c] {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
