package kafkalog

import (
	"reflect"
	"testing"
)

// TestNotePartitions: the first count is recorded without a change (the
// caller knows of none); the
// same count again writes nothing and keeps the time of the change; a new
// count records the change (from, to, when it was seen, the next window),
// replacing the earlier one; and a new owner restores the record.
func TestNotePartitions(t *testing.T) {
	c := newCluster(t)
	l := openLog(t, c)
	if _, ok, err := l.InputPartitions(); err != nil || ok {
		t.Fatalf("an empty log: %v, %v", ok, err)
	}
	steps := []struct {
		n          int
		at, next   int64
		want       Partitions
		wantWrites bool
	}{
		{4, 1000, 10 * minute, Partitions{Count: 4}, true},
		{4, 2000, 11 * minute, Partitions{Count: 4}, false},
		{6, 3000, 12 * minute, Partitions{Count: 6, Changed: &PartitionsChange{From: 4, To: 6, AtMs: 3000, Window: 12 * minute}}, true},
		{6, 9000, 15 * minute, Partitions{Count: 6, Changed: &PartitionsChange{From: 4, To: 6, AtMs: 3000, Window: 12 * minute}}, false},
		{8, 9500, 16 * minute, Partitions{Count: 8, Changed: &PartitionsChange{From: 6, To: 8, AtMs: 9500, Window: 16 * minute}}, true},
	}
	for i, s := range steps {
		before := len(readRaw(t, c, true))
		got, err := l.NotePartitions(ctxT(t), s.n, s.at, s.next, i > 0) // unknownBefore matters only without a record
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if !reflect.DeepEqual(got, s.want) {
			t.Errorf("%d: got %+v (changed %+v), want %+v (changed %+v)", i, got, got.Changed, s.want, s.want.Changed)
		}
		if wrote := len(readRaw(t, c, true)) > before; wrote != s.wantWrites {
			t.Errorf("%d: wrote a record: %v, want %v", i, wrote, s.wantWrites)
		}
		got.Changed = nil // the caller's copy: the log's record is its own
		if again, ok, err := l.InputPartitions(); err != nil || !ok || !reflect.DeepEqual(again, s.want) {
			t.Errorf("%d: read back %+v, %v, %v", i, again, ok, err)
		}
	}
	if _, err := l.NotePartitions(ctxT(t), 0, 1, 1, false); err == nil {
		t.Error("a count of 0 was recorded")
	}
	_ = l.Close()
	l2 := openLog(t, c)
	if got, ok, err := l2.InputPartitions(); err != nil || !ok || !reflect.DeepEqual(got, steps[len(steps)-1].want) {
		t.Errorf("restored %+v, %v, %v; want %+v", got, ok, err, steps[len(steps)-1].want)
	}
}

// TestNotePartitionsUnknownBefore: a log without a recorded count whose
// caller cannot tell the count before (an older version's log, recovered
// onto new internal topics) records a change from 0 at once.
func TestNotePartitionsUnknownBefore(t *testing.T) {
	l := openLog(t, newCluster(t))
	got, err := l.NotePartitions(ctxT(t), 6, 3000, 12*minute, true)
	want := Partitions{Count: 6, Changed: &PartitionsChange{From: 0, To: 6, AtMs: 3000, Window: 12 * minute}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v (changed %+v), %v; want %+v", got, got.Changed, err, want)
	}
}
