package partial

import (
	"errors"
	"reflect"
	"testing"
)

func TestPartialRoundTrip(t *testing.T) {
	p := &Partial{WindowStart: 60000, WindowMs: 60000, Partition: 3, Partitions: 12, Next: 120000, Watermark: 125000,
		Counts: []Cell{{H: 0, G: 2, Counts: []float64{1, 0, 4}}}, Dropped: []DropCell{{H: 1, N: 17}}}
	got, err := DecodePartial(p.Encode())
	if err != nil {
		t.Fatal(err)
	}
	want := *p
	want.V = Version
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("round trip: got %+v, want %+v", *got, want)
	}
	if string(p.Key()) != "w/60000/p/3" {
		t.Errorf("key %q", p.Key())
	}
}

// TestPartialFirstPrevCompat: a partial carries its partition's first
// window and the window emitted before it; a partial of an older bounder
// (neither field) still decodes, with First 0 and Prev nil (the Merger
// reads it as the next of its partition's sequence), and an older reader
// ignores the new fields (JSON).
func TestPartialFirstPrevCompat(t *testing.T) {
	prev := int64(0)
	p := &Partial{WindowStart: 10, WindowMs: 10, Partition: 0, Partitions: 2, Next: 20, First: 0, Prev: &prev}
	got, err := DecodePartial(p.Encode())
	if err != nil || got.Prev == nil || *got.Prev != 0 {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	p = &Partial{WindowStart: 10, WindowMs: 10, Partition: 0, Partitions: 2, Next: 20, First: 10}
	if got, err = DecodePartial(p.Encode()); err != nil || got.Prev != nil || got.First != 10 {
		t.Fatalf("first partial: %+v, %v", got, err)
	}
	old := `{"v":1,"window_start":10,"window_ms":10,"partition":1,"partitions":2,"next":20,"watermark":0,"config":""}`
	if got, err = DecodePartial([]byte(old)); err != nil || got.Prev != nil || got.First != 0 {
		t.Fatalf("older partial: %+v, %v", got, err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"not json", "{"},
		{"old version", `{"v":0,"window_start":0,"window_ms":1,"partition":0,"partitions":1,"next":1}`},
		{"partition out of range", `{"v":1,"window_start":0,"window_ms":1,"partition":1,"partitions":1,"next":1}`},
		{"next not the window end", `{"v":1,"window_start":0,"window_ms":1,"partition":0,"partitions":1,"next":2}`},
		{"negative cell", `{"v":1,"window_start":0,"window_ms":1,"partition":0,"partitions":1,"next":1,"counts":[{"h":-1,"g":0}]}`},
		{"negative drop cell", `{"v":1,"window_start":0,"window_ms":1,"partition":0,"partitions":1,"next":1,"dropped":[{"h":0,"n":-1}]}`},
		{"previous window not before", `{"v":1,"window_start":10,"window_ms":10,"partition":0,"partitions":1,"next":20,"prev":10}`},
		{"first window after", `{"v":1,"window_start":10,"window_ms":10,"partition":0,"partitions":1,"next":20,"first":20}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodePartial([]byte(tc.value)); !errors.Is(err, ErrFormat) {
				t.Errorf("DecodePartial(%s) = %v, want ErrFormat", tc.value, err)
			}
		})
	}
	if _, err := DecodeProgress([]byte(`{"v":1,"partition":0,"offset":5,"next":0,"user_key":"AAEC"}`)); !errors.Is(err, ErrFormat) {
		t.Errorf("a progress record with a 3-byte key decoded: %v", err)
	}
}

func TestAdmittedChunksAndKeys(t *testing.T) {
	users := make([]uint64, 2*MaxAdmittedChunk+1)
	for i := range users {
		users[i] = uint64(i) << 40 // beyond float64's 2^53: JSON must keep them exact
	}
	chunks := ChunkAdmitted(0, 60000, users)
	if len(chunks) != 3 {
		t.Fatalf("%d chunks, want 3", len(chunks))
	}
	var back []uint64
	for _, c := range chunks {
		a, err := DecodeAdmitted(c.Encode())
		if err != nil {
			t.Fatal(err)
		}
		back = append(back, a.Users...)
	}
	if !reflect.DeepEqual(back, users) {
		t.Error("admitted users changed through the wire format")
	}
	if p, ok := ParseAdmittedKey(AdmittedKey(86400000, 60000, 2)); !ok || p != 86400000 {
		t.Errorf("ParseAdmittedKey = %d, %v", p, ok)
	}
	if _, ok := ParseAdmittedKey([]byte(ProgressKey)); ok {
		t.Error("the progress key parsed as an admissions key")
	}
}

func TestIdleRoundTrip(t *testing.T) {
	d := &Idle{Partition: 2, Partitions: 12, WindowMs: 60000, Next: 120000, Idle: true, Config: "c"}
	got, err := DecodeIdle(d.Encode())
	if err != nil {
		t.Fatal(err)
	}
	want := *d
	want.V = Version
	if *got != want {
		t.Errorf("round trip: got %+v, want %+v", *got, want)
	}
	if k := IdleKey(2); string(k) != "idle/p/2" || !IsIdleKey(k) || IsIdleKey((&Partial{WindowStart: 0, Partition: 2}).Key()) {
		t.Errorf("key %q", k)
	}
	for _, v := range []string{
		"{",
		`{"v":0,"partition":0,"partitions":1,"window_ms":10,"next":0,"idle":true}`,
		`{"v":1,"partition":1,"partitions":1,"window_ms":10,"next":0,"idle":true}`,
		`{"v":1,"partition":0,"partitions":1,"window_ms":0,"next":0,"idle":true}`,
		`{"v":1,"partition":0,"partitions":1,"window_ms":10,"next":5,"idle":true}`,
	} {
		if _, err := DecodeIdle([]byte(v)); !errors.Is(err, ErrFormat) {
			t.Errorf("DecodeIdle(%s) = %v, want ErrFormat", v, err)
		}
	}
}
