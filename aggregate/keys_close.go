package aggregate

import (
	"slices"
	"strings"
)

// maxKeyedBinBits bounds the bin index bits of a selecting histogram, so
// that an entry keeps at least 2²⁴ − 1 key ids per shard and window: a
// part is refused for want of an id (dropped_capacity, which would make
// whether it counts depend on other users' keys: a first-come cap) only
// with over a billion keys held in one window over the 64 shards — about
// 150 GB of key dictionary at BenchmarkKeyedBytesPerKey's 138 bytes a key,
// beyond the memory the process can have. (12 bits, 4,096 bins, left
// 2²⁰ − 1 ids: 67 million keys, about 9 GB, reachable; a review found it.)
// config.MaxSelectingBins is the same bound, checked by stage validate.
const maxKeyedBinBits = 8

// keyAcc counts one selecting histogram's keys at a window's close: per
// shard (by the shard dictionary's ids), then collected into rows.
type keyAcc struct {
	d      *keyDict // the shard's dictionary being counted; nil: none
	nBins  int
	users  []int64 // by id: distinct users with a selected part in the key
	counts []int64 // by id·nBins + bin
	rows   []keyRow
	buf    []int64 // the rows' counts, nBins each
}

// keyRow is one shard's key with its users and counts (at buf[off:]).
type keyRow struct {
	key   string
	users int64
	off   int
}

// keyedCounts is a selecting histogram's keys of a closed window, sorted,
// each with its distinct users and its counts (nBins each, in key order).
type keyedCounts struct {
	keys   []string
	users  []int64
	counts []int64
}

// keyAccs returns one keyAcc per histogram (nil for a listed one), or nil
// when no histogram selects.
func (a *Aggregator) keyAccs() []*keyAcc {
	var out []*keyAcc
	for h := range a.hists {
		if l := &a.hists[h]; l.keyed {
			if out == nil {
				out = make([]*keyAcc, len(a.hists))
			}
			out[h] = &keyAcc{nBins: l.nBins}
		}
	}
	return out
}

// begin prepares ka for shard window sw's dictionary of histogram h.
func (ka *keyAcc) begin(sw *shardWindow, h int) {
	ka.d = nil
	if sw.dicts == nil || sw.dicts[h] == nil {
		return
	}
	ka.d = sw.dicts[h]
	n := len(ka.d.keys)
	ka.users = slices.Grow(ka.users[:0], n)[:n]
	ka.counts = slices.Grow(ka.counts[:0], n*ka.nBins)[:n*ka.nBins]
	clear(ka.users)
	clear(ka.counts)
}

// collect appends the shard's counted keys (at least one user) to the rows.
func (ka *keyAcc) collect() {
	if ka.d == nil {
		return
	}
	for id, u := range ka.users {
		if u == 0 {
			continue
		}
		ka.rows = append(ka.rows, keyRow{key: ka.d.keys[id], users: u, off: len(ka.buf)})
		ka.buf = append(ka.buf, ka.counts[id*ka.nBins:(id+1)*ka.nBins]...)
	}
	ka.d = nil
}

// merge sorts the rows by key and adds up a key's rows from several shards.
func (ka *keyAcc) merge() keyedCounts {
	slices.SortFunc(ka.rows, func(x, y keyRow) int { return strings.Compare(x.key, y.key) })
	var out keyedCounts
	out.keys = make([]string, 0, len(ka.rows))
	out.users = make([]int64, 0, len(ka.rows))
	out.counts = make([]int64, 0, len(ka.rows)*ka.nBins)
	for i, r := range ka.rows {
		c := ka.buf[r.off : r.off+ka.nBins]
		if i > 0 && r.key == ka.rows[i-1].key {
			n := len(out.keys) - 1
			out.users[n] += r.users
			dst := out.counts[n*ka.nBins:]
			for b, x := range c {
				dst[b] += x
			}
			continue
		}
		out.keys = append(out.keys, r.key)
		out.users = append(out.users, r.users)
		out.counts = append(out.counts, c...)
	}
	return out
}

// countKeyed counts the parts the rule selects from a user's record r of a
// selecting histogram (layout l) into ka: the m first over all slots by
// the keys' order, and one user for every key with a selected part (cur:
// scratch of at least l.slots ints).
func (a *Aggregator) countKeyed(l *histLayout, r []uint64, cur []int, ka *keyAcc) {
	m, d := a.m, ka.d
	cur = cur[:l.slots]
	clear(cur)
	for range m {
		bx, ok := nextSelected(r, cur, m, d, l.binBits)
		if !ok {
			break
		}
		id, b := entryCell(bx, l.binBits)
		ka.counts[id*l.nBins+b]++
	}
	for j, c := range cur {
		if c > 0 {
			ka.users[entryGroup(r[j*m], l.binBits)]++
		}
	}
}

// maxKeptDict is the largest key dictionary a closed shard window keeps
// for reuse; a larger one is dropped with the window.
const maxKeptDict = 1 << 12

// resetDicts empties sw's key dictionaries for the window's reuse.
func (a *Aggregator) resetDicts(sw *shardWindow) {
	for h, d := range sw.dicts {
		if d == nil {
			continue
		}
		if len(d.keys) > maxKeptDict {
			sw.dicts[h] = nil
			continue
		}
		d.reset()
	}
}
