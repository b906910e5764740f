package partial

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// ErrPartitions: a Partial was made against an input partition count other
// than the releaser's. Version 1 refuses a change of the input topic's
// partition count while running: a user whose partition changes would be
// bounded twice, once by each owner.
var ErrPartitions = errors.New("partial: input partition count changed")

// Layout is the shape of the counts a Merger accepts: per config histogram
// its number of bins and of groups (1 without group_by).
type Layout struct {
	Bins   []int
	Groups []int
}

// Merger merges the Partials of the partials topic into complete windows,
// in increasing window order (the releaser, package pipeline).
//
// Completeness is presence-based. Window w (start w, size WindowMs) is
// complete when every source partition p in [0, N) either has its Partial
// of w here (merged, or foreign: see [Foreign]), or is idle and has not
// passed w (below); and when the partitions not idle have passed w
// (Next_p >= w+size: they will send nothing more for it). The bounder of p
// emits its windows one after the other from its first window on, each in
// one transaction with its progress, so p's Partials on the partials topic
// (one partition, read_committed, in log order) are consecutive: Next_p >=
// w+size means p's Partial of w came before. Under window.watermark:
// arrival a partition read to its end keeps emitting empty Partials as the
// wall clock passes windows, so it does not hold a window; a lagging one
// does, until it catches up. A window whose Partials are all empty merges
// to zero counts: every declared (histogram, group) is released whatever
// the data. A partition this Merger has heard nothing of holds every
// window: completeness never assumes a Partial that was not read.
//
// Gaps. A partition that has passed w (a later Partial, or an Idle record,
// says Next_p >= w+size) without its Partial of w here has a gap: its
// Partial of w is missing for good — lost on the partials topic (deleted
// and recreated, retention past the releaser's committed offset, an
// unclean leader election), or never emitted because the partition's
// bounder started counting after w (Partial.First > w: it started without
// the progress of the deployment that counted it before — a mode switch, a
// changed group_id or internal_topic_prefix, a lost progress topic). Its
// events of w were not counted; releasing w would release them as zeros,
// charged in full. So w is held, and [Merger.Gaps] says which partitions
// miss it and why, for the releaser to report (a log line, a metric, a
// readiness condition). A gap is detected after a releaser restart too:
// every record of a window not released lies after the commit point
// (below), so the partition's next record read has Next_p past w while its
// Partial of w is not there. The rule needs only presence and Next;
// Partial.First (the partition's first window) says which of the two
// causes it is ([Gap.StartedAfter]), and Partial.Prev (the window emitted
// before, nil for a partition's first Partial) lets any reader of the
// topic check a partition's sequence on its own.
//
// Idleness (window.watermark: event). A partition's windows close by its
// own event times there, so a partition without new events would hold every
// window. Its bounder reports it idle instead ([Idle]), and then, exactly
// as the single-process stage's watermark is the minimum over the
// partitions that are not idle (window.Watermarks): window w is complete
// when every partition not idle has Next_p >= w+size — or, when every
// partition is idle, when the largest Next does. That goes further than the
// single-process stage's "largest partition watermark" (largest event time
// minus the lateness): a bounder turning idle emits its windows up to the
// one of its latest event. A partition active again holds
// windows from then on; its Partials of windows released meanwhile are
// [Late]: their events are late, as an event behind the watermark is in
// the single-process stage. A window that only idle partitions hold is
// handed out once it has been so for the idle grace ([Merger.SetIdleClock],
// the releaser's window.idle_partition_timeout): an idle partition whose
// input has just received events, and whose bounder is reading them, has
// that long to say it is active again before windows pass it by. Without
// it, after a pause in the input the first partition to read its events
// would close windows that the others, still marked idle, have events for.
//
// Offsets. The Merger also tracks, like source.OffsetTracker for the
// input, the smallest partials-topic offset of a record of a window not
// yet released ([Merger.CommitPoint]); everything before it belongs to
// released windows, or to windows before the resume window, and is not
// needed again. A record of window v < w carries Next = v+size <= w, so no
// record before the commit point can make a pending window complete: a
// reader restarting at the commit point learns every Next it needs. The
// commit point also stays at or before the latest Idle record of every
// partition idle now, so a reader restarting there learns which
// partitions are idle (a partition active again needs no record: not idle
// is where a Merger starts).
//
// A Merger is not safe for concurrent use (the releaser's one goroutine).
type Merger struct {
	n      int
	sizeMs int64
	layout Layout
	// config is the releaser's counting fingerprint (Partial.Config).
	config string
	// next is, per source partition, the largest Next seen
	// (math.MinInt64 before any).
	next []int64
	// idle is, per source partition, whether its latest Idle record says
	// idle; idleAt the offset of that record.
	idle   []bool
	idleAt []int64
	// included is, per source partition, the last window released with a
	// Partial of it (math.MinInt64 before any).
	included []int64
	// first is, per source partition, its first window (Partial.First)
	// as the latest Partial carrying it said (0: unknown).
	first []int64
	// gaps are the gaps of the window the last Next held (Gaps).
	gaps []Gap
	// grace, lease and now: see SetIdleClock. idleSeen is, per source
	// partition, when its latest Idle record was fed (by now).
	grace, lease time.Duration
	now          func() time.Time
	idleSeen     []time.Time
	// passes records when the live partitions' frontier (the smallest
	// Next of the partitions not idle, or the largest Next when all are
	// idle) first reached each value it has had, ascending, back to the
	// first one past the next window; waitUntil is when the next window,
	// held by idle partitions only, is handed out (zero: none waits).
	passes    []pass
	waitUntil time.Time
	// resume is the first window this Merger hands out.
	resume int64
	// released: every window starting before it is released (or was
	// before the resume window); the next window handed out starts here.
	released int64
	pending  map[int64]*Window
	// end is the offset after the last record fed (-1 before any).
	end int64
}

// NewMerger returns a Merger for n source partitions and windows of sizeMs,
// handing out windows from resume on (earlier ones are recorded already:
// their Partials are skipped), merging the Partials made under the counting
// config whose fingerprint is config (see Foreign).
func NewMerger(n int, sizeMs, resume int64, layout Layout, config string) (*Merger, error) {
	if n <= 0 || sizeMs <= 0 || len(layout.Bins) != len(layout.Groups) {
		return nil, fmt.Errorf("partial: merger of %d partitions, %d ms windows, %d/%d histograms", n, sizeMs, len(layout.Bins), len(layout.Groups))
	}
	next, included := make([]int64, n), make([]int64, n)
	for i := range next {
		next[i], included[i] = math.MinInt64, math.MinInt64
	}
	return &Merger{n: n, sizeMs: sizeMs, layout: layout, config: config, next: next, idle: make([]bool, n), idleAt: make([]int64, n), idleSeen: make([]time.Time, n),
		included: included, first: make([]int64, n), resume: resume, released: resume, pending: map[int64]*Window{}, end: -1}, nil
}

// pass is one observation of the live frontier: it reached end at at.
type pass struct {
	end int64
	at  time.Time
}

// AddResult says what Add did with a Partial.
type AddResult int

const (
	// Added: the Partial's counts are held for its window.
	Added AddResult = iota
	// Skipped: its window is released already — before the resume window
	// (before this Merger was made), or with a Partial of the same
	// (window, partition); only its Next was taken.
	Skipped
	// Duplicate: a Partial of the same (window, partition) was added
	// before, with the same counts; this one is ignored.
	Duplicate
	// Foreign: the Partial was made under another counting config
	// (Partial.Config differs from the Merger's: a bounder running an
	// older or newer config during a rolling change). Its counts are not
	// merged — they were bounded under bounds the releaser's noise is not
	// calibrated to — but it counts as the partition's Partial of its
	// window (its window is not held as a gap), so the window is released
	// without that partition's counts. The caller logs it loudly.
	Foreign
	// Late: its window was released by this Merger without it (the
	// partition was idle then, window.watermark: event): its counts are
	// not released. Only its Next is taken. The caller logs it when it
	// had counts: those events were late.
	Late
	// Conflict: a Partial of the same (window, partition) was added before
	// with different counts; this one is ignored (the first one is kept).
	// The bounders write each (window, partition) once, transactionally:
	// a conflict means two writers of one partition that the transactional
	// id did not fence. The caller logs it loudly.
	Conflict
	// NumAddResults is the number of AddResult values (metrics).
	NumAddResults int = iota
)

func (r AddResult) String() string {
	switch r {
	case Added:
		return "added"
	case Skipped:
		return "skipped"
	case Duplicate:
		return "duplicate"
	case Conflict:
		return "conflict"
	case Foreign:
		return "foreign"
	case Late:
		return "late"
	}
	return fmt.Sprintf("AddResult(%d)", int(r))
}

// Add feeds the Partial read at offset (offsets increase from call to
// call). An error (ErrPartitions, ErrFormat) leaves the Merger unchanged.
func (m *Merger) Add(p *Partial, offset int64) (AddResult, error) {
	if p.Partitions != m.n {
		return 0, fmt.Errorf("%w: a partial of partition %d (window %d) was made for %d input partitions, the releaser runs with %d; "+
			"version 1 refuses partition count changes while running: restore the count or start a new deployment (group_id)",
			ErrPartitions, p.Partition, p.WindowStart, p.Partitions, m.n)
	}
	if p.WindowMs != m.sizeMs {
		return 0, fmt.Errorf("%w: partial of window %d has %d ms windows, the releaser %d ms", ErrFormat, p.WindowStart, p.WindowMs, m.sizeMs)
	}
	if p.Partition < 0 || p.Partition >= m.n || p.Next != p.WindowStart+p.WindowMs {
		return 0, fmt.Errorf("%w: partial of window %d partition %d of %d, next %d", ErrFormat, p.WindowStart, p.Partition, p.Partitions, p.Next)
	}
	foreign := p.Config != m.config
	for _, c := range p.Counts {
		if foreign {
			break // another config's layout: not merged, not checked against ours
		}
		if c.H < 0 || c.H >= len(m.layout.Bins) || c.G < 0 || c.G >= m.layout.Groups[c.H] || len(c.Counts) != m.layout.Bins[c.H] {
			return 0, fmt.Errorf("%w: partial of window %d partition %d: cell (%d, %d) with %d bins does not fit the config's histograms",
				ErrFormat, p.WindowStart, p.Partition, c.H, c.G, len(c.Counts))
		}
	}
	if offset+1 > m.end {
		m.end = offset + 1
	}
	if p.Next > m.next[p.Partition] {
		m.next[p.Partition] = p.Next
	}
	if p.First != 0 {
		m.first[p.Partition] = p.First
	}
	if p.WindowStart < m.released {
		// A partition's Partials come in window order, so one of a window
		// from resume on that is after the last window released with a
		// Partial of this partition came after its window's release.
		// (A foreign one would not have been merged anyway: skipped.)
		if !foreign && p.WindowStart >= m.resume && p.WindowStart > m.included[p.Partition] {
			return Late, nil
		}
		return Skipped, nil
	}
	w := m.pending[p.WindowStart]
	if w == nil {
		w = &Window{Start: p.WindowStart, layout: &m.layout, parts: map[int][]Cell{}, firstOffset: offset}
		m.pending[p.WindowStart] = w
	}
	if foreign {
		// Present, not merged; kept until its window is released (the
		// commit point stays before it, so a restarted releaser sees it
		// again rather than a gap).
		if !w.has(p.Partition) {
			if w.foreign == nil {
				w.foreign = map[int]bool{}
			}
			w.foreign[p.Partition] = true
		}
		return Foreign, nil
	}
	if w.foreign[p.Partition] {
		return Conflict, nil
	}
	cells := sortedCells(p.Counts)
	if old, ok := w.parts[p.Partition]; ok {
		if cellsEqual(old, cells) {
			return Duplicate, nil
		}
		return Conflict, nil
	}
	w.parts[p.Partition] = cells
	return Added, nil
}

// SetIdle feeds the Idle record read at offset (offsets increase from
// call to call, shared with Add). An error (ErrPartitions, ErrFormat)
// leaves the Merger unchanged.
func (m *Merger) SetIdle(d *Idle, offset int64) error {
	if d.Partitions != m.n {
		return fmt.Errorf("%w: an idle record of partition %d was made for %d input partitions, the releaser runs with %d; "+
			"version 1 refuses partition count changes while running: restore the count or start a new deployment (group_id)",
			ErrPartitions, d.Partition, d.Partitions, m.n)
	}
	if d.WindowMs != m.sizeMs || d.Partition < 0 || d.Partition >= m.n {
		return fmt.Errorf("%w: idle record of partition %d of %d with %d ms windows, the releaser %d ms", ErrFormat, d.Partition, d.Partitions, d.WindowMs, m.sizeMs)
	}
	if offset+1 > m.end {
		m.end = offset + 1
	}
	if d.Next > m.next[d.Partition] {
		m.next[d.Partition] = d.Next
	}
	m.idle[d.Partition] = d.Idle
	m.idleAt[d.Partition] = offset
	if m.now != nil {
		m.idleSeen[d.Partition] = m.now()
	}
	return nil
}

// SetIdleClock sets the clock now and two durations of idleness (the
// releaser's window.idle_partition_timeout and wall clock; without a
// call, both are 0: no grace, no lease).
//
//   - grace: a window only idle partitions hold is handed out once the
//     partitions not idle have passed it for grace — counted from when they
//     first did, so a backlog they passed at once comes out at once.
//   - lease: an Idle record saying idle counts for lease after it was fed.
//     The bounder of an idle partition writes it again well within that
//     (pipeline), so a partition whose owner died stops counting as idle
//     — it holds windows again — by one lease after its last record, not
//     only once the next owner starts.
func (m *Merger) SetIdleClock(grace, lease time.Duration, now func() time.Time) {
	m.grace, m.lease, m.now = grace, lease, now
}

// IdleWait returns how long until the next window, which only idle
// partitions hold, is handed out (Next is then worth calling even with no
// new record), and false when no window waits so. As of the last Next.
func (m *Merger) IdleWait() (time.Duration, bool) {
	if m.waitUntil.IsZero() {
		return 0, false
	}
	return max(m.waitUntil.Sub(m.now()), 0), true
}

// isIdle reports whether p counts as idle at now: its latest Idle record
// says idle, fed less than the lease ago.
func (m *Merger) isIdle(p int, now time.Time) bool {
	return m.idle[p] && (m.lease <= 0 || now.Sub(m.idleSeen[p]) < m.lease)
}

// clock is now(), or the zero time without a clock.
func (m *Merger) clock() time.Time {
	if m.now == nil {
		return time.Time{}
	}
	return m.now()
}

// Idle returns the source partitions that count as idle now, ascending.
func (m *Merger) Idle() []int {
	var out []int
	now := m.clock()
	for p := range m.idle {
		if m.isIdle(p, now) {
			out = append(out, p)
		}
	}
	return out
}

// observe records the live frontier f at now (see Merger.passes): the
// observations past f no longer hold (a partition active again is
// behind them) and are dropped; f is recorded if it is new.
func (m *Merger) observe(f int64, now time.Time) {
	for len(m.passes) > 0 && m.passes[len(m.passes)-1].end > f {
		m.passes = m.passes[:len(m.passes)-1]
	}
	if len(m.passes) == 0 || m.passes[len(m.passes)-1].end < f {
		m.passes = append(m.passes, pass{end: f, at: now})
	}
}

// passedAt is when the live frontier first reached end (observe recorded
// a frontier at or past it).
func (m *Merger) passedAt(end int64) time.Time {
	i, _ := slices.BinarySearchFunc(m.passes, end, func(p pass, e int64) int { return cmp.Compare(p.end, e) })
	if i == len(m.passes) {
		return m.clock() // not reached: Next observes its frontier first
	}
	return m.passes[i].at
}

// Gap is a source partition whose Partial of a window is missing although
// the partition has passed the window (see Merger, "Gaps").
type Gap struct {
	// Window is the start of the window held.
	Window int64
	// Partition is the source partition.
	Partition int
	// Next is how far the partition has emitted: the largest Next its
	// records carried.
	Next int64
	// First is the partition's first window when its Partials said so (0:
	// unknown); after Window, the partition's bounder started counting
	// after Window (StartedAfter).
	First int64
}

// StartedAfter reports whether the partition's bounder started counting
// after the window (its events of the window were never counted), rather
// than its Partial of the window being lost.
func (g Gap) StartedAfter() bool { return g.First != 0 && g.First > g.Window }

// Gaps returns the gaps that made the last Next hold its window, by
// partition; none when it did not hold for a gap. A gap does not close by
// itself: the window stays held (see docs/distributed.md for recovery).
func (m *Merger) Gaps() []Gap { return slices.Clone(m.gaps) }

// Next returns the next window to release, if it is complete: the window
// starting at the first unreleased boundary, with the merged counts of
// every Partial added for it (none, when no partition had events). A
// window with a gap (Gaps) is never complete.
func (m *Merger) Next() (*Window, bool) {
	w := m.released
	now := m.clock()
	m.waitUntil = time.Time{}
	m.gaps = m.gaps[:0]
	pend := m.pending[w]
	for p, n := range m.next {
		if n >= w+m.sizeMs && !pend.has(p) {
			m.gaps = append(m.gaps, Gap{Window: w, Partition: p, Next: n, First: m.first[p]})
		}
	}
	if len(m.gaps) > 0 {
		return nil, false
	}
	byIdle := false
	frontier, largest := int64(math.MaxInt64), int64(math.MinInt64)
	for p, n := range m.next {
		largest = max(largest, n)
		if m.isIdle(p, now) {
			byIdle = byIdle || n < w+m.sizeMs
			continue
		}
		frontier = min(frontier, n)
	}
	if frontier == math.MaxInt64 { // every partition idle
		frontier = largest
	}
	if m.grace > 0 {
		m.observe(frontier, now)
	}
	if frontier < w+m.sizeMs {
		return nil, false
	}
	if byIdle && m.grace > 0 {
		if until := m.passedAt(w + m.sizeMs).Add(m.grace); now.Before(until) {
			m.waitUntil = until
			return nil, false
		}
	}
	if pend == nil {
		pend = &Window{Start: w, layout: &m.layout, firstOffset: -1}
	}
	return pend, true
}

// Released records that the window Next returned is released (recorded):
// its Partials are dropped and the commit point may pass them.
func (m *Merger) Released(w *Window) {
	if w.Start != m.released {
		panic(fmt.Sprintf("partial: released window %d, next is %d", w.Start, m.released))
	}
	for p := range w.parts {
		m.included[p] = w.Start
	}
	delete(m.pending, w.Start)
	m.released = w.Start + m.sizeMs
	// Observations short of the next window's end are not needed again.
	i := 0
	for i < len(m.passes)-1 && m.passes[i].end < m.released+m.sizeMs {
		i++
	}
	m.passes = m.passes[i:]
}

// ReleasedTo is the start of the first window not released.
func (m *Merger) ReleasedTo() int64 { return m.released }

// Lagging returns the source partitions not idle whose Next has not
// passed the next window (they hold it), ascending.
func (m *Merger) Lagging() []int {
	var out []int
	now := m.clock()
	for p, n := range m.next {
		if !m.isIdle(p, now) && n < m.released+m.sizeMs {
			out = append(out, p)
		}
	}
	return out
}

// CommitPoint is the partials offset safe to commit: the smallest offset of
// a record of a window not yet released or of the latest Idle record of a
// partition idle now, or the offset after the last record fed when there
// is none; -1 before any record.
func (m *Merger) CommitPoint() int64 {
	c := m.end
	for _, w := range m.pending {
		if w.firstOffset < c {
			c = w.firstOffset
		}
	}
	for p, idle := range m.idle {
		if idle && m.idleAt[p] < c {
			c = m.idleAt[p]
		}
	}
	return c
}

// Window is one window's merged Partials. It satisfies release.Counts.
type Window struct {
	Start  int64
	layout *Layout
	// parts holds each source partition's cells, sorted by (H, G);
	// foreign the partitions whose Partial of the window was Foreign
	// (present, not merged).
	parts       map[int][]Cell
	foreign     map[int]bool
	firstOffset int64
}

// has reports whether partition p's Partial of the window was read
// (merged or foreign); false on a nil Window.
func (w *Window) has(p int) bool {
	if w == nil {
		return false
	}
	_, ok := w.parts[p]
	return ok || w.foreign[p]
}

// Partitions is how many source partitions sent a Partial of the window
// (every partition that had it in its range; an empty Partial counts).
func (w *Window) Partitions() int { return len(w.parts) }

// Counts writes the counts of histogram h, group g summed over the source
// partitions (in partition order: the same sum whatever the arrival order)
// into dst, grown to the histogram's bins; zeros for a cell no partition
// had.
func (w *Window) Counts(h, g int, dst []float64) []float64 {
	n := 0
	if h >= 0 && h < len(w.layout.Bins) {
		n = w.layout.Bins[h]
	}
	dst = slices.Grow(dst[:0], n)[:n]
	clear(dst)
	ps := make([]int, 0, len(w.parts))
	for p := range w.parts {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for _, p := range ps {
		for _, c := range w.parts[p] {
			if c.H == h && c.G == g {
				for i, v := range c.Counts {
					dst[i] += v
				}
			}
		}
	}
	return dst
}

func sortedCells(cs []Cell) []Cell {
	out := slices.Clone(cs)
	slices.SortStableFunc(out, func(a, b Cell) int {
		if a.H != b.H {
			return a.H - b.H
		}
		return a.G - b.G
	})
	return out
}

func cellsEqual(a, b []Cell) bool {
	return slices.EqualFunc(a, b, func(x, y Cell) bool {
		return x.H == y.H && x.G == y.G && slices.Equal(x.Counts, y.Counts)
	})
}
