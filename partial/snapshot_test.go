package partial

import (
	"errors"
	"maps"
	"testing"
)

// TestSnapshotRoundTripAndRefuses: a checkpoint's parts decode to the
// counts split; a malformed part (truncated user, zero or oversized count,
// part index out of range, other version) is ErrFormat; a Progress's
// checkpoint offset round-trips and is nil in an older Progress.
func TestSnapshotRoundTripAndRefuses(t *testing.T) {
	counts := map[uint64]uint16{}
	for i := range uint64(MaxSnapshotPartUsers + 5) {
		counts[i*0x9e3779b97f4a7c15+1] = uint16(1 + i%300)
	}
	parts := SplitSnapshot(60_000, 120_000, counts)
	if len(parts) != 2 {
		t.Fatalf("%d parts, want 2", len(parts))
	}
	got := map[uint64]uint16{}
	for i, s := range parts {
		d, err := DecodeSnapshot(s.Encode())
		if err != nil {
			t.Fatal(err)
		}
		if d.Part != i || d.Parts != 2 || d.Users != len(counts) || d.Period != 60_000 || d.Next != 120_000 || string(SnapshotKey(i)) != "snap/"+string(rune('0'+i)) {
			t.Fatalf("part %d decoded as %+v", i, d)
		}
		if err := d.Each(func(u uint64, n uint16) { got[u] = n }); err != nil {
			t.Fatal(err)
		}
	}
	if !maps.Equal(got, counts) {
		t.Fatalf("decoded %d users, split %d", len(got), len(counts))
	}
	bad := map[string]*Snapshot{
		"truncated":  {Parts: 1, Data: []byte{1, 2, 3}},
		"zero count": {Parts: 1, Data: []byte{0, 0, 0, 0, 0, 0, 0, 1, 0}},
		"count 2^16": {Parts: 1, Data: []byte{0, 0, 0, 0, 0, 0, 0, 1, 0x80, 0x80, 0x04}},
		"part":       {Part: 1, Parts: 1},
		"period":     {Parts: 1, Period: 2, Next: 1},
	}
	for name, s := range bad {
		if _, err := DecodeSnapshot(s.Encode()); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
	if _, err := DecodeSnapshot([]byte(`{"v":2,"parts":1}`)); !errors.Is(err, ErrFormat) {
		t.Errorf("version 2: %v, want ErrFormat", err)
	}
	if !IsSnapshotKey(SnapshotKey(3)) || IsSnapshotKey([]byte(ProgressKey)) || IsSnapshotKey(AdmittedKey(1, 2, 0)) {
		t.Error("IsSnapshotKey")
	}
	old, err := DecodeProgress([]byte(`{"v":1,"partition":0,"partitions":1,"offset":5,"next":60000,"user_key":"MDEyMzQ1Njc4OWFiY2RlZg=="}`))
	if err != nil || old.Snap != nil {
		t.Fatalf("older progress: %+v, %v", old, err)
	}
	off := int64(42)
	old.Snap = &off
	pr, err := DecodeProgress(old.Encode())
	if err != nil || pr.Snap == nil || *pr.Snap != 42 {
		t.Fatalf("progress with a checkpoint: %+v, %v", pr, err)
	}
}
