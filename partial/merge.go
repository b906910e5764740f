package partial

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// ErrPartitions: a Partial was made against an input partition count other
// than the releaser's. The Merger no longer returns it (such a Partial is
// Foreign: skipped, never fatal); kept for callers that refuse a partition
// count change themselves.
var ErrPartitions = errors.New("partial: input partition count changed")

// Layout is the shape of the counts a Merger accepts: per config histogram
// its number of bins and of groups (1 without group_by).
type Layout struct {
	Bins   []int
	Groups []int
	// MaxTotal is, per histogram, the most contributions one source
	// partition's Partial of a window can count, given the bound on its
	// users: max_tracked_users × max_events_per_user when the users of a
	// window are capped (each tracked user counts at most
	// max_events_per_user events per histogram and window). 0, or a nil
	// MaxTotal: no bound the config makes checkable. A Partial above it
	// is refused (ReasonCount).
	MaxTotal []float64
	// AverageCells is, per source partition, the most float64s its
	// average cells hold in one window: Σ over the average histograms of
	// average.users × (bins + 1) (a kept user's hash and vector). The
	// releaser keeps them for the windows within the sums limit only
	// (Merger.Summed), so they count in it.
	AverageCells int
	// Selects is, per histogram, whether it selects its groups (group_by
	// without groups): its Partials carry keyed cells (keyed.go), never
	// count cells (its Groups is 0).
	Selects []bool
	// MaxKeyBytes bounds a group key's length (what decode keeps);
	// MaxEventsPerUser is
	// max_events_per_user, MaxKeyUsers max_groups_per_user ×
	// max_tracked_users: the most users a partition's keys of one
	// histogram count in a window. 0: unchecked.
	MaxKeyBytes      int
	MaxEventsPerUser int
	MaxKeyUsers      float64
}

// Merger merges the Partials of the partials topic into complete windows,
// in increasing window order (the releaser, package pipeline).
//
// Completeness is presence-based. Window w (start w, size WindowMs) is
// complete when every source partition p in [0, N) either has its Partial
// of w here (merged, or under another counting fingerprint: see "Foreign
// records"), or is idle and has not
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
// Foreign records. A record is merged only when it was made under the
// releaser's counting config, window size and input partition count; any
// other is skipped, never an error (issue 22 item 2: one such record on the
// partials topic used to stop every releaser that read it, for the topic's
// whole retention). Two kinds, both reported as [Foreign]:
//
//   - another counting fingerprint (Partial.Config), same window size and
//     partition count: a bounder still on the other side of a rolling
//     change of events, window rules, histograms or contribution. Its
//     window is this config's window, and the partition emitted it, so it
//     counts as the partition's Partial of the window (present, not
//     merged): the window is released without that partition's counts,
//     and its coverage ([Window.Included]) says so.
//   - another window size (WindowMs) or partition count (Partitions): it is
//     not a Partial of any window of this config — its start and Next lie
//     on another grid, or its partition's users are another partition's —
//     so it counts for nothing: not present, its Next not taken. The
//     partition's own Partial under this config must still come; until it
//     does, the window waits for the partition (or, once the partition has
//     passed it under this config, is held as a gap). A bounder refuses to
//     start on a partition whose progress was written under another window
//     size (pipeline), so such a Partial comes only from a replica whose
//     partition had no progress yet.
//
// An Idle record of another window size or partition count is skipped the
// same way.
//
// Merging is incremental: a Partial's counts are added to its window's
// running sums when it arrives (linear in the Partial's cells), and the
// window keeps per source partition only whether its Partial was merged
// or foreign and a 64-bit digest of its counts, to tell a duplicate from a
// conflict. The sums of the count histograms are integers, exact below
// 2^53, so they do not depend on the order of arrival.
//
// Memory. A pending window within the sums limit ([Merger.SetSumsLimit]:
// DefaultSumsBytes' worth of windows from the next one on, at least 4)
// holds one float64 per (histogram, group, bin) of the layout — allocated
// at its first Partial with counts — and 9 bytes per source partition,
// whatever the number of Partials: (Σ_h groups_h·bins_h)·8 + 9·N bytes
// (the partials record limit of validation, 35,000 (group, bin) cells, is
// 280 KB). A window past the limit keeps only the 9·N bytes: a Partial of
// it is spilled — its presence and digest kept, its counts dropped — and
// once the window is next and complete, [Merger.Reread] gives the offset
// to read the topic again from (the commit point never passes a pending
// window's first record, so they are all still there, as after a
// restart); the records read again fill in the spilled counts and change
// nothing else. So the sums stay within DefaultSumsBytes (or 4 windows),
// and the rest grows by 9·N bytes per window the fastest partition is
// ahead of the slowest, not by the partials' size: before issue 22 every
// Partial was kept whole until its window was released.
//
// Selecting histograms' keys (merge_keys.go) grow with the data, not
// the layout: the windows after the next one hold them only while the
// pending windows' keys are under DefaultKeyBytes ([Merger.SetKeyBytesLimit]),
// counted as the Partials' keyed cells' sizes (keyedBytes); past it a
// Partial of such a window is spilled and read again, as past the sums
// limit. The next window always holds its own (it is released from them).
//
// Average histograms' kept users (AverageCell) are not summed: the
// releaser keeps each Partial's cells until its window is released — only
// while [Merger.Summed] says its counts are held, so they too are dropped
// past the limit and read again with the counts. They count in the limit
// (Layout.AverageCells: N·Σ_h users_h·(bins_h+1)·8 bytes per window).
// Before issue 28 they were kept for every pending window: about 11 MB per
// window at 20 partitions while one lagged.
//
// A Merger is not safe for concurrent use (the releaser's one goroutine).
type Merger struct {
	n      int
	sizeMs int64
	layout Layout
	// offs is, per histogram, the index of its (group 0, bin 0) in a
	// window's sums (group g's bins follow at offs[h]+g·bins[h]); cells
	// the total.
	offs  []int
	cells int
	// config is the releaser's counting fingerprint (Partial.Config);
	// also more fingerprints merged as its own (AlsoMerge).
	config string
	also   []string
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
	// limit is how many windows, from the next one on, hold running
	// sums (SetSumsLimit); rereading says the caller was asked to read
	// the topic again from an earlier offset (Reread) and has not yet
	// fed the record before end again.
	limit     int
	rereading bool
	// held are the earlier parts of Partials written in several records,
	// until their last part (parts.go).
	held map[partKey]*heldParts
	// keyBytes is the size of the keyed cells merged into the pending
	// windows (merge_keys.go), keyLimit its limit (SetKeyBytesLimit).
	keyBytes, keyLimit int64
}

// DefaultSumsBytes bounds the running sums the pending windows hold
// (NewMerger's sums limit): 64 MiB, and at least 4 windows.
const DefaultSumsBytes = 64 << 20

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
	offs, cells := make([]int, len(layout.Bins)), 0
	for h, b := range layout.Bins {
		if b < 0 || layout.Groups[h] < 0 {
			return nil, fmt.Errorf("partial: merger: histogram %d with %d bins, %d groups", h, b, layout.Groups[h])
		}
		offs[h] = cells
		cells += b * layout.Groups[h]
	}
	return &Merger{n: n, sizeMs: sizeMs, layout: layout, offs: offs, cells: cells, config: config, next: next, idle: make([]bool, n), idleAt: make([]int64, n), idleSeen: make([]time.Time, n),
		included: included, first: make([]int64, n), resume: resume, released: resume, pending: map[int64]*Window{}, end: -1,
		limit: max(4, DefaultSumsBytes/max(8*(cells+n*layout.AverageCells), 1)), keyLimit: DefaultKeyBytes}, nil
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
	// (window, partition); only its Next was taken. Also every record
	// read again after a Reread (fed before: counted once, when first
	// read).
	Skipped
	// Duplicate: a Partial of the same (window, partition) was added
	// before, with the same counts; this one is ignored.
	Duplicate
	// Foreign: the record was made under another config (see Merger,
	// "Foreign records"); its counts are not merged — they were bounded
	// under bounds the releaser's noise is not calibrated to. Under
	// another counting fingerprint alone it counts as the partition's
	// Partial of its window (released without that partition's counts:
	// Window.Included); under another window size or partition count it
	// counts for nothing. Never an error. The caller logs it loudly.
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
// call). A Partial of another window size or partition count is Foreign
// and changes nothing but the offset read (see Merger, "Foreign records").
// An error (ErrFormat: a Partial of this counting config whose cells do
// not fit its histograms) leaves the Merger unchanged.
func (m *Merger) Add(p *Partial, offset int64) (AddResult, error) {
	if p.Partitions != m.n || p.WindowMs != m.sizeMs || p.Partition < 0 || p.Partition >= m.n {
		if m.reread(offset) {
			return Skipped, nil
		}
		m.end = max(m.end, offset+1) // skipped for good: the commit point may pass it
		return Foreign, nil
	}
	if p.Next != p.WindowStart+p.WindowMs {
		return 0, Refuse(ReasonDecode, "partial of window %d partition %d of %d, next %d", p.WindowStart, p.Partition, p.Partitions, p.Next)
	}
	foreign := p.Config != m.config && !slices.Contains(m.also, p.Config)
	if p.WindowStart%m.sizeMs != 0 {
		return 0, Refuse(ReasonGrid, "partial of window %d partition %d: off the grid of %d ms windows", p.WindowStart, p.Partition, m.sizeMs)
	}
	first := offset // the offset of its first record
	if p.Parts > 1 {
		q, from, err := m.gather(p, offset)
		switch {
		case err != nil:
			return 0, err
		case q == nil && m.rereading && offset < m.end:
			return Skipped, nil // held again: read before
		case q == nil:
			return Added, nil // held until its last part
		}
		p, first = q, from
	}
	if !foreign { // another config's layout: not merged, not checked against ours
		if err := m.checkFit(p); err != nil {
			return 0, err
		}
		if err := m.checkKeyedFit(p); err != nil {
			return 0, err
		}
	}
	if m.reread(offset) {
		return m.addAgain(p, foreign), nil
	}
	m.end = max(m.end, offset+1)
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
		w = &Window{Start: p.WindowStart, m: m, state: make([]uint8, m.n), digest: make([]uint64, m.n), firstOffset: first}
		m.pending[p.WindowStart] = w
	}
	switch st := w.state[p.Partition]; {
	case foreign:
		// Present, not merged; kept until its window is released (the
		// commit point stays before it, so a restarted releaser sees it
		// again rather than a gap).
		if st == partAbsent {
			w.state[p.Partition] = partForeign
			w.foreign++
		}
		return Foreign, nil
	case st == partForeign:
		return Conflict, nil
	case st == partMerged || st == partSpilled:
		if w.digest[p.Partition] == partialDigest(p) {
			return Duplicate, nil
		}
		return Conflict, nil
	}
	if !m.holdsSums(p.WindowStart) {
		// Beyond the sums limit: only its presence and digest are kept;
		// its counts are read again (Reread) once its window is within it.
		w.state[p.Partition], w.digest[p.Partition] = partSpilled, partialDigest(p)
		w.merged++
		if w.spilled == 0 || first < w.spillFrom {
			w.spillFrom = first
		}
		w.spilled++
		return Added, nil
	}
	m.sum(w, p)
	w.state[p.Partition] = partMerged
	w.merged++
	return Added, nil
}

// Skip feeds a record read at offset that the caller skipped (it does
// not decode): it counts for nothing, and the commit point may pass it.
func (m *Merger) Skip(offset int64) {
	if !m.reread(offset) {
		m.end = max(m.end, offset+1)
	}
}

// AlsoMerge makes the Merger merge the Partials stamped with fingerprint
// as if made under its own counting config: the same config's fingerprint
// as an older version computed it (config.LegacyCountingFingerprint), so
// that an upgrade rolled one replica at a time leaves no partition out.
func (m *Merger) AlsoMerge(fingerprint string) {
	if fingerprint != m.config {
		m.also = append(m.also, fingerprint)
	}
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
		pend = &Window{Start: w, m: m, firstOffset: -1}
	}
	if pend.spilled > 0 {
		return nil, false // its spilled counts first (Reread)
	}
	return pend, true
}

// Released records that the window Next returned is released (recorded):
// its Partials are dropped and the commit point may pass them.
func (m *Merger) Released(w *Window) {
	if w.Start != m.released {
		panic(fmt.Sprintf("partial: released window %d, next is %d", w.Start, m.released))
	}
	for p, st := range w.state {
		if st == partMerged {
			m.included[p] = w.Start
		}
	}
	delete(m.pending, w.Start)
	m.keyBytes -= w.keyBytes
	m.released = w.Start + m.sizeMs
	for k := range m.held {
		if k.window < m.released {
			delete(m.held, k) // parts whose last part never came (refused): their window is released
		}
	}
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
	c := m.heldFrom(m.end)
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

// Summed reports whether the counts of partition p's Partial of the
// window starting at start are held: merged into the window's running
// sums, not spilled (past the sums limit: Merger, "Memory"). The releaser
// keeps a Partial's average cells only while this holds — after an Add
// that returned Added, or one that filled a spilled Partial in while
// reading again (Reread) — so that they stay under the same limit as the
// sums.
func (m *Merger) Summed(start int64, p int) bool {
	w := m.pending[start]
	return w != nil && w.state != nil && p >= 0 && p < len(w.state) && w.state[p] == partMerged
}

// Pending is how many windows hold Partials not released yet (each costs
// the memory given in Merger, "Memory").
func (m *Merger) Pending() int { return len(m.pending) }

// A source partition's Partial of a window: not read, merged, or foreign
// (present, not merged).
const (
	partAbsent uint8 = iota
	partMerged
	partForeign
	// partSpilled: merged, but its counts are not in the sums yet (it
	// came past the sums limit; Reread).
	partSpilled
)

// Window is one window's merged Partials. It satisfies release.Counts.
type Window struct {
	Start int64
	m     *Merger
	// sums holds the merged counts, laid out by Merger.offs (nil while no
	// Partial with counts was merged: all zeros).
	sums []float64
	// dropped sums the merged Partials' Dropped per histogram (nil: none).
	dropped []int64
	// keys holds, per selecting histogram, the merged Partials' keyed
	// cells (merge_keys.go; nil: none); keyBytes their size as added.
	keys     []*keyMerge
	keyBytes int64
	// state is, per source partition, whether its Partial of the window
	// was read (partAbsent, partMerged, partForeign); digest the merged one's
	// cellDigest sum. Both nil in an empty Window (no Partial read).
	state  []uint8
	digest []uint64
	// merged and foreign count the partitions in each state (merged
	// includes the spilled ones); spilled those whose counts are not in
	// sums yet, the first of them read at spillFrom.
	merged, foreign, spilled int
	spillFrom                int64
	firstOffset              int64
}

// has reports whether partition p's Partial of the window was read
// (merged or foreign); false on a nil Window.
func (w *Window) has(p int) bool {
	return w != nil && w.state != nil && w.state[p] != partAbsent
}

// Partitions is how many source partitions' Partials were merged into the
// window (an empty Partial counts).
func (w *Window) Partitions() int { return w.merged }

// Included returns the window's coverage: of the input topic's partitions,
// how many were counted under the releaser's counting config — all but
// those whose Partial of the window was made under another one (Foreign:
// a rolling config change), which the window leaves out.
//
// It depends only on which config each partition's bounder ran, never on
// the events: every partition emits a Partial of every window, with events
// or without, and an idle partition (window.watermark event) that sent
// none is counted as included — the single-process stage's rule, under
// which its events that come after the window closed are late like any
// late event. (Counting idle partitions out would say which partitions
// had no events for an idle timeout.) So it may be published with the
// release (release.Coverage).
func (w *Window) Included() (included, partitions int) { return w.m.n - w.foreign, w.m.n }

// Dropped is the contributions to histogram h of the window that the
// cross-window bound dropped, summed over the merged Partials
// (Partial.Dropped). Private, like Counts: for the operator's drop share
// only.
func (w *Window) Dropped(h int) int64 {
	if w == nil || h < 0 || h >= len(w.dropped) {
		return 0
	}
	return w.dropped[h]
}

// Counts writes the counts of histogram h, group g summed over the source
// partitions into dst, grown to the histogram's bins; zeros for a cell no
// partition had.
func (w *Window) Counts(h, g int, dst []float64) []float64 {
	l := &w.m.layout
	n := 0
	if h >= 0 && h < len(l.Bins) {
		n = l.Bins[h]
	}
	dst = slices.Grow(dst[:0], n)[:n]
	if w.sums == nil || n == 0 || g < 0 || g >= l.Groups[h] {
		clear(dst)
		return dst
	}
	copy(dst, w.sums[w.m.offs[h]+g*n:])
	return dst
}
