package aggregate

import (
	"errors"
	"fmt"
)

// Close removes the window's state and returns its counts: for every
// declared (histogram, group, bin), zeros included, also for a window that
// never saw an event, the parts selected from its tracked users. The caller
// must Release the result.
func (a *Aggregator) Close(windowStart int64) (*WindowCounts, error) {
	return a.close(windowStart, nil)
}

// CloseAdmitted is Close for a window under the cross-window bound
// (contribution.max_windows_per_user, see Admissions): admit is called
// once for every user of the window with a part to count — the window's
// eligible users, whatever the per-window bounds kept of them — from the
// calling goroutine, in no particular order; only the selected parts of the
// users it admits are counted. The selected parts of the others are
// reported by [WindowCounts.NotAdmitted]. Typically admit is
// [Admissions.Admit] for the window's period, recording the admitted users.
func (a *Aggregator) CloseAdmitted(windowStart int64, admit func(user uint64) bool) (*WindowCounts, error) {
	if admit == nil {
		return nil, errors.New("aggregate: close admitted: nil admit")
	}
	return a.close(windowStart, admit)
}

func (a *Aggregator) close(windowStart int64, admit func(uint64) bool) (*WindowCounts, error) {
	end := windowStart + a.spec.WindowSize.Milliseconds()
	if end < windowStart {
		return nil, fmt.Errorf("aggregate: window start %d: end overflows int64", windowStart)
	}
	// Detach the window first, so that a (misplaced) concurrent Add on a
	// shard already swept below starts a fresh window instead of touching
	// this one, and admit nobody any more.
	a.mu.Lock()
	w := a.windows[windowStart]
	delete(a.windows, windowStart)
	a.mu.Unlock()
	if w != nil {
		w.mu.Lock()
		w.closed = true
		heap := w.heap[:0]
		w.heap = nil
		w.mu.Unlock()
		a.tracked.Add(-w.users.Load())
		a.mu.Lock()
		if cap(heap) > cap(a.spare) {
			a.spare = heap
		}
		a.mu.Unlock()
	}
	counts := make([]int64, a.nCells)
	var displaced, notAdmitted int64
	notAdmittedBy := make([]int64, len(a.hists))
	cur := make([]int, a.maxSlots)
	kas := a.keyAccs()
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		if s.npend.Load() != 0 {
			a.removeEvicted(s)
		}
		if sw := s.wins[windowStart]; sw != nil {
			for h, ka := range kas {
				if ka != nil {
					ka.begin(sw, h)
				}
			}
			d, n := a.count(sw, counts, cur, admit, notAdmittedBy, kas)
			for _, ka := range kas {
				if ka != nil {
					ka.collect()
				}
			}
			a.resetDicts(sw)
			displaced += sw.displaced + d
			notAdmitted += n
			delete(s.wins, windowStart)
			if s.last == sw {
				s.last = nil
			}
			sw.w, sw.displaced = nil, 0
			if len(s.free) < maxFree {
				sw.users.reset()
				s.free = append(s.free, sw)
			}
		}
		s.mu.Unlock()
	}
	// Every Add that could reach w's records did so holding a shard lock
	// taken above, so its writes happen before count read them.
	var keyed []keyedCounts
	if kas != nil {
		keyed = make([]keyedCounts, len(a.hists))
		for h, ka := range kas {
			if ka != nil {
				keyed[h] = ka.merge()
			}
		}
	}
	wc, err := a.build(windowStart, end, counts, displaced, keyed)
	if err != nil {
		return nil, err
	}
	wc.notAdmitted, wc.notAdmittedBy = notAdmitted, notAdmittedBy
	return wc, nil
}

// count adds the selected parts of sw's tracked users that admit admits
// (all when admit is nil) to counts, and returns the number of selected
// parts of its users no longer tracked and of those not admitted (s.mu
// held); it adds the latter per histogram to notAdmittedBy.
func (a *Aggregator) count(sw *shardWindow, counts []int64, cur []int, admit func(uint64) bool, notAdmittedBy []int64, kas []*keyAcc) (displaced, notAdmitted int64) {
	tau := sw.w.tau.Load()
	t := sw.users
	for i := 0; i < len(t.words); i += t.stride {
		key := t.words[i]
		if key == 0 {
			continue
		}
		rec := t.words[i+1 : i+t.stride]
		if key > tau {
			displaced += int64(a.selectedParts(rec))
			continue
		}
		if admit != nil && !admit(key) {
			for h := range a.hists {
				n := int64(a.selectedPartsOf(h, rec))
				notAdmittedBy[h] += n
				notAdmitted += n
			}
			continue
		}
		for h := range a.hists {
			l := &a.hists[h]
			if l.keyed {
				if ka := kas[h]; ka.d != nil {
					a.countKeyed(l, rec[l.recOff:l.recOff+l.slots*a.m], cur, ka)
				}
				continue
			}
			a.countSelected(l, rec[l.recOff:l.recOff+l.slots*a.m], cur, counts)
		}
	}
	return displaced, notAdmitted
}
