package aggregate

// userTable maps a user hash to the user's bounding record for one window
// of one shard. It is an open-addressing hash table with linear probing
// whose records are stored inline: slot i is words[i*stride : (i+1)*stride],
// holding the key and then the record. Key 0 marks a free slot, so Add
// stores the user hash 0 as 1 (and shards it as 1): users of hashes 0 and 1
// would be merged under one bound (see package decode on what a merge costs;
// it needs a 2⁻⁶³ coincidence under a secret seed). One probe sequence finds
// a user or the place to insert it, and the record shares its cache line
// with the key.
//
// The table doubles when it would be more than 3/4 full, so between 3/8 and
// 3/4 of its slots are in use (less after deletions). Keys are keyed hashes
// (see package decode), so a producer cannot choose user ids that cluster in
// the table. Deletion shifts the rest of the probe run back (no tombstones),
// so a table that users leave (evicted by the tracked-user cap) does not
// fill up with dead slots.
type userTable struct {
	words  []uint64
	stride int  // 1 + record length
	shift  uint // 64 − log2(slots); slot of key k starts at k >> shift
	mask   int  // slots − 1
	n      int  // occupied slots
	grow   int  // n above which the table doubles
	rec    int  // record length in words
}

const minSlots = 16

func newUserTable(recLen int) *userTable {
	t := &userTable{stride: 1 + recLen, rec: recLen}
	t.alloc(minSlots)
	return t
}

func (t *userTable) alloc(slots int) {
	t.words = make([]uint64, slots*t.stride)
	t.mask = slots - 1
	t.shift = 64
	for s := slots; s > 1; s >>= 1 {
		t.shift--
	}
	t.grow = slots / 4 * 3
	t.n = 0
}

// probe returns the slot holding key, or the free slot where it belongs.
func (t *userTable) probe(key uint64) (slot int, found bool) {
	i := int(key >> t.shift)
	for {
		switch t.words[i*t.stride] {
		case key:
			return i, true
		case 0:
			return i, false
		}
		i = (i + 1) & t.mask
	}
}

// record returns the record words of a slot.
func (t *userTable) record(slot int) []uint64 {
	return t.words[slot*t.stride+1 : (slot+1)*t.stride]
}

// insert stores key (absent, probed to slot) with a zero record and returns
// the record; the table may grow.
func (t *userTable) insert(key uint64, slot int) []uint64 {
	if t.n >= t.grow {
		t.resize()
		slot, _ = t.probe(key)
	}
	t.words[slot*t.stride] = key
	t.n++
	return t.record(slot)
}

func (t *userTable) resize() {
	old, oldStride := t.words, t.stride
	t.alloc((t.mask + 1) * 2)
	for i := 0; i < len(old); i += oldStride {
		key := old[i]
		if key == 0 {
			continue
		}
		s, _ := t.probe(key)
		copy(t.words[s*t.stride:(s+1)*t.stride], old[i:i+oldStride])
		t.n++
	}
}

// remove deletes the key at slot (occupied) and shifts back the entries of
// its probe run that may move, so that every remaining key stays reachable
// from its home slot without passing a free slot.
func (t *userTable) remove(slot int) {
	i, j := slot, slot
	for {
		j = (j + 1) & t.mask
		key := t.words[j*t.stride]
		if key == 0 {
			break
		}
		home := int(key >> t.shift)
		// The entry at j stays if its home lies cyclically in (i, j].
		if i <= j {
			if i < home && home <= j {
				continue
			}
		} else if i < home || home <= j {
			continue
		}
		copy(t.words[i*t.stride:(i+1)*t.stride], t.words[j*t.stride:(j+1)*t.stride])
		i = j
	}
	clear(t.words[i*t.stride : (i+1)*t.stride])
	t.n--
}

// reset empties the table, keeping its memory.
func (t *userTable) reset() {
	clear(t.words)
	t.n = 0
}

// len is the number of users in the table.
func (t *userTable) len() int { return t.n }
