package pipeline

import (
	"math"
	"sync"
	"time"
)

// watermarks tracks event time per assigned partition.
//
// A partition's watermark is the largest event time it has delivered minus the
// allowed lateness. The stage's watermark is the minimum over the assigned
// partitions that are not idle, so that a window closes only when every live
// partition has moved past it. A partition that delivered nothing for
// idleTimeout (wall clock) stops holding the watermark back; when every
// partition is idle the watermark is the largest partition watermark.
type watermarks struct {
	closeAfter  int64 // ms; > 0: the watermark is the wall clock minus this, events ignored
	lateness    int64 // ms
	idleTimeout time.Duration
	now         func() time.Time

	mu sync.Mutex // guards parts
	// parts maps partition → state.
	parts map[int]*partitionTime
}

type partitionTime struct {
	maxEvent int64 // largest event time seen; math.MinInt64 before the first event
	minEvent int64 // smallest event time seen; math.MaxInt64 before the first event
	lastSeen time.Time
}

func newWatermarks(partitions []int, lateness, idleTimeout, closeAfter time.Duration, now func() time.Time) *watermarks {
	w := &watermarks{
		closeAfter:  closeAfter.Milliseconds(),
		lateness:    lateness.Milliseconds(),
		idleTimeout: idleTimeout,
		now:         now,
		parts:       make(map[int]*partitionTime, len(partitions)),
	}
	t := now()
	for _, p := range partitions {
		w.parts[p] = &partitionTime{maxEvent: math.MinInt64, minEvent: math.MaxInt64, lastSeen: t}
	}
	return w
}

// observe records an event time from partition p.
func (w *watermarks) observe(p int, eventMs int64) {
	w.mu.Lock()
	pt := w.parts[p]
	if pt != nil {
		if eventMs > pt.maxEvent {
			pt.maxEvent = eventMs
		}
		if eventMs < pt.minEvent {
			pt.minEvent = eventMs
		}
		pt.lastSeen = w.now()
	}
	w.mu.Unlock()
}

// touch records that partition p delivered a message (even one without a
// usable event time): the partition is alive.
func (w *watermarks) touch(p int) {
	w.mu.Lock()
	if pt := w.parts[p]; pt != nil {
		pt.lastSeen = w.now()
	}
	w.mu.Unlock()
}

// maxEvent returns the largest event time seen on p, and whether any was.
func (w *watermarks) maxEvent(p int) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pt := w.parts[p]
	if pt == nil || pt.maxEvent == math.MinInt64 {
		return 0, false
	}
	return pt.maxEvent, true
}

// current returns the stage watermark and the smallest event time seen on any
// partition; ok is false until some partition has delivered an event and
// every live partition has.
func (w *watermarks) current() (wm int64, minSeen int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if w.closeAfter > 0 {
		// Wall-clock closing (window.close_after): a fixed schedule that no
		// event can move.
		return now.UnixMilli() - w.closeAfter, math.MaxInt64, true
	}
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
		if now.Sub(pt.lastSeen) >= w.idleTimeout {
			continue // idle: does not hold the watermark back
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
