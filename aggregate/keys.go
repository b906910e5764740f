package aggregate

import (
	"strings"

	"github.com/dpstage/stage/internal/lib/keyhash"
)

// Histograms that select their groups (issue 30: group_by and no listed
// groups, HistSpec.Selects) are bounded by the same rule as listed ones,
// with a group's key (decode.Event.Keys) in place of its index:
//
//  1. groups: of the keys the user's parts fall in, the G first by
//     (keyRank(user, histogram, key), key);
//  2. parts: of the parts in those keys, the m first by
//     (EventHash(user, time, keyFold(key), bin), key, bin).
//
// keyRank mixes the user's keyed hash with the public hash of the key's
// bytes (package keyhash), and ties — two keys of equal rank, or parts of
// equal EventHash in two keys — are broken by the key strings themselves:
// both ranks are functions of the user's own multiset of (key, bin, time)
// alone, never of the order keys arrived in. The package doc's argument
// (order independence, what one user changes) holds word for word with keys
// for groups.
//
// State. A user record holds key ids instead of group indices: per shard
// and window, each selecting histogram has a keyDict mapping the keys held
// by some record to a shard-local id (a user's record lives in its shard,
// so ids never cross shards). An id's refs count the record slots holding
// it; a slot is one kept group of one user, so the dictionary holds at most
// max_groups_per_user × the shard's tracked users of the window keys: a
// key is freed when its last holder lets it go (a group ranked before it
// displaces it, or the user's record is evicted), never refused because
// others came first. Whatever a key's id, the ranks above never see it:
// ids only name keys.
//
// At the close every shard's keys are counted (each key's distinct users:
// the users, tracked and admitted, with at least one selected part in it;
// and its bin counts), merged across shards by key, and sorted
// ([WindowCounts.Keys], [WindowCounts.Key]).

// keyDict is one (shard, window, selecting histogram)'s keys held by the
// user records of the shard. Guarded by the shard's mu.
type keyDict struct {
	ids  map[string]uint32
	keys []string // by id; "" for a free id
	hash []uint64 // by id: keyhash.String(key)
	refs []int32  // by id: the record slots holding the key
	free []uint32 // ids not in use
}

func newKeyDict() *keyDict { return &keyDict{ids: map[string]uint32{}} }

// intern returns the id of key k, adding it (with no holder) if absent; ok
// is false when the histogram's ids (maxID, from its entries' bits) are
// all in use.
func (d *keyDict) intern(k []byte, maxID uint32) (id uint32, ok bool) {
	if id, ok := d.ids[string(k)]; ok {
		return id, true
	}
	if n := len(d.free); n > 0 {
		id, d.free = d.free[n-1], d.free[:n-1]
	} else {
		if uint64(len(d.keys)) >= uint64(maxID) {
			return 0, false
		}
		id = uint32(len(d.keys))
		d.keys, d.hash, d.refs = append(d.keys, ""), append(d.hash, 0), append(d.refs, 0)
	}
	s := string(k) // its own copy: k is the decoded event's buffer
	d.ids[s] = id
	d.keys[id], d.hash[id], d.refs[id] = s, keyhash.String(s), 0
	return id, true
}

// ref counts one more slot holding id (nil d: a listed histogram).
func (d *keyDict) ref(id int) {
	if d != nil {
		d.refs[id]++
	}
}

// unref counts one slot fewer holding id and frees the key when none does
// (nil d: a listed histogram).
func (d *keyDict) unref(id int) {
	if d != nil {
		d.refs[id]--
		d.drop(uint32(id))
	}
}

// drop frees id if no slot holds it.
func (d *keyDict) drop(id uint32) {
	if d.refs[id] != 0 {
		return
	}
	delete(d.ids, d.keys[id])
	d.keys[id], d.hash[id] = "", 0
	d.free = append(d.free, id)
}

// len is the number of keys held.
func (d *keyDict) len() int { return len(d.keys) - len(d.free) }

// reset empties d, keeping its memory.
func (d *keyDict) reset() {
	clear(d.ids)
	clear(d.keys)
	d.keys, d.hash, d.refs, d.free = d.keys[:0], d.hash[:0], d.refs[:0], d.free[:0]
}

// keyRank is the rank of a key of public hash kh among one user's keys of
// histogram hist (its decode.Event index): GroupHash with the key's hash
// for the group index, keyed through user.
func keyRank(user uint64, hist int, kh uint64) uint64 {
	x := mix64(user + 0x632be59bd9b4e019)
	return mix64(x ^ mix64(kh^uint64(uint32(hist))*0x9e3779b97f4a7c15))
}

// keyFold is the key's stand-in for the group index in EventHash.
func keyFold(kh uint64) int { return int(uint32(kh ^ kh>>32)) }

// before reports whether key id1 ranks before key id2 for user in
// histogram hist: by keyRank, then by the keys themselves.
func (d *keyDict) before(user uint64, hist int, id1, id2 int) bool {
	r1, r2 := keyRank(user, hist, d.hash[id1]), keyRank(user, hist, d.hash[id2])
	return r1 < r2 || (r1 == r2 && d.keys[id1] < d.keys[id2])
}

// less reports whether entry e1 ranks before e2 (both non-empty): by
// EventHash, then key, then bin. Entries of one key compare as numbers.
func (d *keyDict) less(e1, e2 uint64, binBits uint) bool {
	k1, k2 := (uint32(e1)-1)>>binBits, (uint32(e2)-1)>>binBits
	if e1>>32 != e2>>32 || k1 == k2 {
		return e1 < e2
	}
	return strings.Compare(d.keys[k1], d.keys[k2]) < 0
}

// keyEntry is the entry of part (key id, bin b) of an event whose
// eventKey is ek, the key's public hash kh.
func keyEntry(l *histLayout, ek, kh uint64, id uint32, b int) uint64 {
	return uint64(eventHash(ek, keyFold(kh), b))<<32 | uint64(id<<l.binBits|uint32(b)) + 1
}

// dict returns sw's key dictionary of histogram h, creating it.
func (sw *shardWindow) dict(h, nh int) *keyDict {
	if sw.dicts == nil {
		sw.dicts = make([]*keyDict, nh)
	}
	d := sw.dicts[h]
	if d == nil {
		d = newKeyDict()
		sw.dicts[h] = d
	}
	return d
}

// addKeyed bounds the part (key, bin b) of a selecting histogram h (layout
// l, the user's record r), like Add's loop does a listed one's.
func (a *Aggregator) addKeyed(sw *shardWindow, h int, l *histLayout, r []uint64, user, ek uint64, key []byte, b int, o *Outcome) {
	d := sw.dict(h, len(a.hists))
	id, ok := d.intern(key, l.maxID)
	if !ok {
		// Every id of the shard's window is held: only past
		// maxID keys of one shard (see HistSpec.Selects).
		o.DroppedCapacity++
		return
	}
	x := keyEntry(l, ek, d.hash[id], id, b)
	a.bound(a.evIdx[h], l, r, user, x, int(id), o, d)
	d.drop(id) // no slot kept it
}

// unrefRecord lets go of the keys a user record holds (the record is being
// removed).
func (a *Aggregator) unrefRecord(sw *shardWindow, rec []uint64) {
	if sw.dicts == nil {
		return
	}
	for h, d := range sw.dicts {
		if d == nil {
			continue
		}
		l := &a.hists[h]
		r := rec[l.recOff : l.recOff+l.slots*a.m]
		for j := 0; j < l.slots && r[j*a.m] != 0; j++ {
			d.unref(entryGroup(r[j*a.m], l.binBits))
		}
	}
}

// keysHeld is the number of keys the dictionaries of window start hold for
// histogram h, over shards, once the queued evictions are done (tests).
func (a *Aggregator) keysHeld(start int64, h int) int {
	n := 0
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		if s.npend.Load() != 0 {
			a.removeEvicted(s) // as the next Add or Close would
		}
		if sw := s.wins[start]; sw != nil && sw.dicts != nil && sw.dicts[h] != nil {
			n += sw.dicts[h].len()
		}
		s.mu.Unlock()
	}
	return n
}
