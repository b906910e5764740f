package partial

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The merge tests' config: histogram 0 has 3 bins and 2 groups, histogram
// 1 has 2 bins and 1 group; windows of 10 ms; 3 source partitions.
var testLayout = Layout{Bins: []int{3, 2}, Groups: []int{2, 1}}

const testSize = 10

// part is a Partial of window w from partition p with the given cells.
func part(w int64, p int, cells ...Cell) *Partial {
	return &Partial{V: Version, WindowStart: w, WindowMs: testSize, Partition: p, Partitions: 3, Next: w + testSize, Counts: cells}
}

// foreign is part made under another counting config.
func foreign(w int64, p int, cells ...Cell) *Partial {
	q := part(w, p, cells...)
	q.Config = "another config"
	return q
}

func cell(h, g int, counts ...float64) Cell { return Cell{H: h, G: g, Counts: counts} }

// merged renders the merged counts of every (histogram, group) of a
// window: "h0g0=[..] h0g1=[..] h1g0=[..]".
func merged(w *Window) string {
	var b []string
	for h, bins := range testLayout.Bins {
		for g := range testLayout.Groups[h] {
			c := w.Counts(h, g, nil)
			if len(c) != bins {
				return fmt.Sprintf("histogram %d: %d counts, want %d", h, len(c), bins)
			}
			b = append(b, fmt.Sprintf("h%dg%d=%v", h, g, c))
		}
	}
	return strings.Join(b, " ")
}

// TestMerger feeds Partials in log order (offset = index + the case's
// base) and after each one releases every complete window, checking which
// windows came out in which order with which sums, what Add reported, and
// the commit point at the end.
func TestMerger(t *testing.T) {
	type step struct {
		p    *Partial
		want AddResult
	}
	zero := "h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[0 0]"
	cases := []struct {
		name   string
		resume int64
		steps  []step
		// released: "start:counts" of each window released, in order.
		released []string
		commit   int64
		lagging  []int
	}{
		{
			name: "sum over partitions, one window",
			steps: []step{
				{part(0, 0, cell(0, 0, 1, 2, 3)), Added},
				{part(0, 1, cell(0, 0, 10, 0, 0), cell(1, 0, 0, 4)), Added},
				{part(0, 2, cell(0, 1, 0, 0, 7)), Added},
			},
			released: []string{"0:h0g0=[11 2 3] h0g1=[0 0 7] h1g0=[0 4]"},
			commit:   3, lagging: []int{0, 1, 2},
		},
		{
			name: "a lagging partition holds the window until it catches up",
			steps: []step{
				{part(0, 0, cell(1, 0, 1, 0)), Added},
				{part(0, 1), Added},
				{part(10, 0, cell(1, 0, 0, 1)), Added},
				{part(10, 1), Added},
				{part(20, 0), Added},
				{part(20, 1), Added},
				// partition 2 lags: nothing released so far
				{part(0, 2, cell(1, 0, 5, 0)), Added},
			},
			released: []string{"0:h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[6 0]"},
			commit:   2, // the first record of window 10
			lagging:  []int{2},
		},
		{
			name: "an idle partition (only empty partials) does not hold a window",
			steps: []step{
				{part(0, 2), Added},
				{part(10, 2), Added},
				{part(0, 0, cell(0, 1, 1, 1, 1)), Added},
				{part(0, 1, cell(0, 1, 1, 0, 0)), Added},
				{part(10, 0), Added},
				{part(10, 1), Added},
			},
			released: []string{"0:h0g0=[0 0 0] h0g1=[2 1 1] h1g0=[0 0]", "10:" + zero},
			commit:   6, lagging: []int{0, 1, 2},
		},
		{
			name: "a window no partition sent counts is released with zeros; a later record completes both",
			steps: []step{
				{part(0, 0), Added}, {part(0, 1), Added}, {part(0, 2), Added},
				{part(10, 0), Added}, {part(10, 1), Added}, {part(10, 2), Added},
			},
			released: []string{"0:" + zero, "10:" + zero},
			commit:   6, lagging: []int{0, 1, 2},
		},
		{
			name:   "windows before the resume window are skipped, their Next counts",
			resume: 10,
			steps: []step{
				{part(0, 0, cell(0, 0, 9, 9, 9)), Skipped},
				{part(0, 1, cell(0, 0, 9, 9, 9)), Skipped},
				{part(0, 2, cell(0, 0, 9, 9, 9)), Skipped},
				{part(10, 0, cell(0, 0, 1, 0, 0)), Added},
				{part(10, 1), Added},
				{part(10, 2), Added},
				{part(20, 0), Added},
			},
			released: []string{"10:h0g0=[1 0 0] h0g1=[0 0 0] h1g0=[0 0]"},
			commit:   6, lagging: []int{1, 2},
		},
		{
			name: "a second partial of a (window, partition): identical is a duplicate, different a conflict; the first is kept",
			steps: []step{
				{part(0, 0, cell(0, 0, 1, 0, 0)), Added},
				{part(0, 0, cell(0, 0, 1, 0, 0)), Duplicate},
				{part(0, 0, cell(0, 0, 5, 0, 0)), Conflict},
				{part(0, 1), Added},
				{part(0, 2), Added},
				{part(0, 2), Skipped}, // released by now
			},
			released: []string{"0:h0g0=[1 0 0] h0g1=[0 0 0] h1g0=[0 0]"},
			commit:   6, lagging: []int{0, 1, 2},
		},
		{
			name: "a partial of another counting config is not merged (nor checked against the layout); its Next completes the window",
			steps: []step{
				{part(0, 0, cell(0, 0, 1, 0, 0)), Added},
				{foreign(0, 1, cell(0, 0, 50, 0, 0), cell(7, 3, 1)), Foreign},
				{part(0, 2, cell(0, 0, 0, 2, 0)), Added},
			},
			released: []string{"0:h0g0=[1 2 0] h0g1=[0 0 0] h1g0=[0 0]"},
			commit:   3, lagging: []int{0, 1, 2},
		},
		{
			name: "partials out of window order across partitions",
			steps: []step{
				{part(0, 0, cell(1, 0, 1, 0)), Added},
				{part(10, 0, cell(1, 0, 2, 0)), Added},
				{part(20, 0, cell(1, 0, 4, 0)), Added},
				{part(0, 1), Added}, {part(0, 2), Added},
				{part(10, 2, cell(1, 0, 0, 8)), Added},
				{part(10, 1), Added},
			},
			released: []string{"0:h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[1 0]", "10:h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[2 8]"},
			commit:   2, // window 20's record
			lagging:  []int{1, 2},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := NewMerger(3, testSize, c.resume, testLayout, "")
			if err != nil {
				t.Fatal(err)
			}
			var released []string
			for i, s := range c.steps {
				got, err := m.Add(s.p, int64(i))
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got != s.want {
					t.Errorf("step %d (window %d partition %d): %v, want %v", i, s.p.WindowStart, s.p.Partition, got, s.want)
				}
				for {
					w, ok := m.Next()
					if !ok {
						break
					}
					released = append(released, fmt.Sprintf("%d:%s", w.Start, merged(w)))
					m.Released(w)
				}
			}
			if !slices.Equal(released, c.released) {
				t.Errorf("released\n%q\nwant\n%q", released, c.released)
			}
			if got := m.CommitPoint(); got != c.commit {
				t.Errorf("commit point %d, want %d", got, c.commit)
			}
			if got := m.Lagging(); !slices.Equal(got, c.lagging) {
				t.Errorf("lagging %v, want %v", got, c.lagging)
			}
		})
	}
}

// TestMergerRefuses: a Partial made for another partition count stops the
// releaser (ErrPartitions); one that does not fit the config is malformed;
// neither changes the Merger.
func TestMergerRefuses(t *testing.T) {
	cases := []struct {
		name string
		p    *Partial
		want error
	}{
		{"partition count", &Partial{WindowStart: 0, WindowMs: testSize, Partition: 0, Partitions: 4, Next: testSize}, ErrPartitions},
		{"window size", &Partial{WindowStart: 0, WindowMs: 20, Partition: 0, Partitions: 3, Next: 20}, ErrFormat},
		{"histogram", part(0, 0, cell(2, 0, 1)), ErrFormat},
		{"group", part(0, 0, cell(1, 1, 1, 1)), ErrFormat},
		{"bins", part(0, 0, cell(0, 0, 1, 1)), ErrFormat},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := NewMerger(3, testSize, 0, testLayout, "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Add(c.p, 0); !errors.Is(err, c.want) {
				t.Fatalf("Add: %v, want %v", err, c.want)
			}
			if got := m.CommitPoint(); got != -1 {
				t.Errorf("commit point %d after a refused partial, want -1", got)
			}
		})
	}
}
