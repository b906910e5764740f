package pipeline

import (
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/window"
)

// Per-histogram windows (histograms[].window) in the distributed mode.
//
// A bounder counts every window size of its partition (windows.go: one
// aggregator per size), and the Partial it emits for base window w, in w's
// one transaction, carries the counts of every histogram whose own window
// ends with w (endsAt): a histogram of r base windows has cells only in
// the Partial of the last base window of each of its windows. So the
// partials stay one per (base window, input partition), emitted at most
// once (partial's fencing argument is unchanged), and a long window is
// complete exactly when the base window that ends it is: every input
// partition's Partial of that base window was read (presence-based,
// partial.Merger), and each of them holds its partition's whole long
// window. The releaser merges and records as for base windows: at base
// window w, release.Releaser asks only for the histograms ending there.
//
// The other design, the releaser summing the base windows' partials,
// would not bound contributions per long window: max_events_per_user,
// max_groups_per_user and the cap hold per window of the histogram's own
// size (windows.go), which the bounder alone can apply, holding the
// user's events of the whole long window.
//
// Exactness across a takeover or a restart: an event counted into a long
// window is tracked under the long window's last base window (windows.go),
// so a partition's Progress.Offset never passes the events of a long
// window still open, and its next owner re-reads them. It counts them
// into that long window (not into the base windows, already emitted):
// countFrom starts counting at the start of the longest window containing
// the partition's first window, and session.add skips, per size, the
// windows already closed. For a partition without progress (a fresh
// deployment, a mode switch) the long window open at the release log's
// resume window is so counted whole from the input's earliest offset, as
// the single-process mode it may come from would have counted it.

// endsAt reports whether config histogram h's own window ends at the base
// boundary end (its window's start is aligned to its size, as every
// window's is).
func endsAt(s *Stage, h int, end int64) bool {
	size := s.cfg.Histograms[h].WindowSize(s.cfg.Window.Size).D().Milliseconds()
	return window.Start(end, size) == end
}

// countFrom is the first base window a bounder worker counts events of:
// the start of the longest window size's window containing the
// partition's first window (its next window when the progress predates
// the first window), so that a long window open at a takeover is counted
// whole (see above). Without histograms[].window it is that first window.
func countFrom(cfg *config.Config, st *boundState) int64 {
	first := st.first
	if first == 0 || first > st.next {
		first = st.next
	}
	var longest int64
	for _, ws := range WindowSpecs(cfg) {
		longest = max(longest, ws.Size.D().Milliseconds())
	}
	if longest <= 0 {
		return first
	}
	return window.Start(first, longest)
}
