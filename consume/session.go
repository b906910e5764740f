package consume

import (
	"sync"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/source"
	"github.com/dpstage/stage/window"
)

// Session is the counting state of one ownership of input partitions: a
// consumer-group generation of the single-process stage, or one input
// partition's worker of the distributed bounder. Everything in it is
// dropped when the ownership ends: a new owner re-reads unreleased windows
// from the committed offsets (single-process) or the progress topic
// (distributed).
//
// The owner fills the exported fields before any Consume starts; after
// that only Next changes, under the session's lock (CloseWindow).
type Session struct {
	Topic    string
	Parts    []int
	WM       *window.Watermarks
	Trackers map[int]*source.OffsetTracker
	// Sets count the histograms, one per window size (windows.go;
	// NewWindowSets).
	Sets []*WindowSet
	// First is the first window counted: earlier events are late.
	First int64
	// UserKey, when set, keys the user hash of this Session's decoders
	// instead of the Node's UserKey (distributed mode: each input
	// partition has its own key, kept with its progress).
	UserKey *siphash.Key
	// Partitioner, when set (distributed mode), makes each partition's
	// decoder drop events whose user does not assign to the partition
	// among Partitions (decode.Decoder.WithPartitionCheck).
	Partitioner decode.Partitioner
	Partitions  int
	// Adm is the cross-window bound's state (contribution.
	// max_windows_per_user; nil when off), restored from the release log
	// or the progress topic at the Session's start: the admissions of the
	// recorded windows of the period of Next.
	Adm *aggregate.Admissions
	// Drops counts the contributions the cross-window bound dropped on
	// arrival, per (histogram, window), until CloseWindow takes them for
	// the operator's drop share (node.Node.NoteWindowBound). Used only
	// with Adm.
	Drops aggregate.WindowDrops
	// ViewAdm are the cross-window bound's states of the window sizes other
	// than window.size (histograms[].window: the views), by window length
	// in ms, restored like Adm (RestoreAdmissions). Each view's histograms
	// count a user in at most their own max_windows_per_user windows of
	// that size per period (plan's package doc, "Views").
	ViewAdm map[int64]*aggregate.Admissions

	closeMu sync.RWMutex // guards Next against adds into closed windows: workers add under RLock, CloseWindow closes under Lock
	// Next is the start of the first window not yet closed. Set it before
	// any Consume starts; read it with NextWindow afterwards.
	Next int64
}

// NextWindow is the start of the first window not yet closed.
func (sess *Session) NextWindow() int64 {
	sess.closeMu.RLock()
	defer sess.closeMu.RUnlock()
	return sess.Next
}
