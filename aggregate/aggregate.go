// Package aggregate bounds each user's contribution and counts what remains
// into per-window histograms, handed on as Arrow record batches.
//
// Bounding happens before counting. Per user, per window, per histogram, at
// most Spec.MaxEventsPerUser events are counted, spread over at most
// Spec.MaxGroupsPerUser distinct groups. Events beyond either bound are
// dropped in arrival order — the first events of a user are kept — and
// reported in the [Outcome] of [Aggregator.Add]. Feeding each partition in
// offset order makes the choice deterministic for a user whose events all
// come through one partition; across partitions it follows arrival order,
// which bounds the user just the same. When the event-count bound is reached
// an event is reported as dropped_user_events even if it would also have
// opened a new group.
//
// The bounder's state is one compact record per active (user, window) pair;
// Spec.MaxTrackedUsers caps the number of users tracked in each window (0: no
// cap). Beyond the cap, events of users not yet tracked in that window are
// dropped (dropped_capacity): an event is never counted without being
// bounded. The cap is per window so that a user's events in one window never
// displace another user in a different window. Within a window, first come
// first tracked: whether user Z is tracked depends on how many users came
// first, so one user's presence can displace one other user. Under the
// replace relation that keeps the per-window change within one user's events
// out and one user's events in (the replace sensitivity); under add_remove
// the change becomes that same "one out, one in", which pipeline/plan.go
// charges for whenever the cap is on.
//
// [Aggregator.Close] returns a window's counts for every declared
// (histogram, group, bin), zeros included, so what is released never depends
// on which keys appeared in the data.
package aggregate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/pipeline/decode"
)

// Spec declares what is counted and how contributions are bounded.
type Spec struct {
	// Histograms in config order; the index of a histogram here is its index
	// in decode.Event.Bins and Groups.
	Histograms []HistSpec
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
	Groups []string // in output order; ["*"] for a histogram without group_by
}

// SpecFromConfig builds the Spec of a loaded (defaulted and validated)
// configuration.
func SpecFromConfig(cfg *config.Config) Spec {
	s := Spec{
		MaxEventsPerUser: cfg.Contribution.MaxEventsPerUser,
		MaxGroupsPerUser: cfg.Contribution.MaxGroupsPerUser,
		MaxTrackedUsers:  cfg.Contribution.MaxTrackedUsers,
		WindowSize:       cfg.Window.Size.D(),
	}
	for _, h := range cfg.Histograms {
		s.Histograms = append(s.Histograms, HistSpec{Name: h.Name, Bins: slices.Clone(h.Bins), Groups: h.GroupNames()})
	}
	return s
}

// Outcome counts what happened to the histogram parts of one event passed to
// Add (parts already dropped by the decoder are not counted here).
type Outcome struct {
	Counted           int // counted into the window
	DroppedUserEvents int // over max_events_per_user for this user, window and histogram
	DroppedUserGroups int // would exceed max_groups_per_user
	DroppedCapacity   int // max_tracked_users reached: the user could not be tracked
}

// Add accumulates p into o.
func (o *Outcome) Add(p Outcome) {
	o.Counted += p.Counted
	o.DroppedUserEvents += p.DroppedUserEvents
	o.DroppedUserGroups += p.DroppedUserGroups
	o.DroppedCapacity += p.DroppedCapacity
}

// numShards is the number of user-hash shards (a power of two).
const numShards = 64

// histLayout places one histogram in a window's count vector and in a user
// record.
type histLayout struct {
	nBins, nGroups int
	cellOff        int // count of (g, b) is at cellOff + g*nBins + b
	recOff         int // the histogram's words in a user record: [events, group slots...]
	gslots         int // group slots (0 when the group bound cannot bind)
}

// window is the count vector of one open window, shared by all shards.
type window struct {
	start   int64
	counts  []int64      // atomic adds from any shard; read once every shard has let go of the window
	tracked atomic.Int64 // users tracked in this window (capped by MaxTrackedUsers)
}

// shardWindow is one shard's bounding state for one window.
type shardWindow struct {
	w *window
	// users holds one record of recLen words per user: per histogram, the
	// events counted, then the group slots (group index+1, 0 = free).
	users *userTable
}

type shard struct {
	// mu guards wins, last, free and every shardWindow reachable from them
	// (their user tables with the bounding records).
	mu   sync.Mutex
	wins map[int64]*shardWindow
	last *shardWindow   // most recently used window: the common case
	free []*shardWindow // cleared states kept for reuse (at most maxFree)
	_    [64]byte       // keep shards on separate cache lines
}

const maxFree = 2

// Aggregator bounds and counts events into open windows. Add may be called
// concurrently from several goroutines (one per partition): users are
// sharded by hash, with one mutex per shard; count vectors are updated with
// atomic adds.
type Aggregator struct {
	spec      Spec
	hists     []histLayout
	nCells    int    // length of a window's count vector
	recLen    int    // uint32 words per (user, window) record
	maxEvents uint32 // MaxEventsPerUser, clamped
	maxUsers  int64
	tracked   atomic.Int64 // tracked (user, window) pairs over all shards and windows

	// mu guards windows: the open windows and their count vectors. Lock
	// order: a shard's mu may be held while taking mu, never the reverse.
	mu      sync.Mutex
	windows map[int64]*window

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
		if len(h.Groups) == 0 {
			errs = append(errs, fmt.Errorf("histograms[%d]: no groups (use [\"*\"] without group_by)", i))
		} else if d := firstDup(h.Groups); d != "" {
			errs = append(errs, fmt.Errorf("histograms[%d]: duplicate group %q", i, d))
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
	if spec.WindowSize <= 0 || spec.WindowSize%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("window size must be a positive whole number of milliseconds, got %v", spec.WindowSize))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("aggregate: invalid spec: %w", errors.Join(errs...))
	}
	a := &Aggregator{
		spec:      spec,
		maxEvents: uint32(min(spec.MaxEventsPerUser, math.MaxUint32)),
		maxUsers:  int64(spec.MaxTrackedUsers),
		windows:   map[int64]*window{},
	}
	a.spec.Histograms = slices.Clone(spec.Histograms)
	if a.spec.Mem == nil {
		a.spec.Mem = memory.DefaultAllocator
	}
	for _, h := range spec.Histograms {
		l := histLayout{nBins: len(h.Bins), nGroups: len(h.Groups), cellOff: a.nCells, recOff: a.recLen}
		if spec.MaxGroupsPerUser < l.nGroups {
			l.gslots = spec.MaxGroupsPerUser
		}
		a.nCells += l.nBins * l.nGroups
		a.recLen += 1 + l.gslots
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
	if h >= len(ev.Bins) || h >= len(ev.Groups) {
		return 0, 0, false
	}
	b, g = int(ev.Bins[h]), int(ev.Groups[h])
	l := &a.hists[h]
	return b, g, b >= 0 && b < l.nBins && g >= 0 && g < l.nGroups
}

// Add bounds ev's histogram parts for the user and the window starting at
// windowStart (Unix ms) and counts those within the bounds. It never blocks
// on other shards and does not allocate in steady state (new users and new
// windows may grow tables, reused after Close).
//
// Do not Add to a window while or after closing it: an Add for a window
// after its Close starts a fresh state for that window.
func (a *Aggregator) Add(windowStart int64, ev *decode.Event) (o Outcome) {
	nh := len(a.hists)
	counted := false
	for h := range nh {
		if _, _, ok := a.part(h, ev); ok {
			counted = true
			break
		}
	}
	if !counted {
		return o // nothing to count: do not spend a tracked slot
	}
	s := &a.shards[ev.User&(numShards-1)]
	s.mu.Lock()
	sw := s.last
	if sw == nil || sw.w.start != windowStart {
		if sw = s.wins[windowStart]; sw == nil {
			sw = a.openShardWindow(s, windowStart)
		}
		s.last = sw
	}
	key := ev.User
	if key == 0 {
		key = 1 // 0 marks a free slot (see userTable)
	}
	slot, found := sw.users.probe(key)
	var rec []uint32
	if found {
		rec = sw.users.record(slot)
	} else {
		// The cap is per window, so a user's events in one window never
		// take the place of another user's in a different window; within a
		// window, first come first tracked (see the package doc for what
		// that does to the sensitivity).
		if a.maxUsers > 0 && sw.w.tracked.Add(1) > a.maxUsers {
			sw.w.tracked.Add(-1)
			s.mu.Unlock()
			for h := range nh {
				if _, _, ok := a.part(h, ev); ok {
					o.DroppedCapacity++
				}
			}
			return o
		}
		rec = sw.users.insert(key, slot)
		a.tracked.Add(1)
	}
	for h := range nh {
		b, g, ok := a.part(h, ev)
		if !ok {
			continue
		}
		l := &a.hists[h]
		r := rec[l.recOff : l.recOff+1+l.gslots]
		if r[0] >= a.maxEvents {
			o.DroppedUserEvents++
			continue
		}
		if l.gslots > 0 {
			tag, found := uint32(g)+1, false
			for k := 1; k < len(r); k++ {
				if r[k] == tag {
					found = true
					break
				}
				if r[k] == 0 { // slots fill in order: a free slot means tag is new
					r[k], found = tag, true
					break
				}
			}
			if !found {
				o.DroppedUserGroups++
				continue
			}
		}
		r[0]++
		atomic.AddInt64(&sw.w.counts[l.cellOff+g*l.nBins+b], 1)
		o.Counted++
	}
	s.mu.Unlock()
	return o
}

// openShardWindow creates shard s's state for a window (s.mu held).
func (a *Aggregator) openShardWindow(s *shard, start int64) *shardWindow {
	a.mu.Lock()
	w := a.windows[start]
	if w == nil {
		w = &window{start: start, counts: make([]int64, a.nCells)}
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

// Close removes the window's state (counts and bounding records) and returns
// its counts: every declared (histogram, group, bin), zeros included, also
// for a window that never saw an event. The caller must Release the result.
func (a *Aggregator) Close(windowStart int64) (*WindowCounts, error) {
	end := windowStart + a.spec.WindowSize.Milliseconds()
	if end < windowStart {
		return nil, fmt.Errorf("aggregate: window start %d: end overflows int64", windowStart)
	}
	// Detach the count vector first, so that a (misplaced) concurrent Add on
	// a shard already swept below starts a fresh window instead of touching
	// this one.
	a.mu.Lock()
	w := a.windows[windowStart]
	delete(a.windows, windowStart)
	a.mu.Unlock()
	var users int64
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		if sw := s.wins[windowStart]; sw != nil {
			users += int64(sw.users.len())
			delete(s.wins, windowStart)
			if s.last == sw {
				s.last = nil
			}
			sw.w = nil
			if len(s.free) < maxFree {
				sw.users.reset()
				s.free = append(s.free, sw)
			}
		}
		s.mu.Unlock()
	}
	a.tracked.Add(-users)
	// Every Add that could reach w did so holding a shard lock taken above,
	// so its writes happen before build reads w.counts.
	var counts []int64
	if w != nil {
		counts = w.counts
	}
	return a.build(windowStart, end, counts)
}

// Reset drops every open window and all bounding state, and frees the memory
// kept for reuse (partition revocation: the new owner re-reads the events).
// Adds must not run concurrently with Reset.
func (a *Aggregator) Reset() {
	a.mu.Lock()
	a.windows = map[int64]*window{}
	a.mu.Unlock()
	var users int64
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		for _, sw := range s.wins {
			users += int64(sw.users.len())
		}
		s.wins = map[int64]*shardWindow{}
		s.last = nil
		s.free = nil
		s.mu.Unlock()
	}
	a.tracked.Add(-users)
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
// all open windows (at most Spec.MaxTrackedUsers).
func (a *Aggregator) TrackedUsers() int { return int(a.tracked.Load()) }
