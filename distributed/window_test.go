package distributed

import (
	"errors"
	"testing"

	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/partial"
)

// TestCheckProgressWindow: a partition's progress of another window size
// is refused; one of an older bounder (no window size) only when its
// windows are off this size's grid.
func TestCheckProgressWindow(t *testing.T) {
	const size = 60_000
	cases := []struct {
		name string
		pr   partial.Progress
		ok   bool
	}{
		{"same size", partial.Progress{WindowMs: size, Next: 10 * size, First: size}, true},
		{"twice the size", partial.Progress{WindowMs: 2 * size, Next: 20 * size, First: 2 * size}, false},
		{"half the size", partial.Progress{WindowMs: size / 2, Next: 10 * size, First: size}, false},
		{"older bounder on the grid", partial.Progress{Next: 10 * size, First: size}, true},
		{"older bounder off the grid", partial.Progress{Next: 10*size + size/2, First: size}, false},
		{"older bounder, first window off the grid", partial.Progress{Next: 10 * size, First: size / 2}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkProgressWindow(&c.pr, size)
			if c.ok != (err == nil) || err != nil && !errors.Is(err, node.ErrConfigChanged) {
				t.Fatalf("%v, want ok %v (node.ErrConfigChanged otherwise)", err, c.ok)
			}
		})
	}
}

// TestCheckProgressPeriod: a partition's progress of another budget period
// is refused; one of an older bounder (no period) is accepted.
func TestCheckProgressPeriod(t *testing.T) {
	const day = 86_400_000
	cases := []struct {
		name string
		pr   partial.Progress
		ok   bool
	}{
		{"same period", partial.Progress{PeriodMs: day}, true},
		{"half the period", partial.Progress{PeriodMs: day / 2}, false},
		{"a week", partial.Progress{PeriodMs: 7 * day}, false},
		{"older bounder", partial.Progress{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkProgressPeriod(&c.pr, day)
			if c.ok != (err == nil) || err != nil && !errors.Is(err, node.ErrConfigChanged) {
				t.Fatalf("%v, want ok %v (node.ErrConfigChanged otherwise)", err, c.ok)
			}
		})
	}
}
