package consume

import (
	"fmt"
	"slices"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/window"
)

// Per-histogram windows (histograms[].window).
//
// The base windows (window.size) are what the watermark closes and what the
// releaser steps through; a histogram with its own window of r base windows
// (aligned to the Unix epoch, like the base windows, and dividing the budget
// period) is counted by a bounder of its own window size — one
// aggregate.Aggregator (and Averager) per distinct window size, each with
// the histograms of that size — so max_events_per_user, max_groups_per_user
// and average.users hold per window of that histogram. Its window closes at
// the base Boundary that ends it, and its unit is recorded with the other
// units ending there (release.Releaser.Record, one ledger transaction).
//
// Which events count: an event belongs, in every window size, to the window
// of its own event time; the counting rule (window.Rule) is the base
// window's, so whether it counts depends on the event alone, and an event
// that passes it reaches a long window before that window closes (a long
// window ends no earlier than the base window of the event). An event is
// late for a window size when that size's window of the event is already
// closed: in normal operation never for a long window if not for its base
// window; after a restart the events of the base windows already recorded
// are late for the base histograms but still counted into the long windows
// still open, whose units were not recorded.
//
// Offsets: an event is tracked (source.OffsetTracker) under the last base
// window of the longest window it belongs to that was still open when it
// arrived — counted there or dropped there by that size's cross-window
// bound (max_windows_per_user) — so offsets are committed past it only
// once the window of every size it belongs to is released, and a restart
// re-reads every event of every open window (issue 28 item 2). What a
// restart counts into an open window then depends on that window's events
// and the config alone: a restart that raises a view's max_windows_per_user
// (or the base one) inside an open window re-reads the events that bound
// dropped before, every one of them, where holding a dropped event's
// offset only until its base window was released left the answer to
// whether another user's earlier event of the open window held the
// partition's commit point back (ground rule 7). The cost: the commit
// point may stay at the first event of an open view window although every
// event since was dropped by the view's bound, so a restart re-reads up to
// one window of the longest size (the same bound as for counted events);
// no per-event state (the tracker keeps one offset per base window).

// WindowSet is the bounding and counting state of one window size.
type WindowSet struct {
	sizeMs int64
	agg    *aggregate.Aggregator
	avg    *aggregate.Averager // nil without average histograms of this size
	hists  []int               // config indices of its histograms (agg's EventIndex)
	avgs   []int               // config indices of its average histograms
}

// WindowSpec is one window size's counting parameters: the aggregator's
// Spec of the histograms with that window (EventIndex maps them to the
// decoder's histograms) and its average histograms.
type WindowSpec struct {
	Size     config.Duration
	Spec     aggregate.Spec
	Averages []aggregate.AverageHist
}

// WindowSpecs groups a loaded config's histograms by window size (their own
// histograms[].window, else window.size), the base size first when some
// histogram has it, then by increasing size.
func WindowSpecs(cfg *config.Config) []WindowSpec {
	var sizes []config.Duration
	for _, h := range cfg.Histograms {
		if sz := h.WindowSize(cfg.Window.Size); !slices.Contains(sizes, sz) {
			sizes = append(sizes, sz)
		}
	}
	slices.Sort(sizes)
	all := AggregateSpec(cfg)
	avgs := AverageHists(cfg)
	out := make([]WindowSpec, 0, len(sizes))
	for _, sz := range sizes {
		ws := WindowSpec{Size: sz, Spec: all}
		ws.Spec.Histograms, ws.Spec.EventIndex = nil, nil
		ws.Spec.WindowSize = sz.D()
		for i, h := range cfg.Histograms {
			if h.WindowSize(cfg.Window.Size) != sz {
				continue
			}
			ws.Spec.Histograms = append(ws.Spec.Histograms, all.Histograms[i])
			ws.Spec.EventIndex = append(ws.Spec.EventIndex, i)
		}
		for _, a := range avgs {
			if cfg.Histograms[a.Index].WindowSize(cfg.Window.Size) == sz {
				ws.Averages = append(ws.Averages, a)
			}
		}
		out = append(out, ws)
	}
	return out
}

// NewWindowSets builds the counting state of every window size of cfg.
func NewWindowSets(cfg *config.Config) ([]*WindowSet, error) {
	var sets []*WindowSet
	for _, ws := range WindowSpecs(cfg) {
		agg, err := aggregate.New(ws.Spec)
		if err != nil {
			return nil, fmt.Errorf("build aggregator (%s windows): %w", ws.Size, err)
		}
		set := &WindowSet{sizeMs: ws.Size.D().Milliseconds(), agg: agg, hists: ws.Spec.EventIndex}
		for _, a := range ws.Averages {
			set.avgs = append(set.avgs, a.Index)
		}
		if len(ws.Averages) > 0 {
			newAverager := aggregate.NewAverager
			if cfg.Contribution.MaxWindowsPerUser > 0 {
				newAverager = aggregate.NewDeferredAverager // the average.users cap among the admitted users
			}
			if set.avg, err = newAverager(ws.Averages); err != nil {
				return nil, fmt.Errorf("build averager (%s windows): %w", ws.Size, err)
			}
		}
		sets = append(sets, set)
	}
	return sets, nil
}

// add bounds and counts ev, of base window w in budget period period, into
// every window size whose window of the event is still open and whose
// cross-window bound may still admit the event's user (the caller holds
// closeMu for reading). ok is false when the event counts in no size;
// bound is then the number of its parts the cross-window bounds dropped
// (0 with dropped 0: it is late for every size; 0 with dropped bits set:
// every open size's bound dropped it, but none of its parts there was
// valid — not late, held all the same), and otherwise those of the sizes
// whose bound dropped them; track is the base window to track its offset
// under (see above: the last base window of the longest open window the
// event belongs to, counted or dropped by its bound; valid when ok or
// dropped is not 0);
// dropped has bit i set for each size Sets[i] whose bound dropped its parts
// (the operator's drop share, partitionLocal.noteDrops).
func (sess *Session) add(w, baseMs, period int64, ev *decode.Event) (out aggregate.Outcome, ao aggregate.AverageOutcome, track int64, ok bool, bound int, dropped uint64) {
	if w < sess.First {
		return out, ao, 0, false, 0, 0 // before the first window released
	}
	held := false // track is set
	for i, set := range sess.Sets {
		start := window.Start(w, set.sizeMs)
		if start < window.Start(sess.Next, set.sizeMs) {
			continue // that window is closed
		}
		// Held until this window is released whether the bound admits the
		// user or not: a restart that changes the bound re-reads it.
		if last := start + set.sizeMs - baseMs; !held || last > track {
			track, held = last, true
		}
		if adm := sess.admOf(set, baseMs); adm != nil && !adm.Admissible(ev.User, period) || adm == nil && sess.Adm != nil {
			// (With the bound on, a size without an admission state — a
			// view validation should have refused — counts nobody: the
			// bound fails closed, never counting more than it charges.)
			// Admitted to max_windows_per_user closed windows of this size
			// in the period already: never admitted to this one
			// (aggregate.Admissions).
			bound += set.validParts(ev)
			if i < 64 {
				dropped |= 1 << i
			}
			continue
		}
		o := set.agg.Add(start, ev)
		out.Add(o)
		if set.avg != nil {
			a := set.avg.Add(start, ev)
			ao.Added += a.Added
			ao.NotSelected += a.NotSelected
		}
		ok = true
	}
	return out, ao, track, ok, bound, dropped
}

// admOf is the cross-window bound's state of set's window size: Adm for
// the base windows (baseMs), ViewAdm's for a view; nil without the bound.
func (sess *Session) admOf(set *WindowSet, baseMs int64) *aggregate.Admissions {
	if set.sizeMs == baseMs {
		return sess.Adm
	}
	return sess.ViewAdm[set.sizeMs]
}

// validParts is the number of ev's parts (one per histogram with a bin to
// count) in set's histograms.
func (set *WindowSet) validParts(ev *decode.Event) int {
	n := 0
	for _, h := range set.hists {
		if h < len(ev.Drops) && ev.Drops[h] == decode.ReasonNone {
			n++
		}
	}
	return n
}

// Bounds returns the cross-window bound of every window size of a loaded
// config, by window length in ms (config.Config.HistWindowBound: one bound
// per size, which validation enforces), and the base window's; nil when
// the bound is off.
func Bounds(cfg *config.Config) (bounds map[int64]int) {
	if cfg.Contribution.MaxWindowsPerUser <= 0 {
		return nil
	}
	bounds = map[int64]int{cfg.Window.Size.D().Milliseconds(): cfg.Contribution.MaxWindowsPerUser}
	for i, h := range cfg.Histograms {
		if k := cfg.HistWindowBound(i); k > 0 {
			bounds[h.WindowSize(cfg.Window.Size).D().Milliseconds()] = k
		}
	}
	return bounds
}

// RestoreAdmissions returns the cross-window bound's states for a Session
// of cfg whose next window is in period: Adm (the base window's) and
// ViewAdm (each other window size's), each restored from counts(view ms;
// 0 for the base window) — the release log's admissions of the period's
// recorded windows, or a progress partition's. nil, nil when the bound is
// off.
func RestoreAdmissions(cfg *config.Config, period int64, counts func(viewMs int64) (map[uint64]uint16, error)) (base *aggregate.Admissions, views map[int64]*aggregate.Admissions, err error) {
	baseMs := cfg.Window.Size.D().Milliseconds()
	for ms, k := range Bounds(cfg) {
		adm, err := aggregate.NewAdmissions(k)
		if err != nil {
			return nil, nil, err
		}
		view := ms
		if ms == baseMs {
			view = 0
		}
		c, err := counts(view)
		if err != nil {
			return nil, nil, err
		}
		adm.Restore(period, c)
		if view == 0 {
			base = adm
			continue
		}
		if views == nil {
			views = map[int64]*aggregate.Admissions{}
		}
		views[ms] = adm
	}
	return base, views, nil
}

// closeBoundary closes, in every window size, the window ending at the base
// Boundary end (the caller holds closeMu). With the cross-window bound
// (admitOf(set) not nil) only the users that size's admit accepts are
// counted and averaged.
func (sess *Session) closeBoundary(end int64, admitOf func(*WindowSet) func(uint64) bool) (*Boundary, error) {
	b := &Boundary{}
	for _, set := range sess.Sets {
		if window.Start(end, set.sizeMs) != end {
			continue // its window does not end here
		}
		start := end - set.sizeMs
		admit := admitOf(set)
		var wc *aggregate.WindowCounts
		var err error
		if admit != nil {
			wc, err = set.agg.CloseAdmitted(start, admit)
		} else {
			wc, err = set.agg.Close(start)
		}
		if err != nil {
			b.Release()
			return nil, err
		}
		c := closedSet{set: set, counts: wc}
		b.sets = append(b.sets, c)
		if set.avg != nil {
			if admit != nil {
				c.avgs, err = set.avg.CloseAdmitted(start, admit)
				if err != nil {
					b.Release()
					return nil, err
				}
			} else {
				c.avgs = set.avg.Close(start)
			}
			b.sets[len(b.sets)-1] = c
		}
	}
	return b, nil
}

// ResetSets drops every open window of every size.
func (sess *Session) ResetSets() {
	for _, set := range sess.Sets {
		set.agg.Reset()
		if set.avg != nil {
			set.avg.Reset()
		}
	}
}

// Boundary holds the windows of every size that end at one base Boundary:
// the counts and averages the releaser reads by config histogram index
// (release.Counts and release.Means).
type Boundary struct {
	sets []closedSet
	// Bounds is, with the cross-window bound, each closed histogram's
	// window-bound counts (CloseWindow): private, for the operator's
	// drop share (node.Node.NoteWindowBound) and, in the distributed
	// mode, the Partial's Dropped.
	Bounds []node.WindowBound
}

type closedSet struct {
	set    *WindowSet
	counts *aggregate.WindowCounts
	avgs   *aggregate.AverageWindow
}

// Counts is the count vector of (config histogram h, group g); h must be a
// histogram whose window ends at the Boundary.
func (b *Boundary) Counts(h, g int, dst []float64) []float64 {
	c, i := b.countsOf(h)
	return c.Counts(i, g, dst)
}

// Keys is the number of tracked keys of config histogram h (0 unless it
// selects its groups): with Key, Boundary is a release.Keyed by config
// index. h must be a histogram whose window ends at the Boundary.
func (b *Boundary) Keys(h int) int {
	c, i := b.countsOf(h)
	return c.Keys(i)
}

// Key is config histogram h's i-th tracked key, its distinct users after
// bounding and its counts (aggregate.WindowCounts.Key).
func (b *Boundary) Key(h, i int, dst []float64) (key string, users int64, counts []float64) {
	c, j := b.countsOf(h)
	return c.Key(j, i, dst)
}

// countsOf returns the closed counts holding config histogram h and its
// index there.
func (b *Boundary) countsOf(h int) (*aggregate.WindowCounts, int) {
	for _, c := range b.sets {
		if i := slices.Index(c.set.hists, h); i >= 0 {
			return c.counts, i
		}
	}
	panic(fmt.Sprintf("consume: histogram %d has no window ending at this Boundary", h))
}

// Mean is the padded average of the average histogram of config index h.
func (b *Boundary) Mean(h int, out []float64) []float64 {
	for _, c := range b.sets {
		if c.avgs != nil && slices.Contains(c.set.avgs, h) {
			return c.avgs.Mean(h, out)
		}
	}
	panic(fmt.Sprintf("consume: average histogram %d has no window ending at this Boundary", h))
}

// Kept is the number of kept users of average histogram h (config
// index): release.Means.
func (b *Boundary) Kept(h int) int {
	for _, c := range b.sets {
		if c.avgs != nil && slices.Contains(c.set.avgs, h) {
			return c.avgs.Kept(h)
		}
	}
	panic(fmt.Sprintf("consume: average histogram %d has no window ending at this Boundary", h))
}

// KeptUsers is the kept users of average histogram h (config index) in
// the boundary's windows (aggregate.AverageWindow.KeptUsers); nil when h's
// window does not end here or kept nobody.
func (b *Boundary) KeptUsers(h int) []aggregate.KeptUser {
	for _, c := range b.sets {
		if c.avgs != nil && slices.Contains(c.set.avgs, h) {
			return c.avgs.KeptUsers(h)
		}
	}
	return nil
}

// Displaced sums the windows' displaced parts (aggregate.WindowCounts).
func (b *Boundary) Displaced() int64 {
	var d int64
	for _, c := range b.sets {
		d += c.counts.Displaced()
	}
	return d
}

// NotAdmitted sums the parts the cross-window bound did not admit, in the
// count and the average histograms (aggregate.WindowCounts.NotAdmitted,
// aggregate.AverageWindow.NotAdmitted).
func (b *Boundary) NotAdmitted() (counts, averages int64) {
	for _, c := range b.sets {
		counts += int64(c.counts.NotAdmitted())
		if c.avgs != nil {
			averages += int64(c.avgs.NotAdmitted())
		}
	}
	return counts, averages
}

// AverageNotSelected sums the users the averages' users cap left out at
// the close (aggregate.AverageWindow.NotSelected; deferred averagers only).
func (b *Boundary) AverageNotSelected() int64 {
	var n int64
	for _, c := range b.sets {
		if c.avgs != nil {
			n += int64(c.avgs.NotSelected())
		}
	}
	return n
}

// Release frees the windows' counts.
func (b *Boundary) Release() {
	for _, c := range b.sets {
		c.counts.Release()
	}
}

// Boundary and the aggregator's window counts hand the selecting
// histograms' keys to the releaser (issue 30): by config index and by Spec
// index respectively.
var (
	_ release.Keyed = (*Boundary)(nil)
	_ release.Keyed = (*aggregate.WindowCounts)(nil)
)
