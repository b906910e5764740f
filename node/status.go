package node

import (
	"sync/atomic"
	"time"
)

// ReadyFlags are what /readyz reports (Readiness): ready when the state is
// loaded, the broker reached and partitions assigned, and not draining.
// Each flag is set by the role that knows it.
type ReadyFlags struct {
	StateLoaded atomic.Bool
	Connected   atomic.Bool
	Assigned    atomic.Bool
	Draining    atomic.Bool
	// standby: distributed mode, a member of the bounders' group that the
	// group gave no input partition (more replicas than partitions).
	Standby atomic.Bool
	// releasing: this instance holds the release log and releases
	// (always with the single-process mode once the state is loaded; in
	// the distributed mode only on the one active releaser).
	Releasing atomic.Bool
	// partialsGap: the distributed releaser holds a window whose partial
	// of some source partition is missing for good; partialsLost: it
	// detected a data loss on the partials topic and has not released a
	// complete window since. Either makes the releasing instance not
	// ready.
	PartialsGap  atomic.Bool
	PartialsLost atomic.Bool
	// connectErr is why Connected is false (the brokers' dial errors at
	// start, a failed fetch); nil while connected (SetConnected).
	connectErr atomic.Pointer[string]
}

// SetConnected records that the brokers answered.
func (f *ReadyFlags) SetConnected() {
	f.connectErr.Store(nil)
	f.Connected.Store(true)
}

// SetUnconnected records that they did not, and why.
func (f *ReadyFlags) SetUnconnected(why string) {
	f.connectErr.Store(&why)
	f.Connected.Store(false)
}

// Readiness is a snapshot of the stage's readiness conditions.
type Readiness struct {
	StateLoaded bool `json:"state_loaded"`
	Connected   bool `json:"connected"`
	Assigned    bool `json:"assigned"`
	Draining    bool `json:"draining"`
	// Standby (distributed mode): a member of the bounders' group that
	// the group gave no input partition, because there are more replicas
	// than input partitions. It is doing its job — waiting to take
	// partitions or the release over — so it counts as assigned for Ready
	// (a PodDisruptionBudget can then drain it).
	Standby bool `json:"standby"`
	// Releasing: this instance holds the release log (distributed mode:
	// the one active releaser). Not a condition of Ready.
	Releasing bool `json:"releasing"`
	// PartialsGap (distributed mode, releasing instance): a window is held
	// because a source partition's partial of it is missing (lost, or the
	// partition was counted from a later window; see the log).
	// PartialsLost: records of the partials topic were lost (deleted past
	// the release group's offset, the topic recreated) and no complete
	// window was released since. Either makes the instance not ready; both
	// are left out of /readyz while false.
	PartialsGap  bool `json:"partials_gap,omitempty"`
	PartialsLost bool `json:"partials_lost,omitempty"`
	// SchemaRegistryUnreachable: an input partition is held because the
	// schema of its next record could not be fetched from the Schema
	// Registry (Stats.SchemaRegistryHeld); not ready until it resumes. Left
	// out of /readyz while false.
	SchemaRegistryUnreachable bool `json:"schema_registry_unreachable,omitempty"`
	// ConnectError is why Connected is false — the brokers' dial errors
	// (connection refused, no such host) or a failed fetch. Operator
	// information (it names the brokers): only the operator listener's
	// /readyz shows it (internal/httpapi).
	ConnectError string `json:"-"`
}

// Ready reports whether the stage is doing its job.
func (r Readiness) Ready() bool {
	return r.StateLoaded && r.Connected && (r.Assigned || r.Standby) && !r.Draining && !r.PartialsGap && !r.PartialsLost && !r.SchemaRegistryUnreachable
}

// Readiness returns the current readiness conditions.
func (s *Node) Readiness() Readiness {
	r := Readiness{
		StateLoaded: s.Ready.StateLoaded.Load(),
		Connected:   s.Ready.Connected.Load(),
		Assigned:    s.Ready.Assigned.Load(),
		Draining:    s.Ready.Draining.Load(),
		Standby:     s.Ready.Standby.Load(),
		Releasing:   s.Ready.Releasing.Load(),

		PartialsGap:  s.Ready.PartialsGap.Load(),
		PartialsLost: s.Ready.PartialsLost.Load(),

		SchemaRegistryUnreachable: s.Stats.SchemaRegistryHeld.Load() > 0,
	}
	if why := s.Ready.connectErr.Load(); why != nil && !r.Connected {
		r.ConnectError = *why
	}
	return r
}

func (s *Node) SetLag(p int, lag int64) {
	if lag < 0 {
		lag = 0
	}
	s.lagMu.Lock()
	s.lag[p] = lag
	s.lagMu.Unlock()
}

// Lag returns the consumer lag (messages behind the high-water mark) per
// assigned partition, as of the last fetched message.
func (s *Node) Lag() map[int]int64 {
	s.lagMu.Lock()
	defer s.lagMu.Unlock()
	out := make(map[int]int64, len(s.lag))
	for p, l := range s.lag {
		out[p] = l
	}
	return out
}

// BudgetStatus is the spend of one budget period (one scope: every user's
// guarantee in that period).
type BudgetStatus struct {
	PeriodStart   time.Time `json:"period_start"`
	PeriodEnd     time.Time `json:"period_end"`
	SpentEpsilon  float64   `json:"spent_epsilon"`
	BudgetEpsilon float64   `json:"budget_epsilon"`
	Remaining     float64   `json:"remaining_epsilon"`
	Delta         float64   `json:"delta"`
	// RefusedHistograms are, with contribution.max_windows_per_user, the
	// histograms whose period reservation does not fit in the period (a
	// config change in the middle of it: release.Releaser.Refusals): no
	// release of theirs until the period ends. Public: a refused release
	// is missing from the output anyway.
	RefusedHistograms []string `json:"refused_histograms,omitempty"`
}

// Budget returns the spend of the periods the stage has charged or looked
// at since it started (restored from the ledger: the current period's spend
// is loaded at start), oldest first; nil before Run opened the ledger.
func (s *Node) Budget() []BudgetStatus {
	book := s.Book.Load()
	if book == nil {
		return nil
	}
	periods := book.Periods()
	rel := s.rel.Load()
	out := make([]BudgetStatus, 0, len(periods))
	for _, p := range periods {
		st := BudgetStatus{
			PeriodStart:   time.UnixMilli(p.Period).UTC(),
			PeriodEnd:     time.UnixMilli(p.Period + s.PeriodMs).UTC(),
			SpentEpsilon:  p.Epsilon,
			BudgetEpsilon: p.LimitEpsilon,
			Remaining:     max(p.LimitEpsilon-p.Epsilon, 0),
			Delta:         p.LimitDelta,
		}
		if rel != nil && rel.Book() == book {
			// The book's state: which reservations the period's spend
			// leaves no room for (an error — a ledger read — leaves it out).
			if refs, err := rel.Refusals(p.Period); err == nil {
				for _, r := range refs {
					st.RefusedHistograms = append(st.RefusedHistograms, r.Histogram)
				}
			}
		}
		out = append(out, st)
	}
	return out
}

// ResetLag forgets the lag of every partition (a new generation).
func (s *Node) ResetLag() {
	s.lagMu.Lock()
	s.lag = make(map[int]int64)
	s.lagMu.Unlock()
}

// DeleteLag forgets the lag of parts (revoked).
func (s *Node) DeleteLag(parts []int32) {
	s.lagMu.Lock()
	for _, p := range parts {
		delete(s.lag, int(p))
	}
	s.lagMu.Unlock()
}
