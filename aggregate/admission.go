package aggregate

import (
	"fmt"
	"sync"
)

// Admissions bounds how many windows of a budget period one user's events
// count in (contribution.max_windows_per_user = K): a user is admitted to
// the K earliest windows of the period in which the user has an eligible
// event — an event that passed decoding and the window's own-times rule
// with at least one histogram part to count, before any per-window bound.
// Later windows of the period drop that user's events (bound_windows).
//
// # Why this is exact, order-independent and restart-safe
//
// Windows close in order, so when window w closes every earlier window of
// its period is closed and no event of an earlier window can still arrive.
// Whether the user is admitted in w is then decided by one number, the
// user's admitted windows among the closed windows of the period (closed_u):
// admitted iff the user has an eligible event in w and closed_u < K, after
// which closed_u grows by one. That is a function of the user's own events
// only (the set of windows in which they have eligible events), not of the
// order in which events arrive across partitions, nor of any other user.
//
// At add time a user with closed_u ≥ K cannot be admitted in any later
// window of the period: its events are dropped at once (Admissible), which
// keeps the memory of the per-window bounding state to admissible users.
// Other events are counted tentatively; Close decides.
//
// The state that must survive a restart is closed_u per user and period,
// and it must change exactly with the recorded windows: the stage persists
// the users admitted in window w (the result of Close) in the same ledger
// transaction as w's releases and restores them with Restore. A window
// recomputed after a crash was not recorded, so neither were its
// admissions: they are recomputed from the same events with the same
// answer.
//
// Eligible users: the users with a part to count in the window (the
// Aggregator's records of the window, whatever the per-window bounds keep
// of them; [Aggregator.CloseAdmitted] passes each to Admit). That is a
// function of the user's own events in the window.
//
// Memory: one entry per (user, period) with at least one admitted window —
// a user hash and a count: 29.7 bytes per user with Go's maps, measured at
// 10⁶ users (TestAdmissionsMemory) — freed by Forget when the period is
// over. The ledger holds the same counts (ledger.RecordWindowAdmitted):
// 26.3 bytes per user of bbolt pages (ledger's TestAdmissionsDiskBytes).
// Admissible costs about 29 ns per event (BenchmarkAdmissible).
//
// Admissions is safe for concurrent use: Admissible is called by the
// partition consumers, Close and Restore by the releaser.
type Admissions struct {
	k int

	shards [numShards]admShard
}

type admShard struct {
	// mu guards periods and every map in it.
	mu sync.Mutex
	// periods maps a period start (Unix ms) to closed_u per user hash.
	periods map[int64]map[uint64]uint16
	_       [64]byte // keep shards on separate cache lines
}

// NewAdmissions returns the state for max_windows_per_user = k (1 ≤ k ≤
// 65535).
func NewAdmissions(k int) (*Admissions, error) {
	if k < 1 || k > 1<<16-1 {
		return nil, fmt.Errorf("aggregate: max windows per user must be in [1, 65535], got %d", k)
	}
	a := &Admissions{k: k}
	for i := range a.shards {
		a.shards[i].periods = map[int64]map[uint64]uint16{}
	}
	return a, nil
}

// K returns the bound.
func (a *Admissions) K() int { return a.k }

func (a *Admissions) shard(user uint64) *admShard { return &a.shards[user&(numShards-1)] }

// UserKey maps a user hash (decode.Event.User) to the key the Aggregator's
// tables use for it (0 marks a free slot there and is read as 1), so that a
// user is the same user in Admissions, the Aggregator, the Averager's
// admissions and the ledger.
func UserKey(user uint64) uint64 { return norm(user) }

func norm(user uint64) uint64 {
	if user == 0 {
		return 1
	}
	return user
}

// Admissible reports whether user may still be admitted in some window of
// period that is not closed yet: false once the user was admitted in K
// closed windows of the period (its events are then dropped at add time).
func (a *Admissions) Admissible(user uint64, period int64) bool {
	user = norm(user)
	s := a.shard(user)
	s.mu.Lock()
	n := s.periods[period][user]
	s.mu.Unlock()
	return int(n) < a.k
}

// Closed returns closed_u: the user's admitted windows among the closed
// windows of period.
func (a *Admissions) Closed(user uint64, period int64) int {
	user = norm(user)
	s := a.shard(user)
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.periods[period][user])
}

// Close decides the admissions of the window that closes now, in period:
// users lists the users with an eligible event in the window (each once).
// It returns those admitted (closed_u < K; their closed_u grows by one), in
// the order given, and leaves the others out. The caller counts only the
// admitted users' contributions and persists the returned list with the
// window's releases. Windows of a period must be closed in order.
func (a *Admissions) Close(period int64, users []uint64) (admitted []uint64) {
	admitted = make([]uint64, 0, len(users))
	for _, u := range users {
		if a.Admit(period, u) {
			admitted = append(admitted, norm(u))
		}
	}
	return admitted
}

// Admit is Close for one user of the window that closes now: it reports
// whether the user is admitted (closed_u < K) and if so counts the window
// in closed_u. Call it once per user with an eligible event in the window,
// in any order (the decisions are independent). [Aggregator.CloseAdmitted]
// calls it through its admit function.
func (a *Admissions) Admit(period int64, user uint64) bool {
	user = norm(user)
	s := a.shard(user)
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.periods[period]
	if m == nil {
		m = map[uint64]uint16{}
		s.periods[period] = m
	}
	if int(m[user]) < a.k {
		m[user]++
		return true
	}
	return false
}

// Restore sets closed_u for the users of period from the ledger (the
// counts the recorded windows admitted), replacing what is held.
func (a *Admissions) Restore(period int64, counts map[uint64]uint16) {
	for i := range a.shards {
		a.shards[i].mu.Lock()
		delete(a.shards[i].periods, period)
		a.shards[i].mu.Unlock()
	}
	for u, n := range counts {
		u = norm(u)
		s := a.shard(u)
		s.mu.Lock()
		m := s.periods[period]
		if m == nil {
			m = map[uint64]uint16{}
			s.periods[period] = m
		}
		m[u] = n
		s.mu.Unlock()
	}
}

// Forget drops the periods that start before `before`.
func (a *Admissions) Forget(before int64) {
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		for p := range s.periods {
			if p < before {
				delete(s.periods, p)
			}
		}
		s.mu.Unlock()
	}
}

// Users returns the number of (user, period) entries held.
func (a *Admissions) Users() int {
	n := 0
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		for _, m := range s.periods {
			n += len(m)
		}
		s.mu.Unlock()
	}
	return n
}
