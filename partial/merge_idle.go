package partial

// The Merger's idle records and idle grace (see Merger, "Idleness").

import (
	"cmp"
	"slices"
	"time"
)

// SetIdle feeds the Idle record read at offset (offsets increase from
// call to call, shared with Add) and returns Added, or Foreign for a record
// of another window size or partition count: skipped, it changes nothing
// but the offset read (see Merger, "Foreign records").
func (m *Merger) SetIdle(d *Idle, offset int64) AddResult {
	if m.reread(offset) {
		return Skipped
	}
	m.end = max(m.end, offset+1)
	if d.Partitions != m.n || d.WindowMs != m.sizeMs || d.Partition < 0 || d.Partition >= m.n {
		return Foreign
	}
	if d.Next > m.next[d.Partition] {
		m.next[d.Partition] = d.Next
	}
	m.idle[d.Partition] = d.Idle
	m.idleAt[d.Partition] = offset
	if m.now != nil {
		m.idleSeen[d.Partition] = m.now()
	}
	return Added
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
