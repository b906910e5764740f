package kafkalog

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Partitions is the release log's record of the input topic's partition
// count (key input_partitions): from it the distributed mode says which
// windows a change of the count left incomplete (package distributed,
// partitions.go). A log of an older version has none; such a version
// refuses a log that has one (an unknown record key: ErrIncompatible).
type Partitions struct {
	// Count is the partition count last recorded.
	Count int `json:"count"`
	// Changed is the last change of Count recorded; nil while none was
	// (the count recorded first is taken as it is).
	Changed *PartitionsChange `json:"changed,omitempty"`
}

// PartitionsChange is one change of the input topic's partition count, as
// a session of the stage first saw it. Both times are the deployment's,
// never the data's: when the stage looked, and which windows it had
// recorded by then.
type PartitionsChange struct {
	// From is the count before; 0 when it was not recorded
	// (NotePartitions' unknownBefore).
	From int `json:"from"`
	To   int `json:"to"`
	// AtMs is the wall clock (Unix ms) of the session that first saw the
	// count To: never before the change itself (a count is only seen once
	// it exists).
	AtMs int64 `json:"at_ms"`
	// Window is the first window the log had not recorded then: every
	// window from it on is counted by sessions that see To.
	Window int64 `json:"window_ms"`
}

// clone is a deep copy of p.
func (p Partitions) clone() Partitions {
	if p.Changed != nil {
		c := *p.Changed
		p.Changed = &c
	}
	return p
}

// InputPartitions returns the recorded partition count and its last
// change, if any is recorded.
func (l *Log) InputPartitions() (Partitions, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return Partitions{}, false, l.dead
	}
	if l.st.partitions == nil {
		return Partitions{}, false, nil
	}
	return l.st.partitions.clone(), true, nil
}

// NotePartitions records that the input topic has n partitions, seen at
// wall clock atMs by a session whose next window is next, and returns the
// record as it stands afterwards. When none is recorded yet it records
// the count alone (no change is known: a fresh log, or one an older
// version wrote), or, with unknownBefore (the caller cannot tell which
// count the windows from next on were written with), a change From 0;
// when the recorded count is n it writes nothing; when it
// differs it records the change (From the recorded count, To n, atMs,
// next) in a transaction of its own, replacing the change recorded before:
// a later change's windows start after the earlier change's were recorded,
// and its AtMs is later, so what the later one marks covers what is left
// of the earlier one.
func (l *Log) NotePartitions(ctx context.Context, n int, atMs, next int64, unknownBefore bool) (Partitions, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return Partitions{}, l.dead
	}
	if n <= 0 {
		return Partitions{}, fmt.Errorf("kafkalog: input partitions %d", n)
	}
	cur := l.st.partitions
	if cur != nil && cur.Count == n {
		return cur.clone(), nil
	}
	p := Partitions{Count: n}
	switch {
	case cur != nil:
		p.Changed = &PartitionsChange{From: cur.Count, To: n, AtMs: atMs, Window: next}
	case unknownBefore:
		p.Changed = &PartitionsChange{To: n, AtMs: atMs, Window: next}
	}
	r, err := jsonRecord(keyInputPartitions, p)
	if err != nil {
		return Partitions{}, err
	}
	if err := l.commit(ctx, []*kgo.Record{r}); err != nil {
		return Partitions{}, fmt.Errorf("kafkalog: record input partitions: %w", err)
	}
	return p.clone(), nil
}
