package pipeline

import (
	"sort"
	"sync"
	"sync/atomic"
)

// Stats counts what the stage did. Every drop is counted by reason: nothing
// is lost silently. Safe for concurrent use.
type Stats struct {
	Consumed atomic.Int64 // messages read from the input topic
	Decoded  atomic.Int64 // messages that decoded into a usable event
	// Counted: (event, histogram) contributions counted on arrival; a
	// contribution the bounder displaces later (see aggregate) is counted
	// under the drop reason bound_displaced too, so Counted −
	// bound_displaced is what the closed windows counted.
	Counted atomic.Int64
	Late    atomic.Int64 // events for windows already closed
	// RetentionSkipped counts input records deleted by the broker's
	// retention before the stage read them (offsets skipped when the next
	// offset was no longer retained): never counted, whatever their window.
	RetentionSkipped atomic.Int64
	Releases         atomic.Int64 // release messages published
	Exhausted        atomic.Int64 // units refused by the budget
	// Averaged counts vectors averaged into an average histogram's window
	// when they arrived; AverageNotSelected, vectors of users who at arrival
	// were not among the window's kept users (the average.users smallest
	// hashes so far). A user evicted later was counted as averaged.
	Averaged, AverageNotSelected atomic.Int64
	PublishRetries               atomic.Int64 // failed publish attempts that were retried
	Commits                      atomic.Int64 // offset commits

	mu sync.Mutex // guards dropped
	// dropped counts drops by reason label (decode reasons, bounding
	// outcomes, "late").
	dropped map[string]*atomic.Int64
}

func newStats() *Stats { return &Stats{dropped: make(map[string]*atomic.Int64)} }

// Drop counts one drop for reason.
func (s *Stats) Drop(reason string) { s.counter(reason).Add(1) }

func (s *Stats) counter(reason string) *atomic.Int64 {
	s.mu.Lock()
	c, ok := s.dropped[reason]
	if !ok {
		c = new(atomic.Int64)
		s.dropped[reason] = c
	}
	s.mu.Unlock()
	return c
}

// Dropped returns a snapshot of the drop counters by reason.
func (s *Stats) Dropped() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.dropped))
	for k, v := range s.dropped {
		out[k] = v.Load()
	}
	return out
}

// DroppedReasons returns the reasons seen so far, sorted.
func (s *Stats) DroppedReasons() []string {
	d := s.Dropped()
	out := make([]string, 0, len(d))
	for k := range d {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
