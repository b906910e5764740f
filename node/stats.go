package node

import (
	"maps"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/partial"
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

	// The distributed mode's releaser: Partials counts the partials read,
	// by what the merger did with them (indexed by partial.AddResult);
	// LatePartialCounts the bounded contributions of late ones (their
	// window was released while their partition was idle);
	// PartitionsIdle how many source partitions are idle now
	// (window.watermark: event).
	Partials [partial.NumAddResults]atomic.Int64
	// PartialsMalformed counts the partials-topic records the releaser
	// skipped as malformed (they do not decode, do not fit the config, or
	// carry values no bounder makes: issue 28 item 3), by reason (indexed
	// by partial.Reason). They are also counted in Partials[Foreign].
	PartialsMalformed [partial.NumReasons]atomic.Int64
	LatePartialCounts atomic.Int64
	PartitionsIdle    atomic.Int64
	// PartialGaps is how many source partitions miss their partial of the
	// window the releaser holds (partial.Merger.Gaps: lost on the partials
	// topic, or counted from a later window); PartialsDataLoss counts the
	// data losses detected on the partials topic (records deleted or the
	// topic recreated past the release group's committed offset, kgo's
	// ErrDataLoss).
	PartialGaps      atomic.Int64
	PartialsDataLoss atomic.Int64
	// IncompleteWindows counts the windows the releaser released with
	// "complete": false in their coverage (release.Coverage: a rolling
	// config change, or a change of the input partition count).
	IncompleteWindows atomic.Int64
	// PartialsLSOHeldMs (gauge) is how long, in ms, the partials topic's
	// last stable offset has been held below its high watermark by an
	// open transaction; PartialsLSOHolds counts the holds longer than
	// kafka.distributed.transaction_timeout (watchPartialsLSO).
	PartialsLSOHeldMs, PartialsLSOHolds atomic.Int64
	// FirstStartSkipped counts the input records not read because they
	// are older than the first window counted allows (Node.FirstOffset;
	// window.watermark arrival): by a fresh input partition of the
	// distributed mode, and by the single-process mode after the
	// distributed one.
	FirstStartSkipped atomic.Int64
	// SchemaRegistryHeld (gauge) is how many input partitions are held now
	// because the schema of their next record could not be fetched (the
	// Schema Registry unreachable or failing: decode.Reason.Hold; see
	// package consume's holdForSchema); SchemaRegistryRetries counts the
	// fetches retried meanwhile. A held partition neither counts, drops nor
	// commits past that record, and holds its windows open.
	SchemaRegistryHeld, SchemaRegistryRetries atomic.Int64

	// dropped counts drops by reason (decode reasons, the window rule's,
	// bounding outcomes); a reason is "seen" once its count is above 0.
	dropped [decode.NumReasons]atomic.Int64

	// selMu guards selKeys: per selecting histogram's name, the group keys
	// tracked in its last closed window (private; NoteSelectionKeys).
	selMu   sync.Mutex
	selKeys map[string]int
}

// NoteSelectionKeys records the group keys a selecting histogram tracked
// in the window whose selection was just drawn (release.Options.
// OnSelection): private, for the operator's capacity metric.
func (s *Stats) NoteSelectionKeys(histogram string, keys int) {
	s.selMu.Lock()
	if s.selKeys == nil {
		s.selKeys = map[string]int{}
	}
	s.selKeys[histogram] = keys
	s.selMu.Unlock()
}

// SelectionKeys returns a copy of the keys tracked in each selecting
// histogram's last selected window (absent before its first).
func (s *Stats) SelectionKeys() map[string]int {
	s.selMu.Lock()
	defer s.selMu.Unlock()
	return maps.Clone(s.selKeys)
}

func newStats() *Stats { return &Stats{} }

// Drop counts one drop for reason.
func (s *Stats) Drop(r decode.Reason) { s.dropped[r].Add(1) }

// DropN counts n drops for reason.
func (s *Stats) DropN(r decode.Reason, n int64) { s.dropped[r].Add(n) }

// DroppedBy returns the drops counted for reason r.
func (s *Stats) DroppedBy(r decode.Reason) int64 { return s.dropped[r].Load() }

// Dropped returns a snapshot of the drop counters seen so far, by label.
func (s *Stats) Dropped() map[string]int64 {
	out := make(map[string]int64)
	for r := range decode.NumReasons {
		if n := s.dropped[r].Load(); n > 0 {
			out[r.String()] = n
		}
	}
	return out
}

// DroppedReasons returns the labels of the reasons seen so far, sorted.
func (s *Stats) DroppedReasons() []string {
	d := s.Dropped()
	out := make([]string, 0, len(d))
	for k := range d {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
