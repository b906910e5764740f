package partial

import (
	"errors"
	"math"
	"testing"
)

// TestDecodeRefusesRogueValues (issue 28 item 3): a partial that decodes
// and has a plausible shape but carries values no bounder makes is
// refused with ErrFormat and its reason (on main every one of them
// decoded).
func TestDecodeRefusesRogueValues(t *testing.T) {
	const head = `"v":1,"window_start":60,"window_ms":60,"partition":0,"partitions":2,"next":120`
	for _, tc := range []struct {
		name, value string
		reason      Reason
	}{
		{"negative count", `{` + head + `,"counts":[{"h":0,"g":0,"counts":[3,-5]}]}`, ReasonCount},
		{"fractional count", `{` + head + `,"counts":[{"h":0,"g":0,"counts":[0.5,1]}]}`, ReasonCount},
		{"count above 2^53", `{` + head + `,"counts":[{"h":0,"g":0,"counts":[1e300,1]}]}`, ReasonCount},
		{"window off the grid", `{"v":1,"window_start":90,"window_ms":60,"partition":0,"partitions":2,"next":150}`, ReasonGrid},
		{"first window off the grid", `{` + head + `,"first":30}`, ReasonGrid},
		{"previous window off the grid", `{` + head + `,"prev":30}`, ReasonGrid},
		{"average component negative", `{` + head + `,"averages":[{"h":0,"users":[1],"vectors":[[1.5,-0.5]]}]}`, ReasonAverage},
		{"average sum not 1", `{` + head + `,"averages":[{"h":0,"users":[1],"vectors":[[0.5,0.6]]}]}`, ReasonAverage},
		{"average vector empty", `{` + head + `,"averages":[{"h":0,"users":[1],"vectors":[[]]}]}`, ReasonAverage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodePartial([]byte(tc.value))
			if !errors.Is(err, ErrFormat) || ReasonOf(err) != tc.reason {
				t.Fatalf("DecodePartial(%s) = %v (reason %v), want ErrFormat for %v", tc.value, err, ReasonOf(err), tc.reason)
			}
		})
	}
	ok := `{` + head + `,"counts":[{"h":0,"g":0,"counts":[0,9007199254740992]}],"averages":[{"h":1,"users":[1],"vectors":[[0.3,0.7]]}]}`
	if _, err := DecodePartial([]byte(ok)); err != nil {
		t.Errorf("a partial with whole counts up to 2^53 and a probability vector refused: %v", err)
	}
}

// TestMergerRefusesRogueValues (issue 28 item 3): Add refuses a partial
// of this config off the window grid (on main it was added to a window no
// Next ever reaches, and the commit point stayed before it for good) and
// one counting more than Layout.MaxTotal; the caller skips it and the
// commit point passes it.
func TestMergerRefusesRogueValues(t *testing.T) {
	layout := Layout{Bins: []int{2}, Groups: []int{1}, MaxTotal: []float64{10}}
	for _, tc := range []struct {
		name   string
		rogue  *Partial
		reason Reason
	}{
		{"off the grid", &Partial{WindowStart: 30, WindowMs: 60, Partition: 0, Partitions: 1, Next: 90, Counts: []Cell{{Counts: []float64{1, 0}}}}, ReasonGrid},
		{"above the users' bound", &Partial{WindowStart: 0, WindowMs: 60, Partition: 0, Partitions: 1, Next: 60, Counts: []Cell{{Counts: []float64{6, 5}}}}, ReasonCount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMerger(1, 60, 0, layout, "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Add(tc.rogue, 0); !errors.Is(err, ErrFormat) || ReasonOf(err) != tc.reason {
				t.Fatalf("Add = %v (reason %v), want ErrFormat for %v", err, ReasonOf(err), tc.reason)
			}
			m.Skip(0)
			good := &Partial{WindowStart: 0, WindowMs: 60, Partition: 0, Partitions: 1, Next: 60, Counts: []Cell{{Counts: []float64{6, 4}}}}
			if r, err := m.Add(good, 1); err != nil || r != Added {
				t.Fatalf("the partition's own partial: %v, %v", r, err)
			}
			w, ok := m.Next()
			if !ok {
				t.Fatal("window 0 not complete")
			}
			if got := w.Counts(0, 0, nil); got[0] != 6 || got[1] != 4 {
				t.Errorf("window 0 counts %v, want [6 4]", got)
			}
			m.Released(w)
			if c := m.CommitPoint(); c != 2 || m.Pending() != 0 {
				t.Errorf("commit point %d with %d windows pending, want 2 and none", c, m.Pending())
			}
		})
	}
}

func TestCheckVector(t *testing.T) {
	for _, tc := range []struct {
		v  []float64
		ok bool
	}{
		{[]float64{0.25, 0.75}, true},
		{[]float64{1, 0}, true},
		{[]float64{0.5, 0.5 + 2e-6}, false},
		{[]float64{math.NaN(), 1}, false},
		{[]float64{math.Inf(1), 0}, false},
		{nil, false},
	} {
		if got := checkVector(tc.v); got != tc.ok {
			t.Errorf("checkVector(%v) = %v, want %v", tc.v, got, tc.ok)
		}
	}
}
