package aggregate

import (
	"fmt"
	"testing"
	"time"
)

// TestEventIndex: an Aggregator for a subset of the decoder's histograms
// (one window size, pipeline's per-histogram windows) reads each of its
// histograms' parts at the histogram's own index in the event, and bounds
// per window of its own size.
func TestEventIndex(t *testing.T) {
	full := testSpec()
	// Only "devices" (event index 1), in 3-minute windows.
	spec := Spec{Histograms: full.Histograms[1:], EventIndex: []int{1}, MaxEventsPerUser: 2, MaxGroupsPerUser: 1, WindowSize: 3 * time.Minute}
	a := mustNew(t, spec)
	// User 9: desktop in each of the three base minutes of [0, 3m); at most
	// 2 count in the 3-minute window. User 10: mobile once.
	for _, ms := range []int64{0, 60000, 120000} {
		ev := event(9, 2, 2, 1)
		ev.TimeMs = ms
		a.Add(0, ev)
	}
	ev := event(10, 0, 0, 0)
	a.Add(0, ev)
	wc, err := a.Close(0)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Release()
	if got := fmt.Sprint(wc.Counts(0, 0, nil)); got != "[1 2]" {
		t.Fatalf("devices counts %s, want [1 2] (read at event index 1, 2 per user per 3m window)", got)
	}
	if wc.End() != 180000 {
		t.Fatalf("window end %d, want 180000", wc.End())
	}
	if _, err := New(Spec{Histograms: full.Histograms, EventIndex: []int{1}, MaxEventsPerUser: 1, MaxGroupsPerUser: 1, WindowSize: time.Minute}); err == nil {
		t.Fatal("New accepted 1 event index for 2 histograms")
	}
}

// TestEventIndexGroupRank: a grouped histogram counted by an Aggregator of
// its own ranks a user's groups by GroupHash with the histogram's index in
// the event (its config index), as an Aggregator of all histograms would:
// the selection does not depend on how the pipeline splits histograms by
// window size.
func TestEventIndexGroupRank(t *testing.T) {
	pages := testSpec().Histograms[0] // 3 groups
	spec := Spec{Histograms: []HistSpec{pages}, EventIndex: []int{2}, MaxEventsPerUser: 1, MaxGroupsPerUser: 1, WindowSize: time.Minute}
	first := func(user uint64, hist int) int {
		if GroupHash(user, hist, 0) < GroupHash(user, hist, 1) {
			return 0
		}
		return 1
	}
	// A user whose first group differs between histogram indices 0 and 2.
	user := uint64(1)
	for ; first(user, 0) == first(user, 2); user++ {
	}
	a := mustNew(t, spec)
	for g := range int32(2) {
		ev := event(user, -1, -1, -1)
		ev.Bins = []int32{-1, -1, 0}
		ev.Groups = []int32{-1, -1, g}
		ev.TimeMs = int64(g)
		a.Add(0, ev)
	}
	wc, err := a.Close(0)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Release()
	want := first(user, 2)
	if got := wc.Counts(0, want, nil)[0]; got != 1 {
		t.Fatalf("user %d: group %d (first by GroupHash at index 2) counted %v, want 1; group %d: %v", user, want, got, 1-want, wc.Counts(0, 1-want, nil))
	}
}
