package aggregate

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/dpstage/stage/decode"
)

// Averaging (histograms of kind average).
//
// Each event of an average histogram carries one probability vector (the
// decoder checks it and divides it by its sum). Per window and histogram the
// Averager bounds and combines them so that one user's presence or data moves
// the result by a known amount, whatever the other users do:
//
//  1. Per user, the vectors the user sent in the window are averaged into
//     one probability vector (order-independent: a running sum and a count).
//  2. Only the Users users with the smallest user hashes are kept (Users is
//     the public N_pub of the histogram). The user hash is the decoder's
//     keyed hash, under a secret key, so which users are kept
//     depends neither on arrival order nor on the vectors, and no producer
//     can pick ids that are always kept. Memory is bounded by Users vectors
//     per window: a user whose hash is above the Users-th smallest seen so
//     far can never be kept (the threshold only falls), so it is dropped at
//     once.
//  3. Close pads the kept users with (Users − kept) uniform vectors and
//     averages: p̄ = (Σ kept vectors + (Users − kept)·u)/Users, u_i = 1/n.
//
// Sensitivity. Let K(U) be the kept set of a user set U: the Users smallest
// hashes. For neighbours U′ = U ∪ {w} (add), U \ {w} (remove), or U with w's
// data changed or w swapped for another user (replace), K(U) and K(U′) differ
// by at most one member out and one in, where a padding copy counts as a
// member (adding one element to a set changes its k smallest by at most one
// in and the largest out; removing one, by at most one out and the next one
// in; a swap is a removal then an addition and composes to a single swap,
// since the element the removal lets in is the one the addition pushes out
// if the new element is kept). Every member is a probability vector, so
// ‖p̄ − p̄′‖₁ ≤ ‖a − b‖₁/Users ≤ 2/Users for the swapped members a, b. This is
// the β of mechanism.AverageSpec (before smoothing). TestAverageSensitivity
// checks it on random neighbours.
//
// The number of kept users is not released; only the padded average is.

// AverageHist is one average histogram's public parameters.
type AverageHist struct {
	// Index is the histogram's index in the config (and in
	// decode.Event.Vectors).
	Index int
	Name  string
	Bins  int // n ≥ 2
	Users int // N_pub ≥ 1
}

// AverageOutcome counts what happened to the average parts of one event.
type AverageOutcome struct {
	Added       int // averaged into a kept user's vector
	NotSelected int // the user is not among the Users smallest hashes of the window
}

// Averager accumulates the average histograms' windows. Its methods are safe
// for concurrent use.
type Averager struct {
	hists []AverageHist
	// deferred: the Users cap is applied at the close, among the users the
	// cross-window bound admits (NewDeferredAverager), not on arrival.
	deferred bool
	mu       sync.Mutex // guards wins
	wins     map[int64][]*keptUsers
}

// ErrNoAverages is returned by NewAverager when there is nothing to average.
var ErrNoAverages = errors.New("aggregate: no average histograms")

// NewAverager returns an Averager for hists (in config order).
func NewAverager(hists []AverageHist) (*Averager, error) {
	if len(hists) == 0 {
		return nil, ErrNoAverages
	}
	for _, h := range hists {
		if h.Bins < 2 || h.Users < 1 || h.Index < 0 {
			return nil, fmt.Errorf("aggregate: average histogram %q: bins %d (want ≥ 2), users %d (want ≥ 1), index %d", h.Name, h.Bins, h.Users, h.Index)
		}
	}
	return &Averager{hists: hists, wins: map[int64][]*keptUsers{}}, nil
}

// NewDeferredAverager is NewAverager for a stage with the cross-window
// bound (contribution.max_windows_per_user): every user's vectors are kept
// until the window closes, and CloseAdmitted keeps the Users smallest
// hashes among the users admitted to the window. Keeping the smallest on
// arrival would not do: a user tentatively kept in a window it turns out
// not to be admitted to would have pushed another user out of it — a
// change outside the user's K windows. With the cap applied among the
// admitted users the kept set is that of the sensitivity argument above
// for the window's admitted users, and whether a user is admitted depends
// on its own events only. Memory grows with the window's users (one
// vector each).
func NewDeferredAverager(hists []AverageHist) (*Averager, error) {
	a, err := NewAverager(hists)
	if err != nil {
		return nil, err
	}
	a.deferred = true
	return a, nil
}

// Hists returns the histograms averaged, in config order.
func (a *Averager) Hists() []AverageHist { return a.hists }

// Add averages ev's valid vectors (decode.Event.Drops[h] == ReasonNone) into
// the window starting at windowStart.
func (a *Averager) Add(windowStart int64, ev *decode.Event) (o AverageOutcome) {
	// Events without a usable vector (e.g. a count histogram's events in a
	// mixed config) return without taking the lock shared by every worker.
	found := false
	for _, h := range a.hists {
		if a.vector(h, ev) != nil {
			found = true
			break
		}
	}
	if !found {
		return o
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var ws []*keptUsers
	for i, h := range a.hists {
		v := a.vector(h, ev)
		if v == nil {
			continue
		}
		if ws == nil {
			if ws = a.wins[windowStart]; ws == nil {
				ws = make([]*keptUsers, len(a.hists))
				for j, hj := range a.hists {
					limit := hj.Users
					if a.deferred {
						limit = math.MaxInt // applied by CloseAdmitted
					}
					ws[j] = newKeptUsers(limit, hj.Bins)
				}
				a.wins[windowStart] = ws
			}
		}
		if ws[i].add(ev.User, v) {
			o.Added++
		} else {
			o.NotSelected++
		}
	}
	return o
}

// vector returns ev's valid vector for h, or nil.
func (a *Averager) vector(h AverageHist, ev *decode.Event) []float64 {
	if h.Index >= len(ev.Vectors) || h.Index >= len(ev.Drops) || ev.Drops[h.Index] != decode.ReasonNone {
		return nil
	}
	if v := ev.Vectors[h.Index]; len(v) == h.Bins {
		return v
	}
	return nil
}

// Close removes the window starting at windowStart and returns its padded
// averages (a window without events gives every histogram the uniform
// vector).
func (a *Averager) Close(windowStart int64) *AverageWindow {
	a.mu.Lock()
	ws := a.wins[windowStart]
	delete(a.wins, windowStart)
	a.mu.Unlock()
	return &AverageWindow{hists: a.hists, kept: ws}
}

// CloseAdmitted is Close for an Averager made by NewDeferredAverager:
// admit is called for every user with a vector in the window (possibly
// more than once for a user: it must answer the same), and each
// histogram's result averages the Users smallest hashes among the users it
// admits.
func (a *Averager) CloseAdmitted(windowStart int64, admit func(user uint64) bool) (*AverageWindow, error) {
	if !a.deferred || admit == nil {
		return nil, errors.New("aggregate: close admitted: the averager does not defer its cap, or nil admit")
	}
	aw := a.Close(windowStart)
	aw.notAdmittedBy = make([]int, len(a.hists))
	aw.notSelectedBy = make([]int, len(a.hists))
	for i, k := range aw.kept {
		kept := k.h[:0]
		for _, e := range k.h {
			if admit(e.user) {
				kept = append(kept, e)
			} else {
				delete(k.index, e.user)
				aw.notAdmitted++
				aw.notAdmittedBy[i]++
			}
		}
		clear(k.h[len(kept):])
		k.h = kept
		for j, e := range k.h {
			e.pos = j
		}
		heap.Init(&k.h)
		k.limit = a.hists[i].Users
		for len(k.h) > k.limit {
			e := heap.Pop(&k.h).(*userVec)
			delete(k.index, e.user)
			aw.notSelected++
			aw.notSelectedBy[i]++
		}
	}
	return aw, nil
}

// Reset forgets every open window.
func (a *Averager) Reset() {
	a.mu.Lock()
	clear(a.wins)
	a.mu.Unlock()
}

// AverageWindow is a closed window of the average histograms.
type AverageWindow struct {
	hists []AverageHist
	kept  []*keptUsers // nil: no events
	// notAdmitted, notSelected: (user, histogram) vectors dropped by
	// CloseAdmitted, for the cross-window bound and for the Users cap.
	notAdmitted, notSelected int
	// notAdmittedBy, notSelectedBy: notAdmitted and notSelected per
	// averaged histogram (hists order).
	notAdmittedBy, notSelectedBy []int
}

// NotAdmitted is the number of (user, histogram) vectors CloseAdmitted
// dropped because the cross-window bound did not admit the user.
func (w *AverageWindow) NotAdmitted() int { return w.notAdmitted }

// NotAdmittedBy is NotAdmitted for the average histogram whose config
// index is hist alone.
func (w *AverageWindow) NotAdmittedBy(hist int) int {
	if i := w.position(hist); i < len(w.notAdmittedBy) {
		return w.notAdmittedBy[i]
	}
	return 0
}

// NotSelected is the number of (user, histogram) vectors CloseAdmitted
// dropped because the user is not among the Users smallest admitted hashes.
func (w *AverageWindow) NotSelected() int { return w.notSelected }

// NotSelectedBy is NotSelected for the average histogram whose config
// index is hist alone. Raw data, like Kept: the operator's window-bound
// share only.
func (w *AverageWindow) NotSelectedBy(hist int) int {
	if i := w.position(hist); i < len(w.notSelectedBy) {
		return w.notSelectedBy[i]
	}
	return 0
}

// position returns the position among the averaged histograms of the one
// whose config index is hist (panics if hist is not an average histogram:
// a caller bug, like an out-of-range slice index).
func (w *AverageWindow) position(hist int) int {
	for i, h := range w.hists {
		if h.Index == hist {
			return i
		}
	}
	panic(fmt.Sprintf("aggregate: histogram %d is not an average histogram", hist))
}

// Mean writes the padded average p̄ of the average histogram whose config
// index is hist (AverageHist.Index: the same index as WindowCounts.Counts,
// decode.Event's slices and plan.AveragePlan.Index) into out (len Bins) and
// returns it.
func (w *AverageWindow) Mean(hist int, out []float64) []float64 {
	i := w.position(hist)
	h := w.hists[i]
	out = out[:h.Bins]
	var kept *keptUsers
	if w.kept != nil {
		kept = w.kept[i]
	}
	n := float64(h.Bins)
	pad := h.Users
	for j := range out {
		out[j] = 0
	}
	if kept != nil {
		pad -= len(kept.h)
		for _, e := range kept.h {
			inv := 1 / float64(e.count)
			for j, s := range e.sum {
				out[j] += s * inv
			}
		}
	}
	for j := range out {
		out[j] = (out[j] + float64(pad)/n) / float64(h.Users)
	}
	// Each member sums to 1 up to rounding; renormalize the rounding away.
	var s float64
	for _, v := range out {
		s += v
	}
	if s > 0 && !math.IsInf(s, 0) {
		for j := range out {
			out[j] /= s
		}
	}
	return out
}

// Kept returns how many users the average histogram of config index hist
// kept. It is raw data: for tests, local diagnostics, the operator's
// window-bound share (BlindWatch), and the release's total, which carries
// it only as a charged noisy count (plan.TotalPlan) — never as such.
func (w *AverageWindow) Kept(hist int) int {
	i := w.position(hist)
	if w.kept == nil || w.kept[i] == nil {
		return 0
	}
	return len(w.kept[i].h)
}

// keptUsers holds the users with the smallest hashes of one (window,
// histogram): a max-heap on the hash, so the largest kept hash is evicted
// first.
type keptUsers struct {
	limit int
	bins  int
	h     userHeap
	index map[uint64]*userVec
}

type userVec struct {
	user  uint64
	sum   []float64
	count int
	pos   int // index in the heap
}

func newKeptUsers(limit, bins int) *keptUsers {
	return &keptUsers{limit: limit, bins: bins, index: map[uint64]*userVec{}}
}

// add adds v to user's vector if the user is (still) among the limit
// smallest hashes, and reports whether it did.
func (k *keptUsers) add(user uint64, v []float64) bool {
	if e, ok := k.index[user]; ok {
		for j, x := range v {
			e.sum[j] += x
		}
		e.count++
		return true
	}
	if len(k.h) >= k.limit {
		top := k.h[0]
		if user >= top.user { // ties cannot happen: equal hashes are one user
			return false
		}
		heap.Pop(&k.h)
		delete(k.index, top.user)
		// Reuse the evicted user's storage.
		top.user, top.count = user, 1
		copy(top.sum, v)
		k.index[user] = top
		heap.Push(&k.h, top)
		return true
	}
	e := &userVec{user: user, sum: append(make([]float64, 0, k.bins), v...), count: 1}
	k.index[user] = e
	heap.Push(&k.h, e)
	return true
}

// userHeap is a max-heap of users by hash.
type userHeap []*userVec

func (h userHeap) Len() int           { return len(h) }
func (h userHeap) Less(i, j int) bool { return h[i].user > h[j].user }
func (h userHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *userHeap) Push(x any) {
	e := x.(*userVec)
	e.pos = len(*h)
	*h = append(*h, e)
}
func (h *userHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
