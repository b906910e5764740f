package source

import "sync"

// OffsetTracker knows, for one partition, the first offset of every window that
// is still open (not yet released), and the offset after the last processed
// message. The offset safe to commit is the smallest of these: everything
// before it belongs to released windows or was dropped.
type OffsetTracker struct {
	mu sync.Mutex // guards all fields
	// firstOffset maps an open window's start to the first offset in this
	// partition that was counted into it. Offsets grow, so the first is the
	// smallest.
	firstOffset map[int64]int64
	// next is the offset after the last message fully processed.
	next int64
	// committed is the last offset committed, -1 if none.
	committed int64
}

func NewOffsetTracker(start int64) *OffsetTracker {
	return &OffsetTracker{firstOffset: make(map[int64]int64), next: start, committed: -1}
}

// counted records that the message at offset was counted into window.
func (t *OffsetTracker) Counted(window, offset int64) {
	t.mu.Lock()
	if _, ok := t.firstOffset[window]; !ok {
		t.firstOffset[window] = offset
	}
	if offset+1 > t.next {
		t.next = offset + 1
	}
	t.mu.Unlock()
}

// processed records that the message at offset needs nothing more (dropped,
// or late for a released window).
func (t *OffsetTracker) Processed(offset int64) {
	t.mu.Lock()
	if offset+1 > t.next {
		t.next = offset + 1
	}
	t.mu.Unlock()
}

// released forgets every window starting before end: they were released.
func (t *OffsetTracker) Released(end int64) {
	t.mu.Lock()
	for w := range t.firstOffset {
		if w < end {
			delete(t.firstOffset, w)
		}
	}
	t.mu.Unlock()
}

// commitPoint returns the offset safe to commit and whether it differs from
// the last committed one. A negative next (no message processed, assignment
// from the beginning) yields nothing to commit.
func (t *OffsetTracker) CommitPoint() (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.next
	for _, o := range t.firstOffset {
		if o < c {
			c = o
		}
	}
	if c < 0 || c == t.committed {
		return c, false
	}
	return c, true
}

func (t *OffsetTracker) MarkCommitted(o int64) {
	t.mu.Lock()
	if o > t.committed {
		t.committed = o
	}
	t.mu.Unlock()
}
