package aggregate

// userTable maps a user hash to the user's bounding record for one window
// of one shard. It is an open-addressing hash table with linear probing
// whose records are stored inline: slot i is words[i*stride : (i+1)*stride],
// holding the key's low and high 32 bits and then the record. Key 0 marks a
// free slot, so Add stores the user hash 0 as 1: at worst that would merge
// two users under one bound (see package decode on what a merge costs; it
// needs a 2⁻⁶⁴ coincidence under a secret seed), and as shards are chosen
// by the low hash bits no user of hash 0's shard has hash 1. One probe
// sequence finds a user or the place to insert it, and the record shares its
// cache line with the key.
//
// The table doubles when it would be more than 3/4 full, so between 3/8 and
// 3/4 of its slots are in use. Keys are keyed hashes (see package decode), so
// a producer cannot choose user ids that cluster in the table.
type userTable struct {
	words  []uint32
	stride int  // 2 + record length
	shift  uint // 64 − log2(slots); slot of key k starts at k >> shift
	mask   int  // slots − 1
	n      int  // occupied slots
	grow   int  // n above which the table doubles
	rec    int  // record length in words
}

const minSlots = 16

func newUserTable(recLen int) *userTable {
	t := &userTable{stride: 2 + recLen, rec: recLen}
	t.alloc(minSlots)
	return t
}

func (t *userTable) alloc(slots int) {
	t.words = make([]uint32, slots*t.stride)
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
	lo, hi := uint32(key), uint32(key>>32)
	i := int(key >> t.shift)
	for {
		w := t.words[i*t.stride : i*t.stride+2]
		if w[0] == lo && w[1] == hi {
			return i, true
		}
		if w[0] == 0 && w[1] == 0 {
			return i, false
		}
		i = (i + 1) & t.mask
	}
}

// record returns the record words of a slot.
func (t *userTable) record(slot int) []uint32 {
	return t.words[slot*t.stride+2 : (slot+1)*t.stride]
}

// insert stores key (absent, probed to slot) with a zero record and returns
// the record; the table may grow.
func (t *userTable) insert(key uint64, slot int) []uint32 {
	if t.n >= t.grow {
		t.resize()
		slot, _ = t.probe(key)
	}
	t.words[slot*t.stride] = uint32(key)
	t.words[slot*t.stride+1] = uint32(key >> 32)
	t.n++
	return t.record(slot)
}

func (t *userTable) resize() {
	old, oldStride := t.words, t.stride
	t.alloc((t.mask + 1) * 2)
	for i := 0; i < len(old); i += oldStride {
		key := uint64(old[i]) | uint64(old[i+1])<<32
		if key == 0 {
			continue
		}
		s, _ := t.probe(key)
		copy(t.words[s*t.stride:(s+1)*t.stride], old[i:i+oldStride])
		t.n++
	}
}

// reset empties the table, keeping its memory.
func (t *userTable) reset() {
	clear(t.words)
	t.n = 0
}

// len is the number of users in the table.
func (t *userTable) len() int { return t.n }
