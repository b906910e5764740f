package kafkapartial

import (
	"fmt"
	"testing"

	"github.com/dpstage/stage/partial"
)

// TestWriterSplitsKeyedPartial (issue 30): a Partial whose selecting
// histogram's keys are over the record limit (40,000 keys, about 2.3 MB) is
// written as parts, each under Kafka's default record limit, in the one
// transaction of its window; read back and merged, the window has every
// key. (Written as one record, franz-go refuses it: MESSAGE_TOO_LARGE.)
func TestWriterSplitsKeyedPartial(t *testing.T) {
	c := newCluster(t, 2)
	ctx := ctxT(t)
	e := emission(0, 10*minute)
	k := partial.KeyedCell{H: 1, Bins: 2}
	const keys = 40000
	for i := range keys {
		k.Append(fmt.Sprintf("key-%011d", i), 1+int64(i%3), []float64{float64(1 + i%3), 1})
	}
	e.Partial.Keyed = []partial.KeyedCell{k}
	if err := openWriter(t, c, 0).Emit(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := openWriter(t, c, 1).Emit(ctx, emission(1, 10*minute)); err != nil {
		t.Fatal(err)
	}
	vals := readPartialValues(t, c)
	if len(vals) < 4 {
		t.Fatalf("%d records, want the Partial in 3 or more parts and partition 1's", len(vals))
	}
	m, err := partial.NewMerger(2, minute, 10*minute, partial.Layout{Bins: []int{2, 2}, Groups: []int{1, 0}, Selects: []bool{false, true}}, "")
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if len(v) > 1_000_012 {
			t.Errorf("record %d is %d bytes", i, len(v))
		}
		p, err := partial.DecodeForMerge(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Add(p, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	w, ok := m.Next()
	if !ok {
		t.Fatal("window not complete")
	}
	if n := w.Keys(1); n != keys {
		t.Fatalf("%d keys merged, want %d", n, keys)
	}
	if key, users, counts := w.Key(1, keys-1, nil); key != fmt.Sprintf("key-%011d", keys-1) || users != 1+int64((keys-1)%3) || counts[1] != 1 {
		t.Errorf("last key %q, %d users, %v", key, users, counts)
	}
}
