package window

import (
	"math"
	"sync"
	"time"
)

// Watermarks tracks, per assigned partition, how far the partition has been
// read, and from that the stage's watermark: the releaser closes every
// window whose end is at or below it.
//
// # Arrival (window.watermark: arrival, the default)
//
// The watermark is built from record timestamps, which the producer or the
// broker sets and the user cannot (see the package doc for the trust
// assumption), never from the events' own time field. A partition's
// frontier F_p is a time such that every record of p with a record time
// before F_p has been read (and handled):
//
//   - after reading a record whose record time b the broker set
//     (LogAppendTime): F_p ≥ b, since broker times do not run backwards
//     along the log. A producer-set time (CreateTime) never moves F_p:
//     producers' clocks, batching and retries make such times run
//     backwards, and one record ahead would close windows before the
//     records behind it are read (the stage's caller decides, from the
//     record batch's timestamp type: source.Fetcher.BrokerTime);
//   - after a fetch sent at wall time T came back at the partition's high
//     watermark: F_p ≥ T − lateness (a record appended before T − lateness
//     is committed by T: replication and producer delays are assumed below
//     the lateness). Reading is read_committed, so this needs the high
//     watermark itself, not the last stable offset: a partition held by an
//     open transaction has unread records and its frontier stays at the
//     last record time read until the transaction ends.
//
// A record time ahead of the wall clock advances F_p only up to the wall
// clock.
//
// Both clauses assume clocks that agree: broker times that never run
// backwards along a partition and a stage host whose clock is not ahead of
// the brokers'. Neither holds exactly: after a leader change to a broker
// whose clock is behind, or an NTP step back, a later record carries an
// earlier broker time, and a stage clock ahead of the brokers' by d makes
// the caught-up clause claim d too much. Both clauses are therefore lowered
// by the clock-skew margin M (window.clock_skew_margin; WithClockSkewMargin):
//
//	F_p = max(largest record time read − M, caughtUp − lateness − M)
//
// which stays a true frontier as long as every clock involved is within M
// of the others (a regression of broker time, or the stage's lead over a
// broker, of at most M). The counting rule is unchanged: an event counts
// iff its own record time is before its window's end + lateness; only the
// close waits M longer.
//
// The stage's watermark is min_p F_p − lateness: the window [s, e)
// closes once every partition is read up to e + lateness (+ M), which is
// the record-time cutoff of the window's events (Rule.Decide). A
// partition that has unread records or cannot be fetched therefore holds
// every window open — consumer lag delays releases but never decides which
// events count — and an empty partition read to its end advances with the
// wall clock. A record whose time breaks the assumptions (it is read after
// its window closed) is dropped as late and counted; whether that happens
// depends on its own record time and position, not on any user's events.
//
// # Event (window.watermark: event, opt-in)
//
// A partition's watermark is the largest event time it has delivered minus
// the allowed lateness. The stage's watermark is the minimum over the
// assigned partitions that are not idle, so that a window closes only when
// every live partition has moved past it. A partition is idle — it stops
// holding the watermark back — only when it is known to be read to its end
// and has delivered nothing for idleTimeout (wall clock): its last fetch
// came back at the high watermark (not merely at the last stable offset of
// an open transaction) no longer than endFresh ago, and no fetch has failed
// or shown unread records since. A partition whose fetches fail (a leader
// move: it may hold unread events), that has unread records (lag, or
// records held back by an open transaction), that has not been read to its
// end yet, or whose fetch loop stopped answering is never idle, however
// long it is silent; the fetch retry back-off therefore never counts toward
// the idle timeout. When every partition is idle the watermark is the
// largest partition watermark. Event times come from the events, so one
// event stamped ahead moves the watermark (the trust assumption `stage
// validate` flags).
type Watermarks struct {
	arrival     bool
	lateness    int64 // ms
	idleTimeout time.Duration
	// endFresh (event mode) is how long after its last fetch at the high
	// watermark a partition still counts as read to its end: a healthy
	// fetch loop at the end polls every fetch max wait.
	endFresh time.Duration
	now      func() time.Time

	mu sync.Mutex // guards parts and every partitionTime in it
	// parts maps partition → state.
	parts map[int]*partitionTime

	// skew is the clock-skew margin (ms, arrival mode): both frontier
	// clauses are lowered by it (see Watermarks). Guarded by mu.
	skew int64
}

type partitionTime struct {
	// maxEvent is the largest time seen: record time (arrival, capped at
	// the wall clock) or event time (event); math.MinInt64 before the first.
	maxEvent int64
	minEvent int64 // smallest such time; math.MaxInt64 before the first
	// caughtUp (arrival only) is the wall time (Unix ms) at which the last
	// fetch that reached the high watermark was sent; math.MinInt64 before.
	caughtUp int64
	lastSeen time.Time
	// failing: the partition's last fetch failed (a leader move, a broker
	// down). A failing partition is never idle: it may hold unread events.
	failing bool
	// unread: the partition may hold records not read yet — true until a
	// fetch comes back at the high watermark, and again whenever a fetch
	// response ends below it (lag, or an open transaction holding the last
	// stable offset). Such a partition is never idle.
	unread bool
	// endSeen is the wall time of the last fetch response at the high
	// watermark.
	endSeen time.Time
}

// NewWatermarks tracks partitions. endFresh (event mode) is how long after
// its last fetch at the high watermark a partition still counts as read to
// its end: the stage allows one missed poll and one retry back-off (2 ×
// the fetch max wait + the fetch retry back-off).
func NewWatermarks(partitions []int, arrival bool, lateness, idleTimeout, endFresh time.Duration, now func() time.Time) *Watermarks {
	w := &Watermarks{
		arrival:     arrival,
		lateness:    lateness.Milliseconds(),
		idleTimeout: idleTimeout,
		endFresh:    endFresh,
		now:         now,
		parts:       make(map[int]*partitionTime, len(partitions)),
	}
	t := now()
	for _, p := range partitions {
		w.parts[p] = &partitionTime{maxEvent: math.MinInt64, minEvent: math.MaxInt64, caughtUp: math.MinInt64, lastSeen: t, unread: true}
	}
	return w
}

// WithClockSkewMargin sets the clock-skew margin of the arrival frontier
// (window.clock_skew_margin; see Watermarks) and returns w. Negative
// margins count as 0; event mode ignores it.
func (w *Watermarks) WithClockSkewMargin(d time.Duration) *Watermarks {
	w.mu.Lock()
	w.skew = max(d.Milliseconds(), 0)
	w.mu.Unlock()
	return w
}

// Observe records a time (record time or event time, by mode) from
// partition p.
func (w *Watermarks) Observe(p int, ms int64) {
	w.mu.Lock()
	pt := w.parts[p]
	if pt != nil {
		if ms > pt.maxEvent {
			pt.maxEvent = ms
		}
		if ms < pt.minEvent {
			pt.minEvent = ms
		}
		pt.lastSeen = w.now()
	}
	w.mu.Unlock()
}

// CaughtUpAt records that a fetch of p sent at wall time atMs (Unix ms)
// came back read to the partition's high watermark: the arrival frontier
// advances (arrival mode) and the partition is read to its end.
func (w *Watermarks) CaughtUpAt(p int, atMs int64) {
	w.mu.Lock()
	if pt := w.parts[p]; pt != nil {
		if atMs > pt.caughtUp {
			pt.caughtUp = atMs
		}
		pt.unread = false
		pt.endSeen = w.now()
	}
	w.mu.Unlock()
}

// SetUnread records that a fetch response of p ended below the high
// watermark: p holds records not read yet.
func (w *Watermarks) SetUnread(p int) {
	w.mu.Lock()
	if pt := w.parts[p]; pt != nil {
		pt.unread = true
	}
	w.mu.Unlock()
}

// SetFailing records whether p's last fetch failed.
func (w *Watermarks) SetFailing(p int, failing bool) {
	w.mu.Lock()
	if pt := w.parts[p]; pt != nil {
		pt.failing = failing
		if failing {
			pt.unread = true // until a fetch comes back at the end again
		}
	}
	w.mu.Unlock()
}

// Touch records that partition p delivered a message (even one without a
// usable event time): the partition is alive.
func (w *Watermarks) Touch(p int) {
	w.mu.Lock()
	if pt := w.parts[p]; pt != nil {
		pt.lastSeen = w.now()
	}
	w.mu.Unlock()
}

// Current returns the stage watermark and the smallest time seen on any
// partition; ok is false until the watermark is defined (arrival: every
// partition has a frontier; event: some partition has delivered an event
// and every live partition has).
func (w *Watermarks) Current() (wm int64, minSeen int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.arrival {
		return w.arrivalLocked()
	}
	now := w.now()
	wm = math.MaxInt64
	minSeen = math.MaxInt64
	anyLive, maxAll := false, int64(math.MinInt64)
	for _, pt := range w.parts {
		if pt.minEvent < minSeen {
			minSeen = pt.minEvent
		}
		if pt.maxEvent > maxAll {
			maxAll = pt.maxEvent
		}
		if w.idle(pt, now) {
			continue // does not hold the watermark back
		}
		anyLive = true
		if pt.maxEvent == math.MinInt64 {
			return 0, 0, false // a live partition has not delivered an event yet
		}
		if pt.maxEvent < wm {
			wm = pt.maxEvent
		}
	}
	if maxAll == math.MinInt64 {
		return 0, 0, false
	}
	if !anyLive {
		wm = maxAll
	}
	return wm - w.lateness, minSeen, true
}

// Idle reports whether partition p is idle now (event mode; see
// Watermarks): read to its end, no fetch failing, silent for the idle
// timeout. Always false in arrival mode and for a partition not tracked.
// The distributed mode's bounder reports it to the releaser (partial.Idle).
func (w *Watermarks) Idle(p int) bool {
	if w.arrival {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	pt := w.parts[p]
	return pt != nil && w.idle(pt, w.now())
}

// IdleLatest is Idle(p) and the largest time partition p has delivered
// (event mode: event time), read together; hasLatest is false before its
// first.
func (w *Watermarks) IdleLatest(p int) (idle bool, latest int64, hasLatest bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pt := w.parts[p]
	if pt == nil {
		return false, 0, false
	}
	idle = !w.arrival && w.idle(pt, w.now())
	return idle, pt.maxEvent, pt.maxEvent != math.MinInt64
}

// idle reports whether pt is idle (event mode; see Watermarks).
func (w *Watermarks) idle(pt *partitionTime, now time.Time) bool {
	return now.Sub(pt.lastSeen) >= w.idleTimeout && !pt.failing && !pt.unread && now.Sub(pt.endSeen) <= w.endFresh
}

// arrivalLocked is current for arrival mode (w.mu held): min over the
// partitions of the frontier F_p = max(largest record time − margin,
// caughtUp − lateness − margin), minus the lateness.
func (w *Watermarks) arrivalLocked() (wm int64, minSeen int64, ok bool) {
	if len(w.parts) == 0 {
		return 0, 0, false
	}
	wm, minSeen = math.MaxInt64, math.MaxInt64
	for _, pt := range w.parts {
		f, have := int64(math.MinInt64), false
		if pt.maxEvent != math.MinInt64 {
			f, have = pt.maxEvent-w.skew, true
		}
		if pt.caughtUp != math.MinInt64 {
			if c := pt.caughtUp - w.lateness - w.skew; !have || c > f {
				f, have = c, true
			}
		}
		if !have {
			return 0, 0, false // neither read nor caught up yet: holds every window
		}
		wm = min(wm, f)
		minSeen = min(minSeen, pt.minEvent)
	}
	return wm - w.lateness, minSeen, true
}
