package distributed

import (
	"fmt"
	"slices"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/consume"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/partial"
	"github.com/dpstage/stage/window"
)

// Per-histogram windows (histograms[].window) in the distributed mode.
//
// A bounder counts every window size of its partition (consume/windows.go: one
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
// size (consume/windows.go), which the bounder alone can apply, holding the
// user's events of the whole long window.
//
// Exactness across a takeover or a restart: an event counted into a long
// window is tracked under the long window's last base window (consume/windows.go),
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
func endsAt(s *stage, h int, end int64) bool {
	size := s.Cfg.Histograms[h].WindowSize(s.Cfg.Window.Size).D().Milliseconds()
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
	for _, ws := range consume.WindowSpecs(cfg) {
		longest = max(longest, ws.Size.D().Milliseconds())
	}
	if longest <= 0 {
		return first
	}
	return window.Start(first, longest)
}

// Average histograms (histograms[].kind: average) in the distributed mode:
// a bounder's Partial carries, per average histogram whose window ends
// with it, its partition's kept users (the average.users smallest hashes,
// with their averaged vectors: partial.AverageCell); the releaser keeps
// the average.users smallest of all partitions' and pads and averages
// them (aggregate.MergeKept), which is the single-process mode's kept set
// and mean (aggregate/average_merge.go). The merger knows counts only:
// pendingAverages keeps the cells of the Partials it added, by window,
// until the window is released.

// averageCell is the partial.AverageCell of average histogram h (config
// index) in the boundary's windows; nil when no user was kept.
func averageCell(b closedCells, h int) *partial.AverageCell {
	kept := b.KeptUsers(h)
	if len(kept) == 0 {
		return nil
	}
	a := &partial.AverageCell{H: h}
	for _, k := range kept {
		a.Users = append(a.Users, k.User)
		a.Vectors = append(a.Vectors, k.Vector)
	}
	return a
}

// pendingAverages holds the average cells of the Partials the merger
// added, by window start and input partition, until their window is
// released. Used by the lead's goroutine only.
type pendingAverages struct {
	hists map[int]aggregate.AverageHist // by config index
	cfg   string                        // the releaser's counting config
	also  []string                      // the configs also merged (Merger.AlsoMerge): checked as cfg is
	byWin map[int64]map[int][]partial.AverageCell
}

func (s *stage) newPendingAverages() *pendingAverages {
	pa := &pendingAverages{hists: map[int]aggregate.AverageHist{}, cfg: s.CountingConfig, byWin: map[int64]map[int][]partial.AverageCell{},
		also: s.olderFingerprints()}
	for _, a := range consume.AverageHists(s.Cfg) {
		pa.hists[a.Index] = a
	}
	return pa
}

// check refuses a Partial of a counting config the releaser merges (its
// own, or one it also merges) whose average cells do not fit the config's
// average histograms (a foreign Partial is not merged: not checked).
func (pa *pendingAverages) check(p *partial.Partial) error {
	if p.Config != pa.cfg && !slices.Contains(pa.also, p.Config) {
		return nil
	}
	for _, a := range p.Averages {
		h, ok := pa.hists[a.H]
		if !ok || len(a.Users) > h.Users {
			return partial.Refuse(partial.ReasonShape, "partial of window %d partition %d: average cell of histogram %d with %d users does not fit the config's average histograms",
				p.WindowStart, p.Partition, a.H, len(a.Users))
		}
		for _, v := range a.Vectors {
			if len(v) != h.Bins {
				return partial.Refuse(partial.ReasonShape, "partial of window %d partition %d: average vector of %d bins, histogram %d has %d",
					p.WindowStart, p.Partition, len(v), a.H, h.Bins)
			}
		}
	}
	return nil
}

// note keeps p's average cells after the merger's Add returned res,
// when its counts are held (partial.Merger.Summed): the cells are under
// the merger's sums limit, dropped with the counts past it and kept again
// when they are read again (issue 28 item 4; before, they were kept for
// every pending window).
func (pa *pendingAverages) note(m *partial.Merger, p *partial.Partial, res partial.AddResult) {
	if (res == partial.Added || res == partial.Skipped) && m.Summed(p.WindowStart, p.Partition) {
		pa.add(p)
	}
}

// add keeps the average cells of a Partial the merger added.
func (pa *pendingAverages) add(p *partial.Partial) {
	if len(p.Averages) == 0 {
		return
	}
	m := pa.byWin[p.WindowStart]
	if m == nil {
		m = map[int][]partial.AverageCell{}
		pa.byWin[p.WindowStart] = m
	}
	m[p.Partition] = p.Averages
}

// released forgets the windows up to w.
func (pa *pendingAverages) released(w int64) {
	for k := range pa.byWin {
		if k <= w {
			delete(pa.byWin, k)
		}
	}
}

// means is window w's release.Means.
func (pa *pendingAverages) means(w *partial.Window) windowMeans {
	return windowMeans{pa: pa, cells: pa.byWin[w.Start], win: w}
}

// windowMeans is one window's padded averages, merged from its partitions'
// kept users.
type windowMeans struct {
	pa    *pendingAverages
	cells map[int][]partial.AverageCell
	win   *partial.Window // its coverage (Included)
}

// Included is release.Covered: an average release carries its window's
// coverage, as the count releases of the window do.
func (m windowMeans) Included() (included, partitions int) { return m.win.Included() }

// kept is how many users average histogram h's window averages: its
// partitions' kept users, at most average.users (private: for the
// operator's drop share only).
func (m windowMeans) kept(h int) int64 {
	n := 0
	for _, cells := range m.cells {
		for _, a := range cells {
			if a.H == h {
				n += len(a.Users)
			}
		}
	}
	return int64(min(n, m.pa.hists[h].Users))
}

// windowBounds is, with the cross-window bound, each histogram's
// window-bound counts in the merged window w (ending with base window
// w.Start): what it counts and what the bounders dropped
// (partial.Window.Dropped), for the operator's drop share
// (node.Node.NoteWindowBound). Private: never in a release.
func (s *stage) windowBounds(w *partial.Window, means windowMeans) []node.WindowBound {
	if s.Blind == nil {
		return nil
	}
	end := w.Start + s.SizeMs
	var out []node.WindowBound
	var dst []float64
	for h, hc := range s.Cfg.Histograms {
		if !endsAt(s, h, end) {
			continue
		}
		wb := node.WindowBound{H: h, Start: end - hc.WindowSize(s.Cfg.Window.Size).D().Milliseconds(), End: end, Dropped: w.Dropped(h)}
		switch {
		case hc.IsAverage():
			wb.Counted = means.kept(h)
		case hc.Selects():
			wb.Counted = int64(w.KeyedTotal(h))
		default:
			for g := range max(1, len(hc.Groups)) {
				dst = w.Counts(h, g, dst[:0])
				for _, c := range dst {
					wb.Counted += int64(c)
				}
			}
		}
		out = append(out, wb)
	}
	return out
}

// Kept is release.Means: the kept users of average histogram h (the
// merge keeps the Users smallest of the partitions' kept users).
func (m windowMeans) Kept(h int) int { return int(m.kept(h)) }

// Mean is release.Means: the padded average of average histogram h.
func (m windowMeans) Mean(h int, out []float64) []float64 {
	hist, ok := m.pa.hists[h]
	if !ok {
		panic(fmt.Sprintf("distributed: histogram %d is not an average histogram", h))
	}
	ps := make([]int, 0, len(m.cells))
	for p := range m.cells {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	parts := make([][]aggregate.KeptUser, 0, len(ps))
	for _, p := range ps {
		var ks []aggregate.KeptUser
		for _, a := range m.cells[p] {
			if a.H != h {
				continue
			}
			for i, u := range a.Users {
				ks = append(ks, aggregate.KeptUser{User: u, Vector: a.Vectors[i]})
			}
		}
		parts = append(parts, ks)
	}
	out, err := aggregate.MergeKept(hist.Users, hist.Bins, parts, out)
	if err != nil {
		panic(fmt.Sprintf("distributed: %v (checked when read)", err)) // pendingAverages.check
	}
	return out
}
