package partial

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The merge tests' config: histogram 0 has 3 bins and 2 groups, histogram
// 1 has 2 bins and 1 group; windows of 10 ms; 3 source partitions.
var testLayout = Layout{Bins: []int{3, 2}, Groups: []int{2, 1}}

const testSize = 10

// part is a Partial of window w from partition p with the given cells.
func part(w int64, p int, cells ...Cell) *Partial {
	return &Partial{V: Version, WindowStart: w, WindowMs: testSize, Partition: p, Partitions: 3, Next: w + testSize, Counts: cells}
}

// sized is part made with windows of size ms.
func sized(w int64, p int, size int64, cells ...Cell) *Partial {
	q := part(w, p, cells...)
	q.WindowMs, q.Next = size, w+size
	return q
}

// counted is part made for n input partitions.
func counted(w int64, p, n int, cells ...Cell) *Partial {
	q := part(w, p, cells...)
	q.Partitions = n
	return q
}

// foreign is part made under another counting config.
func foreign(w int64, p int, cells ...Cell) *Partial {
	q := part(w, p, cells...)
	q.Config = "another config"
	return q
}

func cell(h, g int, counts ...float64) Cell { return Cell{H: h, G: g, Counts: counts} }

// idle is an Idle record of partition p, whose Next is next.
func idle(p int, next int64, idle bool) *Idle {
	return &Idle{V: Version, Partition: p, Partitions: 3, WindowMs: testSize, Next: next, Idle: idle}
}

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
		want AddResult // of Add, or of SetIdle (Added by default)
		idle *Idle     // instead of p: an Idle record
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
				{p: part(0, 0, cell(0, 0, 1, 2, 3)), want: Added},
				{p: part(0, 1, cell(0, 0, 10, 0, 0), cell(1, 0, 0, 4)), want: Added},
				{p: part(0, 2, cell(0, 1, 0, 0, 7)), want: Added},
			},
			released: []string{"0:h0g0=[11 2 3] h0g1=[0 0 7] h1g0=[0 4]"},
			commit:   3, lagging: []int{0, 1, 2},
		},
		{
			name: "a lagging partition holds the window until it catches up",
			steps: []step{
				{p: part(0, 0, cell(1, 0, 1, 0)), want: Added},
				{p: part(0, 1), want: Added},
				{p: part(10, 0, cell(1, 0, 0, 1)), want: Added},
				{p: part(10, 1), want: Added},
				{p: part(20, 0), want: Added},
				{p: part(20, 1), want: Added},
				// partition 2 lags: nothing released so far
				{p: part(0, 2, cell(1, 0, 5, 0)), want: Added},
			},
			released: []string{"0:h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[6 0]"},
			commit:   2, // the first record of window 10
			lagging:  []int{2},
		},
		{
			name: "an idle partition (only empty partials) does not hold a window",
			steps: []step{
				{p: part(0, 2), want: Added},
				{p: part(10, 2), want: Added},
				{p: part(0, 0, cell(0, 1, 1, 1, 1)), want: Added},
				{p: part(0, 1, cell(0, 1, 1, 0, 0)), want: Added},
				{p: part(10, 0), want: Added},
				{p: part(10, 1), want: Added},
			},
			released: []string{"0:h0g0=[0 0 0] h0g1=[2 1 1] h1g0=[0 0]", "10:" + zero},
			commit:   6, lagging: []int{0, 1, 2},
		},
		{
			name: "a window no partition sent counts is released with zeros; a later record completes both",
			steps: []step{
				{p: part(0, 0), want: Added}, {p: part(0, 1), want: Added}, {p: part(0, 2), want: Added},
				{p: part(10, 0), want: Added}, {p: part(10, 1), want: Added}, {p: part(10, 2), want: Added},
			},
			released: []string{"0:" + zero, "10:" + zero},
			commit:   6, lagging: []int{0, 1, 2},
		},
		{
			name:   "windows before the resume window are skipped, their Next counts",
			resume: 10,
			steps: []step{
				{p: part(0, 0, cell(0, 0, 9, 9, 9)), want: Skipped},
				{p: part(0, 1, cell(0, 0, 9, 9, 9)), want: Skipped},
				{p: part(0, 2, cell(0, 0, 9, 9, 9)), want: Skipped},
				{p: part(10, 0, cell(0, 0, 1, 0, 0)), want: Added},
				{p: part(10, 1), want: Added},
				{p: part(10, 2), want: Added},
				{p: part(20, 0), want: Added},
			},
			released: []string{"10:h0g0=[1 0 0] h0g1=[0 0 0] h1g0=[0 0]"},
			commit:   6, lagging: []int{1, 2},
		},
		{
			name: "a second partial of a (window, partition): identical is a duplicate, different a conflict; the first is kept",
			steps: []step{
				{p: part(0, 0, cell(0, 0, 1, 0, 0)), want: Added},
				{p: part(0, 0, cell(0, 0, 1, 0, 0)), want: Duplicate},
				{p: part(0, 0, cell(0, 0, 5, 0, 0)), want: Conflict},
				{p: part(0, 1), want: Added},
				{p: part(0, 2), want: Added},
				{p: part(0, 2), want: Skipped}, // released by now
			},
			released: []string{"0:h0g0=[1 0 0] h0g1=[0 0 0] h1g0=[0 0]"},
			commit:   6, lagging: []int{0, 1, 2},
		},
		{
			name: "a partial of another counting config is not merged (nor checked against the layout); its Next completes the window",
			steps: []step{
				{p: part(0, 0, cell(0, 0, 1, 0, 0)), want: Added},
				{p: foreign(0, 1, cell(0, 0, 50, 0, 0), cell(7, 3, 1)), want: Foreign},
				{p: part(0, 2, cell(0, 0, 0, 2, 0)), want: Added},
			},
			released: []string{"0:h0g0=[1 2 0] h0g1=[0 0 0] h1g0=[0 0]"},
			commit:   3, lagging: []int{0, 1, 2},
		},
		{
			name: "partials out of window order across partitions",
			steps: []step{
				{p: part(0, 0, cell(1, 0, 1, 0)), want: Added},
				{p: part(10, 0, cell(1, 0, 2, 0)), want: Added},
				{p: part(20, 0, cell(1, 0, 4, 0)), want: Added},
				{p: part(0, 1), want: Added}, {p: part(0, 2), want: Added},
				{p: part(10, 2, cell(1, 0, 0, 8)), want: Added},
				{p: part(10, 1), want: Added},
			},
			released: []string{"0:h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[1 0]", "10:h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[2 8]"},
			commit:   2, // window 20's record
			lagging:  []int{1, 2},
		},
		{
			name: "an idle partition does not hold windows; active again, it holds them and its partials of windows released meanwhile are late",
			steps: []step{
				{p: part(0, 0), want: Added}, {p: part(0, 1), want: Added},
				{idle: idle(2, 0, true)},
				{p: part(10, 0, cell(1, 0, 1, 0)), want: Added}, {p: part(10, 1), want: Added},
				{idle: idle(2, 0, false)}, // active again, behind
				{p: part(20, 0), want: Added}, {p: part(20, 1), want: Added},
				{p: part(0, 2, cell(1, 0, 0, 5)), want: Late}, // window 0 is out
				{p: part(10, 2), want: Late},
				{p: part(20, 2, cell(1, 0, 3, 0)), want: Added},
			},
			released: []string{"0:" + zero, "10:h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[1 0]", "20:h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[3 0]"},
			commit:   11, lagging: []int{0, 1, 2},
		},
		{
			name: "a foreign partial after its window's release is skipped, not late",
			steps: []step{
				{p: part(0, 0), want: Added}, {p: part(0, 1), want: Added},
				{idle: idle(2, 0, true)},
				{p: foreign(0, 2, cell(0, 0, 4, 0, 0)), want: Skipped},
			},
			released: []string{"0:" + zero},
			commit:   2, lagging: []int{0, 1},
		},
		{
			name: "every partition idle: windows up to the largest Next",
			steps: []step{
				{p: part(0, 0), want: Added}, {p: part(10, 0, cell(1, 0, 2, 0)), want: Added},
				{idle: idle(1, 0, true)}, {idle: idle(2, 0, true)},
				// partition 0 is live, with Next 20: windows 0 and 10 out
				{idle: idle(0, 20, true)},
				// every partition idle: nothing past the largest Next, 20
			},
			released: []string{"0:" + zero, "10:h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[2 0]"},
			commit:   2, // partition 1's Idle record, the oldest of an idle partition
			lagging:  nil,
		},
		{
			name: "every partition idle, one reporting Next 20 in its Idle record after its partials: windows 0 and 10",
			steps: []step{
				{idle: idle(1, 0, true)}, {idle: idle(2, 0, true)},
				{p: part(0, 0), want: Added}, {p: part(10, 0), want: Added},
				{idle: idle(0, 20, true)},
			},
			released: []string{"0:" + zero, "10:" + zero},
			commit:   0, lagging: nil,
		},
		{
			name: "the commit point stays at the latest Idle record of an idle partition, and moves with the next one",
			steps: []step{
				{idle: idle(2, 0, true)},
				{p: part(0, 0), want: Added}, {p: part(0, 1), want: Added},
				{p: part(10, 0), want: Added}, {p: part(10, 1), want: Added},
				{idle: idle(2, 0, true)}, // a minute later, still idle
				{p: part(20, 0), want: Added}, {p: part(20, 1), want: Added},
			},
			released: []string{"0:" + zero, "10:" + zero, "20:" + zero},
			commit:   5, lagging: []int{0, 1},
		},
		{
			name: "a partition active again without its Idle record of idle (read from a later commit point) holds as any other",
			steps: []step{
				{idle: idle(2, 0, false)},
				{p: part(0, 0), want: Added}, {p: part(0, 1), want: Added},
			},
			commit: 1, lagging: []int{2}, // window 0 waits for partition 2

		},
		// Issue 22 item 2 (poison partial): a record of another window
		// size or partition count used to stop the releaser (an error);
		// it is skipped as Foreign and counts for nothing.
		{
			name: "a partial of another window size is foreign, not present, its Next not taken; the partition's own partial completes the window",
			steps: []step{
				{p: part(0, 0, cell(0, 0, 1, 0, 0)), want: Added}, {p: part(0, 1), want: Added},
				{p: sized(0, 2, 20, cell(0, 0, 9, 9, 9)), want: Foreign},
				// not a gap of window 0 or 10 (Next 20 on another grid): nothing released yet
				{p: part(10, 0), want: Added}, {p: part(10, 1), want: Added},
				{p: part(0, 2, cell(0, 0, 0, 2, 0)), want: Added},
			},
			released: []string{"0:h0g0=[1 2 0] h0g1=[0 0 0] h1g0=[0 0]"},
			commit:   3, lagging: []int{2},
		},
		{
			name: "a partial of another partition count is foreign and counts for nothing; the commit point passes it",
			steps: []step{
				{p: part(0, 0), want: Added}, {p: part(0, 1), want: Added},
				{p: counted(0, 2, 4, cell(0, 0, 9, 9, 9)), want: Foreign},
				{p: counted(0, 3, 4), want: Foreign}, // a partition this config does not have
				{p: part(0, 2, cell(1, 0, 1, 1)), want: Added},
				{p: part(10, 0), want: Added}, {p: part(10, 1), want: Added}, {p: part(10, 2), want: Added},
				{p: counted(10, 0, 4, cell(0, 0, 9, 9, 9)), want: Foreign},
			},
			released: []string{"0:h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[1 1]", "10:" + zero},
			commit:   9, lagging: []int{0, 1, 2},
		},
		{
			name: "idle records of another window size or partition count are foreign: the partition still holds the window",
			steps: []step{
				{idle: &Idle{V: Version, Partition: 2, Partitions: 3, WindowMs: 20, Next: 0, Idle: true}, want: Foreign},
				{idle: &Idle{V: Version, Partition: 2, Partitions: 4, WindowMs: testSize, Next: 0, Idle: true}, want: Foreign},
				{p: part(0, 0), want: Added}, {p: part(0, 1), want: Added},
			},
			commit: 2, lagging: []int{2},
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
				if s.idle != nil {
					if got := m.SetIdle(s.idle, int64(i)); got != s.want {
						t.Errorf("step %d (idle record of partition %d): %v, want %v", i, s.idle.Partition, got, s.want)
					}
				} else if got, err := m.Add(s.p, int64(i)); err != nil {
					t.Fatalf("step %d: %v", i, err)
				} else if got != s.want {
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

// TestMergerRefuses: a Partial of the releaser's counting config whose
// cells do not fit the config is malformed, and changes nothing.
func TestMergerRefuses(t *testing.T) {
	cases := []struct {
		name string
		p    *Partial
	}{
		{"histogram", part(0, 0, cell(2, 0, 1))},
		{"group", part(0, 0, cell(1, 1, 1, 1))},
		{"bins", part(0, 0, cell(0, 0, 1, 1))},
		{"next", &Partial{WindowStart: 0, WindowMs: testSize, Partition: 0, Partitions: 3, Next: 2 * testSize}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := NewMerger(3, testSize, 0, testLayout, "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Add(c.p, 0); !errors.Is(err, ErrFormat) {
				t.Fatalf("Add: %v, want %v", err, ErrFormat)
			}
			if got := m.CommitPoint(); got != -1 || m.Pending() != 0 {
				t.Errorf("commit point %d, %d pending after a refused partial, want -1, 0", got, m.Pending())
			}
		})
	}
}

// TestMergerIdleGrace: a window only idle partitions hold is handed out
// once it has been so for the grace; a partition active again within it
// holds the window as any other, and the grace starts over once the
// window is held by idle partitions only again.
func TestMergerIdleGrace(t *testing.T) {
	const grace = time.Second
	now := time.Unix(1000, 0)
	m, err := NewMerger(3, testSize, 0, testLayout, "")
	if err != nil {
		t.Fatal(err)
	}
	m.SetIdleClock(grace, 0, func() time.Time { return now })
	off := int64(0)
	feed := func(p *Partial, d *Idle) {
		t.Helper()
		if d != nil {
			if r := m.SetIdle(d, off); r != Added {
				t.Fatal(r)
			}
		} else if _, err := m.Add(p, off); err != nil {
			t.Fatal(err)
		}
		off++
	}
	expect := func(step string, out bool, wait time.Duration, waiting bool) {
		t.Helper()
		if _, ok := m.Next(); ok != out {
			t.Fatalf("%s: Next handed a window out: %v, want %v", step, ok, out)
		}
		if d, ok := m.IdleWait(); ok != waiting || d != wait {
			t.Fatalf("%s: IdleWait %v, %v; want %v, %v", step, d, ok, wait, waiting)
		}
	}
	feed(nil, idle(1, 0, true))
	feed(nil, idle(2, 0, true))
	feed(part(0, 0, cell(1, 0, 1, 0)), nil)
	expect("partition 0 passed window 0, 1 and 2 idle", false, grace, true)
	now = now.Add(grace / 2)
	expect("half the grace", false, grace/2, true)
	feed(nil, idle(1, 0, false)) // partition 1 read events after its pause
	expect("partition 1 active again", false, 0, false)
	now = now.Add(grace)
	expect("partition 1 active again, past the first grace", false, 0, false)
	feed(part(0, 1, cell(1, 0, 0, 2)), nil)
	expect("partition 1 passed window 0: a new grace", false, grace, true)
	now = now.Add(grace)
	w, ok := m.Next()
	if !ok || merged(w) != "h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[1 2]" {
		t.Fatalf("after the grace: %v", ok)
	}
	m.Released(w)
	expect("window 10: held by partitions 0 and 1", false, 0, false)
}

// TestMergerIdleBacklog: a backlog of windows the partitions not idle
// passed at once waits one grace in all, not one per window.
func TestMergerIdleBacklog(t *testing.T) {
	const grace = time.Second
	now := time.Unix(1000, 0)
	m, err := NewMerger(3, testSize, 0, testLayout, "")
	if err != nil {
		t.Fatal(err)
	}
	m.SetIdleClock(grace, 0, func() time.Time { return now })
	for i, d := range []*Idle{idle(1, 0, true), idle(2, 0, true)} {
		if r := m.SetIdle(d, int64(i)); r != Added {
			t.Fatal(r)
		}
	}
	for w := int64(0); w < 100; w++ {
		if _, err := m.Add(part(w*testSize, 0), 2+w); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := m.Next(); ok {
		t.Fatal("a window handed out before the grace")
	}
	now = now.Add(grace)
	n := 0
	for w, ok := m.Next(); ok; w, ok = m.Next() {
		m.Released(w)
		n++
	}
	if n != 100 {
		t.Errorf("%d windows handed out one grace after partition 0 passed 100, want 100", n)
	}
	if _, ok := m.IdleWait(); ok {
		t.Error("a window still waits")
	}
}

// TestMergerIdleLease: an Idle record counts for the lease; a partition
// whose record is older holds windows again, and one written again in time
// keeps it idle.
func TestMergerIdleLease(t *testing.T) {
	const lease = 3 * time.Second
	now := time.Unix(1000, 0)
	m, err := NewMerger(3, testSize, 0, testLayout, "")
	if err != nil {
		t.Fatal(err)
	}
	m.SetIdleClock(0, lease, func() time.Time { return now })
	off := int64(0)
	setIdle := func(p int) {
		t.Helper()
		if r := m.SetIdle(idle(p, 0, true), off); r != Added {
			t.Fatal(r)
		}
		off++
	}
	setIdle(1)
	setIdle(2)
	now = now.Add(2 * time.Second)
	setIdle(2) // partition 2's bounder writes it again; partition 1's is gone
	if _, err := m.Add(part(0, 0), off); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Next(); !ok || !slices.Equal(m.Idle(), []int{1, 2}) {
		t.Fatalf("within the lease: window not handed out, or idle %v", m.Idle())
	}
	now = now.Add(2 * time.Second) // partition 1's record is 4s old
	if _, ok := m.Next(); ok {
		t.Fatal("window handed out past partition 1's lease")
	}
	if got := m.Idle(); !slices.Equal(got, []int{2}) {
		t.Errorf("idle %v, want [2]", got)
	}
	if got := m.Lagging(); !slices.Equal(got, []int{1}) {
		t.Errorf("lagging %v, want [1]", got)
	}
}

// TestMergerGaps: a window is complete only when every source partition's
// Partial of it was read. A partition that passed a window without one —
// its Partial lost on the partials topic, or its bounder started counting
// after the window — holds it, and Gaps says which (issue 22, item 1: the
// merger used to release such a window without the partition's counts,
// all zeros when every partition had the hole, charged in full).
func TestMergerGaps(t *testing.T) {
	first := func(q *Partial, f int64, prev *int64) *Partial { q.First, q.Prev = f, prev; return q }
	at := func(v int64) *int64 { return &v }
	type rec struct {
		p    *Partial
		idle *Idle
	}
	cases := []struct {
		name     string
		resume   int64
		recs     []rec
		released []int64 // window starts released, in order
		gaps     []Gap   // the gaps of the window held at the end
	}{
		{
			name:     "every partition sends window 10 and none window 0 (a hole in all: once released as uniform zeros)",
			recs:     []rec{{p: part(10, 0)}, {p: part(10, 1)}, {p: part(10, 2)}},
			gaps:     []Gap{{Window: 0, Partition: 0, Next: 20}, {Window: 0, Partition: 1, Next: 20}, {Window: 0, Partition: 2, Next: 20}},
			released: nil,
		},
		{
			name:     "one partition's partial of window 0 lost: window 0 held, nothing after it released",
			recs:     []rec{{p: part(0, 0)}, {p: part(0, 1)}, {p: part(10, 0)}, {p: part(10, 1)}, {p: part(10, 2)}},
			gaps:     []Gap{{Window: 0, Partition: 2, Next: 20}},
			released: nil,
		},
		{
			name: "a partition whose bounder started at window 20 (first partial, no previous window): held, started after",
			recs: []rec{{p: part(0, 0)}, {p: part(0, 1)}, {p: first(part(20, 2), 20, nil)},
				{p: part(10, 0)}, {p: part(10, 1)}},
			gaps:     []Gap{{Window: 0, Partition: 2, Next: 30, First: 20}},
			released: nil,
		},
		{
			name: "every partition starting at the resume window: released from there",
			recs: []rec{{p: first(part(0, 0), 0, nil)}, {p: first(part(0, 1), 0, nil)}, {p: first(part(0, 2), 0, nil)},
				{p: first(part(10, 0), 0, at(0))}, {p: first(part(10, 1), 0, at(0))}, {p: first(part(10, 2), 0, at(0))}},
			released: []int64{0, 10},
		},
		{
			name:   "a releaser restarted at window 10 reads a partition's window 20 first (its window 10 lost): held",
			resume: 10,
			recs:   []rec{{p: part(10, 0)}, {p: part(10, 1)}, {p: first(part(20, 2), 0, at(10))}},
			gaps:   []Gap{{Window: 10, Partition: 2, Next: 30}},
		},
		{
			name:     "an idle partition whose Idle record says it passed window 0 without its partial: held",
			recs:     []rec{{p: part(0, 0)}, {p: part(0, 1)}, {idle: idle(2, 10, true)}},
			gaps:     []Gap{{Window: 0, Partition: 2, Next: 10}},
			released: nil,
		},
		{
			name:     "an idle partition that has not passed the window does not hold it (window.watermark event)",
			recs:     []rec{{idle: idle(2, 0, true)}, {p: part(0, 0)}, {p: part(0, 1)}},
			released: []int64{0},
		},
		{
			name:     "a foreign partial counts as its partition's partial: released without its counts, no gap",
			recs:     []rec{{p: part(0, 0)}, {p: part(0, 1)}, {p: foreign(0, 2)}},
			released: []int64{0},
		},
		{
			name:     "partials of an older bounder (no first, no previous window) in sequence: released",
			recs:     []rec{{p: part(0, 0)}, {p: part(0, 1)}, {p: part(0, 2)}, {p: part(10, 2)}, {p: part(10, 1)}, {p: part(10, 0)}},
			released: []int64{0, 10},
		},
		{
			name:     "a partition never heard of holds, with no gap",
			recs:     []rec{{p: part(0, 0)}, {p: part(0, 1)}, {p: part(10, 0)}},
			released: nil,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMerger(3, testSize, tc.resume, testLayout, "")
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for i, r := range tc.recs {
				if r.idle != nil {
					if got := m.SetIdle(r.idle, int64(i)); got != Added {
						t.Fatal(got)
					}
				} else if _, err := m.Add(r.p, int64(i)); err != nil {
					t.Fatal(err)
				}
				for {
					w, ok := m.Next()
					if !ok {
						break
					}
					got = append(got, w.Start)
					m.Released(w)
				}
			}
			if !slices.Equal(got, tc.released) {
				t.Errorf("released %v, want %v", got, tc.released)
			}
			if g := m.Gaps(); !slices.Equal(g, tc.gaps) {
				t.Errorf("gaps %+v, want %+v", g, tc.gaps)
			}
			for _, g := range m.Gaps() {
				if want := g.First > g.Window; g.StartedAfter() != want {
					t.Errorf("gap %+v: StartedAfter %v", g, g.StartedAfter())
				}
			}
		})
	}
}

// TestMergerCoverage: a window's coverage leaves out the partitions whose
// Partial was made under another counting config, and only those (an idle
// partition that sent none is included: whether a partition was idle
// depends on its events); a fingerprint given to AlsoMerge is merged as
// the Merger's own.
func TestMergerCoverage(t *testing.T) {
	m, err := NewMerger(3, testSize, 0, testLayout, "")
	if err != nil {
		t.Fatal(err)
	}
	legacy := part(10, 2, cell(1, 0, 4, 0))
	legacy.Config = "legacy"
	m.AlsoMerge("legacy")
	recs := []*Partial{part(0, 0), foreign(0, 1, cell(1, 0, 9, 9)), part(10, 0), part(10, 1, cell(1, 0, 1, 0)), legacy}
	if r := m.SetIdle(idle(2, 0, true), 0); r != Added {
		t.Fatal(r)
	}
	var got []string
	for i, p := range recs {
		if _, err := m.Add(p, int64(i+1)*100); err != nil {
			t.Fatal(err)
		}
		for w, ok := m.Next(); ok; w, ok = m.Next() {
			in, n := w.Included()
			got = append(got, fmt.Sprintf("%d:%d/%d %s", w.Start, in, n, merged(w)))
			m.Released(w)
		}
		if i == 1 { // window 0 is out: partition 2 is active again
			if r := m.SetIdle(idle(2, 10, false), 250); r != Added {
				t.Fatal(r)
			}
		}
	}
	want := []string{"0:2/3 h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[0 0]", "10:3/3 h0g0=[0 0 0] h0g1=[0 0 0] h1g0=[5 0]"}
	if !slices.Equal(got, want) {
		t.Errorf("windows\n%q\nwant\n%q", got, want)
	}
}

// TestMergerSumsLimit: with the running sums limited to a few windows, a
// partition lagging far behind the others makes the windows past the
// limit keep only presence and digests; each is read again (Reread) once
// it is next, and every window comes out with the same counts as without
// a limit, while no more than the limit's windows ever hold sums (issue
// 22 item 2: pending memory bounded while one partition lags).
func TestMergerSumsLimit(t *testing.T) {
	// The log: partitions 0 and 1 emit windows 0..9, then partition 2
	// catches up; a duplicate and an idle record of no effect on the way.
	var log []*Partial
	for w := int64(0); w < 10; w++ {
		for p := range 2 {
			log = append(log, part(w*testSize, p, cell(0, p, float64(w+1), 0, float64(p)), cell(1, 0, 1, float64(w))))
		}
		if w == 4 {
			log = append(log, part(w*testSize, 1, cell(0, 1, float64(w+1), 0, 1), cell(1, 0, 1, float64(w)))) // duplicate
		}
	}
	for w := int64(0); w < 10; w++ {
		log = append(log, part(w*testSize, 2, cell(0, 0, 0, float64(w), 0)))
	}
	run := func(limit int) (out []string, maxSums int, rereads int) {
		m, err := NewMerger(3, testSize, 0, testLayout, "")
		if err != nil {
			t.Fatal(err)
		}
		if limit > 0 {
			m.SetSumsLimit(limit)
		}
		for pos := 0; pos < len(log); {
			if _, err := m.Add(log[pos], int64(pos)); err != nil {
				t.Fatal(err)
			}
			pos++
			for w, ok := m.Next(); ok; w, ok = m.Next() {
				out = append(out, fmt.Sprintf("%d:%s", w.Start, merged(w)))
				m.Released(w)
			}
			if o, ok := m.Reread(); ok {
				pos = int(o)
				rereads++
			}
			n := 0
			for _, w := range m.pending {
				if w.sums != nil {
					n++
				}
			}
			maxSums = max(maxSums, n)
		}
		return out, maxSums, rereads
	}
	want, _, _ := run(0)
	if len(want) != 10 {
		t.Fatalf("without a limit: %d windows released, want 10", len(want))
	}
	got, maxSums, rereads := run(2)
	if !slices.Equal(got, want) {
		t.Errorf("with a limit of 2 windows\n%q\nwant\n%q", got, want)
	}
	if maxSums > 2 || rereads == 0 {
		t.Errorf("at most %d windows held sums (limit 2), %d re-reads (want some)", maxSums, rereads)
	}
}

// TestMergerDropped (issue 23 item 3): the window-bound drops of a
// window's Partials are summed per histogram (for the operator's drop
// share), also for a Partial past the sums limit once re-read; a duplicate
// adds nothing.
func TestMergerDropped(t *testing.T) {
	withDrops := func(p *Partial, d ...DropCell) *Partial { p.Dropped = d; return p }
	log := []*Partial{
		withDrops(part(0, 0, cell(0, 0, 1, 0, 0)), DropCell{H: 0, N: 5}, DropCell{H: 1, N: 2}),
		withDrops(part(0, 1), DropCell{H: 0, N: 7}),
		withDrops(part(0, 1), DropCell{H: 0, N: 7}), // duplicate
		part(10, 0), part(10, 1), part(20, 0), part(20, 1),
		withDrops(part(20, 2), DropCell{H: 1, N: 9}),
		part(0, 2), part(10, 2),
	}
	for _, limit := range []int{0, 1} {
		m, err := NewMerger(3, testSize, 0, testLayout, "")
		if err != nil {
			t.Fatal(err)
		}
		if limit > 0 {
			m.SetSumsLimit(limit)
		}
		got := map[int64][2]int64{}
		for pos := 0; pos < len(log); {
			if _, err := m.Add(log[pos], int64(pos)); err != nil {
				t.Fatal(err)
			}
			pos++
			for w, ok := m.Next(); ok; w, ok = m.Next() {
				got[w.Start] = [2]int64{w.Dropped(0), w.Dropped(1)}
				m.Released(w)
			}
			if o, ok := m.Reread(); ok {
				pos = int(o)
			}
		}
		want := map[int64][2]int64{0: {12, 2}, 10: {0, 0}, 20: {0, 9}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("sums limit %d: dropped per window %v, want %v", limit, got, want)
		}
	}
}
