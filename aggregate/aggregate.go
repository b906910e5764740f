// Package aggregate bounds each user's contribution and counts what remains
// into per-window histograms, handed on as Arrow record batches.
//
// # Which events count
//
// Bounding happens before counting, per user, per window, per histogram
// (a part of an event is its bin and group in one histogram). With
// m = Spec.MaxEventsPerUser and G = Spec.MaxGroupsPerUser, the rule selects
// from the user's parts in the window:
//
//  1. groups: of the groups the parts fall in, the G first by
//     (GroupHash(user, histogram, group), group);
//  2. parts: of the parts in those groups, the m first by
//     (EventHash(user, time, group, bin), group, bin).
//
// Both ranks are functions of the user's keyed hash and of the part's own
// content, so the selected multiset of (group, bin) is a function of the
// user's multiset of parts alone: not of arrival order, of how partitions
// interleave (which other users' load drives), nor of any other user. Ties
// do not matter: parts of equal rank have the same group and bin (they are
// parts of identical events — same user, time, group and bin — or of events
// whose 32-bit EventHash collide), so whichever of them is kept adds to the
// same cell, and the counts are a function of the multiset. Distinct groups
// never tie. Dropped parts are reported in the [Outcome] of [Aggregator.Add].
//
// The rank is a hash of the event's content, not of its place in the input
// (a hash of partition and offset, say): offsets are not a function of the
// event. Under add_remove, removing one user's events shifts the offsets of
// every later event in the partitions it used, so an offset-keyed rank would
// re-rank other users' events and change which of them count — one user's
// presence would move the counts of arbitrarily many others, outside any
// bound on one user's contribution. An event's content does not move.
//
// The selection is exact with bounded state. Per user and histogram the
// record keeps, for each of the (at most G) groups ranked first so far, that
// group's m smallest parts so far: G·m entries of 8 bytes (m when the group
// bound cannot bind, G ≥ the number of groups). Nothing needed later is
// lost: a group that leaves the first G never returns (the G groups ranked
// before it stay before it, ranks being fixed), and a part that is not among
// its group's m smallest can never be selected (those m rank before it and
// are selected or not with it, as a group is accepted as a whole). The
// selection is the m smallest kept entries. A part is Counted when it is in
// the selection on arrival; a part selected earlier that a later one pushes
// out (a part ranked before it, or a group ranked before its group) is
// reported as Displaced by that later Add, net of parts a displaced group
// lets back in: per user, Counted − Displaced is the number selected.
//
// # Tracked users
//
// The bounder's state is one record per tracked (user, window).
// Spec.MaxTrackedUsers = K caps the users tracked in each window (0: no
// cap): the tracked users are the K users with the smallest user hash
// (decode.Event.User, a keyed hash) among the window's users with a part to
// count, as for the average kind (average.go). A user new to a full window
// whose hash is smaller than the largest tracked one takes its place: that
// user is evicted, its parts are not counted, and its later events in the
// window are dropped (dropped_capacity), as are those of users refused on
// arrival. The largest tracked hash only falls, so a refused or evicted user
// never returns. An event is never counted without being bounded.
//
// The cap is per window, so that a user's events in one window never
// displace another user in a different window, and it is global over the
// window, not per shard: one max-heap of tracked hashes per window, locked
// only when a user new to the window arrives with a hash below the largest
// tracked one (anyone else is refused by one atomic load); 8 bytes per
// tracked user. The evicted user's record is removed by its shard's lock
// holder (at once, or queued if another goroutine holds it). Per-shard caps
// would not keep the argument below under replace: removing user a would
// let one user into a's shard, and adding a′ (another user, another shard)
// would push one out of a′'s shard — two out and two in.
//
// # What one user changes (the sensitivity argument)
//
// Fix a window and a histogram, and let x(U) be its count vector (all groups
// concatenated) for the set U of the window's users with a part to count:
// x(U) = Σ_{u ∈ T(U)} v_u, where T(U) is the K smallest hashes of U (all of
// U without a cap) and v_u ≥ 0, ‖v_u‖₁ ≤ m, is u's selected contribution, a
// function of u's own events only (see above). Adding one element to a set
// changes its K smallest by at most one in (the new one) and one out (the
// largest, if the set was full); removing one, by at most one out (it) and
// one in (the next). So:
//
//   - add_remove, U′ = U ∪ {w}: x′ − x is 0, v_w, or v_w − v_z for the
//     evicted z. Without a cap only v_w (Δ1 = m); with the cap "one out, one
//     in": the shape of a replacement.
//   - replace, w's events replaced: if w's hash and presence in the window
//     are unchanged, x′ − x = v′_w − v_w or 0; otherwise it is a removal and
//     an addition, and the element the removal lets in is the one the
//     addition pushes out when the new user is kept, so T changes by at most
//     one out and one in: x′ − x = v_b − v_a for two users a, b (either term
//     possibly absent).
//
// In every case x′ − x = q − p with p, q ≥ 0 and ‖p‖₁, ‖q‖₁ ≤ m, whence
// Δ1 ≤ 2m, Δ2² ≤ ‖p‖₂² + ‖q‖₂² ≤ 2m² (⟨p, q⟩ ≥ 0), Δ∞ ≤ m; for add_remove
// without a cap one of p, q is 0: Δ1 = Δ∞ = m, Δ2² = m² (plan/plan.go
// derives the charge from these; TestNeighbourSensitivity checks them on
// random neighbours, and finds each bound attained).
//
// The hashes are keyed through the user hash (package decode), whose secret
// key the stage keeps in its ledger: the same after a restart, so that the
// cross-window bound's per-user state ([Admissions]) finds its users again.
// A window is always counted by one process in any case, since after a
// restart or takeover the events of every open window are read again
// (offsets are committed only past released windows).
//
// [Aggregator.Close] returns a window's counts for every declared
// (histogram, group, bin), zeros included, so what is released never depends
// on which keys appeared in the data.
//
// # Unlisted groups
//
// A histogram with group_by and no listed groups (HistSpec.Selects, issue
// 30) is bounded by the same rule with the group's key (decode.Event.Keys)
// for its index, ranked by a keyed hash of the key string with the user —
// never by the order keys arrived in — and ties broken by the keys
// themselves, so everything above holds for it word for word (keys.go).
// Its keys, each with its distinct users after bounding and its counts,
// are [WindowCounts.Keys]: which of them are released is decided by the
// charged private selection (package selection), never here.
package aggregate

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/dpstage/stage/decode"
)

// Spec declares what is counted and how contributions are bounded.
type Spec struct {
	// Histograms in config order; the index of a histogram here is its index
	// in decode.Event.Bins and Groups, unless EventIndex says otherwise.
	Histograms []HistSpec
	// EventIndex, when set (one entry per histogram), is the index of
	// Histograms[i] in decode.Event.Bins and Groups: an Aggregator for a
	// subset of the decoder's histograms (those sharing one window size).
	// Nil: i.
	EventIndex []int
	// MaxEventsPerUser bounds the events one user counts per window and
	// histogram (over all its groups). At least 1.
	MaxEventsPerUser int
	// MaxGroupsPerUser bounds the distinct groups one user's events count
	// toward per window and histogram. At least 1.
	MaxGroupsPerUser int
	// MaxTrackedUsers caps the users tracked in each window; 0: no cap
	// (memory grows with the number of users).
	MaxTrackedUsers int
	// WindowSize is the tumbling window length (window_end = window_start +
	// WindowSize); a positive whole number of milliseconds.
	WindowSize time.Duration
	// Mem allocates the Arrow records returned by Close. Nil means
	// memory.DefaultAllocator.
	Mem memory.Allocator
}

// HistSpec is one histogram's public domain.
type HistSpec struct {
	Name   string
	Bins   []string // in output order
	Groups []string // in output order; ["*"] for a histogram without group_by; empty when Selects
	// Selects: the histogram has group_by and no listed groups (issue 30):
	// its parts' groups are their keys (decode.Event.Keys), bounded like
	// listed groups (keys.go) and counted per key at the close
	// ([WindowCounts.Keys]). A shard tracks at most 2³²⁻ᵇ − 1 keys of one
	// window at a time (b ≤ 8 the bits of the bin index: at most 256
	// bins): a part beyond that — only with over a billion keys held in
	// the window, past any memory (maxKeyedBinBits) — is dropped_capacity.
	Selects bool
}

// Outcome counts what happened to the histogram parts of one event passed to
// Add (parts already dropped by the decoder are not counted here). Each part
// is one of Counted, DroppedUserEvents, DroppedUserGroups or DroppedCapacity,
// as decided on its arrival; Displaced is about earlier parts of the same
// user (see the package doc).
type Outcome struct {
	Counted           int // in the user's selection on arrival
	DroppedUserEvents int // not among the user's max_events_per_user first-ranked parts (window, histogram)
	DroppedUserGroups int // its group is not among the user's max_groups_per_user first-ranked groups
	DroppedCapacity   int // max_tracked_users: the user is not (or no longer) tracked in the window
	// Displaced is the number of the user's parts counted earlier that this
	// event's parts pushed out of the selection (net of parts let back in).
	// Parts of users evicted from a full window are reported by Close
	// ([WindowCounts.Displaced]).
	Displaced int
}

// Add accumulates p into o.
func (o *Outcome) Add(p Outcome) {
	o.Counted += p.Counted
	o.DroppedUserEvents += p.DroppedUserEvents
	o.DroppedUserGroups += p.DroppedUserGroups
	o.DroppedCapacity += p.DroppedCapacity
	o.Displaced += p.Displaced
}

// numShards is the number of user-hash shards (a power of two).
const numShards = 64

// maxRecordEntries bounds a user record (8 bytes an entry): Σ over the
// histograms of max_events_per_user × its group slots.
const maxRecordEntries = 1 << 12

// histLayout places one histogram in a window's count vector and in a user
// record.
type histLayout struct {
	nBins, nGroups int
	cellOff        int  // count of (g, b) is at cellOff + g*nBins + b
	binBits        uint // an entry's cell is g<<binBits | b
	recOff         int  // the histogram's entries in a user record
	slots          int  // group slots of m entries each
	grouped        bool // the group bound binds: one group per slot
	// keyed: the histogram selects its groups (HistSpec.Selects); an
	// entry's group is a key id of the shard window's keyDict, below maxID.
	keyed bool
	maxID uint32
}

// window is the tracked-user state of one open window, shared by all shards.
type window struct {
	start int64
	// tau is the largest tracked user key once the cap is reached
	// (MaxUint64 before, and without a cap): users with a larger key are
	// not tracked. It only decreases.
	tau   atomic.Uint64
	users atomic.Int64 // users tracked in the window

	// mu guards heap and closed.
	mu sync.Mutex
	// heap holds the keys of the tracked users (with a cap); a max-heap
	// once it holds the cap's number of keys, unordered before.
	heap   trackedHeap
	closed bool // Close has begun: no user is admitted any more
}

// shardWindow is one shard's bounding state for one window.
type shardWindow struct {
	w *window
	// users holds one record of recLen words per user (see select.go).
	users *userTable
	// displaced counts the selected parts of users evicted from this
	// shard's table before Close.
	displaced int64
	// dicts holds, per selecting histogram, the keys the records hold
	// (keys.go); nil until one is needed.
	dicts []*keyDict
}

// eviction is a user evicted from a window's tracked set whose record its
// shard has not removed yet.
type eviction struct {
	w   *window
	key uint64
}

type shard struct {
	// mu guards wins, last, free and every shardWindow reachable from them
	// (their user tables with the bounding records).
	mu   sync.Mutex
	wins map[int64]*shardWindow
	last *shardWindow   // most recently used window: the common case
	free []*shardWindow // cleared states kept for reuse (at most maxFree)

	// evictMu guards evicted: users of this shard evicted by an Add on
	// another shard (which must not wait for this shard's mu while holding
	// its own); removed by the next holder of mu. npend is len(evicted).
	evictMu sync.Mutex
	evicted []eviction
	npend   atomic.Int32
	_       [64]byte // keep shards on separate cache lines
}

const maxFree = 2

// Aggregator bounds and counts events into open windows. Add may be called
// concurrently from several goroutines (one per partition): users are
// sharded by hash, with one mutex per shard; a window's tracked-user heap
// has its own mutex, taken only for users new to the window.
type Aggregator struct {
	spec     Spec
	hists    []histLayout
	nCells   int          // length of a window's count vector
	recLen   int          // uint64 words per (user, window) record
	m        int          // MaxEventsPerUser
	maxSlots int          // the most group slots of a histogram
	maxUsers int          // MaxTrackedUsers (0: no cap)
	evIdx    []int        // histogram h's index in decode.Event (Spec.EventIndex)
	tracked  atomic.Int64 // tracked (user, window) pairs over all windows

	// mu guards windows (the open windows) and spare. Lock order: a shard's
	// mu may be held while taking mu or a window's mu, never the reverse.
	mu      sync.Mutex
	windows map[int64]*window
	spare   trackedHeap // a closed window's heap, kept for the next window

	shards [numShards]shard
}

// New validates spec and returns an empty Aggregator.
func New(spec Spec) (*Aggregator, error) {
	var errs []error
	if len(spec.Histograms) == 0 {
		errs = append(errs, errors.New("no histograms"))
	}
	names := map[string]bool{}
	for i, h := range spec.Histograms {
		if h.Name == "" {
			errs = append(errs, fmt.Errorf("histograms[%d]: empty name", i))
		} else if names[h.Name] {
			errs = append(errs, fmt.Errorf("histograms[%d]: duplicate name %q", i, h.Name))
		}
		names[h.Name] = true
		if len(h.Bins) == 0 {
			errs = append(errs, fmt.Errorf("histograms[%d]: no bins", i))
		} else if d := firstDup(h.Bins); d != "" {
			errs = append(errs, fmt.Errorf("histograms[%d]: duplicate bin %q", i, d))
		}
		if h.Selects {
			if len(h.Groups) > 0 {
				errs = append(errs, fmt.Errorf("histograms[%d]: a histogram that selects its groups lists none, got %d", i, len(h.Groups)))
			}
			if bits.Len(uint(max(len(h.Bins), 1)-1)) > maxKeyedBinBits {
				errs = append(errs, fmt.Errorf("histograms[%d]: %d bins is too many for a histogram that selects its groups (at most %d)", i, len(h.Bins), 1<<maxKeyedBinBits))
			}
		} else if len(h.Groups) == 0 {
			errs = append(errs, fmt.Errorf("histograms[%d]: no groups (use [\"*\"] without group_by)", i))
		} else if d := firstDup(h.Groups); d != "" {
			errs = append(errs, fmt.Errorf("histograms[%d]: duplicate group %q", i, d))
		}
		if uint64(len(h.Groups))<<bits.Len(uint(max(len(h.Bins), 1)-1)) >= math.MaxUint32 {
			errs = append(errs, fmt.Errorf("histograms[%d]: %d groups × %d bins is too large a domain", i, len(h.Groups), len(h.Bins)))
		}
	}
	if spec.MaxEventsPerUser < 1 {
		errs = append(errs, fmt.Errorf("max_events_per_user must be at least 1, got %d", spec.MaxEventsPerUser))
	}
	if spec.MaxGroupsPerUser < 1 {
		errs = append(errs, fmt.Errorf("max_groups_per_user must be at least 1, got %d", spec.MaxGroupsPerUser))
	}
	if spec.MaxTrackedUsers < 0 || spec.MaxTrackedUsers > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("max_tracked_users must be in [0, %d] (0: no cap), got %d", math.MaxInt32, spec.MaxTrackedUsers))
	}
	if spec.EventIndex != nil && len(spec.EventIndex) != len(spec.Histograms) {
		errs = append(errs, fmt.Errorf("%d event indices for %d histograms", len(spec.EventIndex), len(spec.Histograms)))
	}
	for i, e := range spec.EventIndex {
		if e < 0 {
			errs = append(errs, fmt.Errorf("histograms[%d]: negative event index %d", i, e))
		}
	}
	if spec.WindowSize <= 0 || spec.WindowSize%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("window size must be a positive whole number of milliseconds, got %v", spec.WindowSize))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("aggregate: invalid spec: %w", errors.Join(errs...))
	}
	a := &Aggregator{
		spec:     spec,
		m:        spec.MaxEventsPerUser,
		maxUsers: spec.MaxTrackedUsers,
		windows:  map[int64]*window{},
	}
	a.spec.Histograms = slices.Clone(spec.Histograms)
	a.spec.EventIndex = slices.Clone(spec.EventIndex)
	for i := range spec.Histograms {
		e := i
		if spec.EventIndex != nil {
			e = spec.EventIndex[i]
		}
		a.evIdx = append(a.evIdx, e)
	}
	if a.spec.Mem == nil {
		a.spec.Mem = memory.DefaultAllocator
	}
	entries := 0
	for _, h := range spec.Histograms {
		l := histLayout{nBins: len(h.Bins), nGroups: len(h.Groups), cellOff: a.nCells, recOff: a.recLen, slots: 1,
			binBits: uint(bits.Len(uint(len(h.Bins) - 1)))}
		if spec.MaxGroupsPerUser < l.nGroups || h.Selects {
			l.slots, l.grouped = spec.MaxGroupsPerUser, true
		}
		if h.Selects {
			l.keyed, l.maxID = true, uint32(1)<<(32-l.binBits)-1
		}
		if n := l.slots * spec.MaxEventsPerUser; n > maxRecordEntries-entries || n < 0 {
			return nil, fmt.Errorf("aggregate: invalid spec: a user record would hold more than %d entries (max_events_per_user × max_groups_per_user per histogram): lower them", maxRecordEntries)
		}
		entries += l.slots * spec.MaxEventsPerUser
		a.nCells += l.nBins * l.nGroups
		a.recLen += l.slots * spec.MaxEventsPerUser
		a.maxSlots = max(a.maxSlots, l.slots)
		a.hists = append(a.hists, l)
	}
	for i := range a.shards {
		a.shards[i].wins = map[int64]*shardWindow{}
	}
	return a, nil
}

func firstDup(xs []string) string {
	seen := make(map[string]bool, len(xs))
	for _, x := range xs {
		if seen[x] {
			return x
		}
		seen[x] = true
	}
	return ""
}

// Spec returns the aggregator's spec. Do not modify it.
func (a *Aggregator) Spec() Spec { return a.spec }

// part returns the bin and group of histogram h of ev when that part is to be
// bounded and counted: decoded (not -1) and in range. Out-of-range indices
// (an Event from a decoder for another configuration) are ignored.
func (a *Aggregator) part(h int, ev *decode.Event) (b, g int, ok bool) {
	e := a.evIdx[h]
	if e >= len(ev.Bins) || e >= len(ev.Groups) {
		return 0, 0, false
	}
	b, g = int(ev.Bins[e]), int(ev.Groups[e])
	l := &a.hists[h]
	if b >= 0 && b < l.nBins && g >= 0 && g < l.nGroups {
		return b, g, true // a listed histogram's part (a selecting one has no groups)
	}
	return b, 0, l.keyed && b >= 0 && b < l.nBins && e < len(ev.Keys) && ev.Keys[e] != nil
}

// Add bounds ev's histogram parts for the user and the window starting at
// windowStart (Unix ms) and keeps those the rule selects (see the package
// doc). It never blocks on other shards and does not allocate in steady
// state (new users and new windows may grow tables, reused after Close).
//
// Do not Add to a window while or after closing it: an Add for a window
// after its Close starts a fresh state for that window.
func (a *Aggregator) Add(windowStart int64, ev *decode.Event) (o Outcome) {
	nh := len(a.hists)
	parts := 0
	for h := range nh {
		if _, _, ok := a.part(h, ev); ok {
			parts++
		}
	}
	if parts == 0 {
		return o // nothing to count: do not spend a tracked slot
	}
	key := ev.User
	if key == 0 {
		key = 1 // 0 marks a free slot (see userTable)
	}
	s := &a.shards[key&(numShards-1)]
	s.mu.Lock()
	if s.npend.Load() != 0 {
		a.removeEvicted(s)
	}
	sw := s.last
	if sw == nil || sw.w.start != windowStart {
		if sw = s.wins[windowStart]; sw == nil {
			sw = a.openShardWindow(s, windowStart)
		}
		s.last = sw
	}
	w := sw.w
	slot, found := sw.users.probe(key)
	var rec []uint64
	if found {
		if key > w.tau.Load() {
			// Evicted by a user with a smaller hash since (the eviction's
			// removal is still queued): remove the record now.
			a.removeRecord(sw, slot)
			s.mu.Unlock()
			o.DroppedCapacity = parts
			return o
		}
		rec = sw.users.record(slot)
	} else {
		if a.maxUsers > 0 {
			admitted, evicted := w.admit(key, a.maxUsers)
			if !admitted {
				s.mu.Unlock()
				o.DroppedCapacity = parts
				return o
			}
			if evicted != 0 {
				a.evict(s, w, evicted)
				slot, _ = sw.users.probe(key) // the removal may have moved slots
			} else {
				w.users.Add(1)
				a.tracked.Add(1)
			}
		} else {
			w.users.Add(1)
			a.tracked.Add(1)
		}
		rec = sw.users.insert(key, slot)
	}
	ek := eventKey(ev.User, ev.TimeMs)
	for h := range nh {
		b, g, ok := a.part(h, ev)
		if !ok {
			continue
		}
		l := &a.hists[h]
		r := rec[l.recOff : l.recOff+l.slots*a.m]
		if l.keyed {
			a.addKeyed(sw, h, l, r, ev.User, ek, ev.Keys[a.evIdx[h]], b, &o)
			continue
		}
		x := entry(l, ek, g, b)
		// The common case of an active user, inline: one slot, full, its
		// group g, and x ranks after all of it.
		if last := r[a.m-1]; l.slots == 1 && last != 0 && x >= last && (!l.grouped || entryGroup(last, l.binBits) == g) {
			o.DroppedUserEvents++
			continue
		}
		// Groups are ranked by the histogram's index in the event (its
		// config index), whichever Aggregator counts it.
		a.bound(a.evIdx[h], l, r, ev.User, x, g, &o, nil)
	}
	s.mu.Unlock()
	return o
}

// admit decides whether the user with key, new to the window, is tracked
// (limit > 0: the cap). When the window is full and key is smaller than the
// largest tracked key, that user is evicted and its key returned.
func (w *window) admit(key uint64, limit int) (admitted bool, evicted uint64) {
	if key > w.tau.Load() {
		return false, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false, 0
	}
	if len(w.heap) < limit {
		// Until the cap is reached nobody is evicted: the keys are only
		// collected, and made a heap once, when the cap is reached.
		w.heap = append(w.heap, key)
		if len(w.heap) == limit {
			w.heap.init()
			w.tau.Store(w.heap[0])
		}
		return true, 0
	}
	top := w.heap[0]
	if key >= top {
		return false, 0
	}
	w.heap[0] = key
	w.heap.down(0)
	w.tau.Store(w.heap[0])
	return true, top
}

// evict has the record of the evicted user key removed from its shard: at
// once if that is s (held) or its lock is free, else by the next holder of
// its lock.
func (a *Aggregator) evict(s *shard, w *window, key uint64) {
	z := &a.shards[key&(numShards-1)]
	if z == s {
		a.removeUser(s, w, key)
		return
	}
	if z.mu.TryLock() {
		a.removeUser(z, w, key)
		z.mu.Unlock()
		return
	}
	z.evictMu.Lock()
	z.evicted = append(z.evicted, eviction{w: w, key: key})
	z.npend.Store(int32(len(z.evicted)))
	z.evictMu.Unlock()
}

// removeEvicted removes the records of s's users evicted by other shards
// (s.mu held).
func (a *Aggregator) removeEvicted(s *shard) {
	s.evictMu.Lock()
	for _, e := range s.evicted {
		a.removeUser(s, e.w, e.key)
	}
	clear(s.evicted)
	s.evicted = s.evicted[:0]
	s.npend.Store(0)
	s.evictMu.Unlock()
}

// removeUser removes the record of user key from s's state for window w, if
// still there (s.mu held), counting its selected parts as displaced.
func (a *Aggregator) removeUser(s *shard, w *window, key uint64) {
	sw := s.wins[w.start]
	if sw == nil || sw.w != w {
		return // the window was closed (or its record never inserted)
	}
	slot, found := sw.users.probe(key)
	if !found {
		return
	}
	a.removeRecord(sw, slot)
}

// removeRecord removes the user record at slot of sw (its shard's mu held),
// counting its selected parts as displaced and letting go of its keys.
func (a *Aggregator) removeRecord(sw *shardWindow, slot int) {
	rec := sw.users.record(slot)
	sw.displaced += int64(a.selectedParts(rec))
	a.unrefRecord(sw, rec)
	sw.users.remove(slot)
}

// selectedParts is the number of parts a record selects, over histograms:
// per histogram, its kept entries up to m.
func (a *Aggregator) selectedParts(rec []uint64) int {
	n := 0
	for h := range a.hists {
		n += a.selectedPartsOf(h, rec)
	}
	return n
}

// selectedPartsOf is selectedParts for histogram h alone.
func (a *Aggregator) selectedPartsOf(h int, rec []uint64) int {
	l := &a.hists[h]
	r := rec[l.recOff : l.recOff+l.slots*a.m]
	k := 0
	for j := 0; j < l.slots && r[j*a.m] != 0; j++ {
		k += used(r[j*a.m : (j+1)*a.m])
	}
	return min(k, a.m)
}

// openShardWindow creates shard s's state for a window (s.mu held).
func (a *Aggregator) openShardWindow(s *shard, start int64) *shardWindow {
	a.mu.Lock()
	w := a.windows[start]
	if w == nil {
		w = &window{start: start, heap: a.spare}
		a.spare = nil
		w.tau.Store(math.MaxUint64)
		a.windows[start] = w
	}
	a.mu.Unlock()
	var sw *shardWindow
	if n := len(s.free); n > 0 {
		sw, s.free = s.free[n-1], s.free[:n-1]
	} else {
		sw = &shardWindow{users: newUserTable(a.recLen)}
	}
	sw.w = w
	s.wins[start] = sw
	return sw
}

// Reset drops every open window and all bounding state, and frees the memory
// kept for reuse (partition revocation: the new owner re-reads the events).
// Adds must not run concurrently with Reset.
func (a *Aggregator) Reset() {
	a.mu.Lock()
	for _, w := range a.windows {
		a.tracked.Add(-w.users.Load())
	}
	a.windows = map[int64]*window{}
	a.mu.Unlock()
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		s.wins = map[int64]*shardWindow{}
		s.last = nil
		s.free = nil
		s.evictMu.Lock()
		s.evicted = nil
		s.npend.Store(0)
		s.evictMu.Unlock()
		s.mu.Unlock()
	}
}

// OpenWindows returns the start (Unix ms) of every window holding state, in
// increasing order.
func (a *Aggregator) OpenWindows() []int64 {
	a.mu.Lock()
	out := make([]int64, 0, len(a.windows))
	for s := range a.windows {
		out = append(out, s)
	}
	a.mu.Unlock()
	slices.Sort(out)
	return out
}

// TrackedUsers is the number of (user, window) pairs currently tracked, over
// all open windows (at most Spec.MaxTrackedUsers per window).
func (a *Aggregator) TrackedUsers() int { return int(a.tracked.Load()) }
