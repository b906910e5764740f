package distributed

import (
	"fmt"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/partial"
)

// TestPendingAveragesUnderSumsLimit (issue 28 item 4): an average
// histogram's kept users are held only for the windows within the
// merger's sums limit. With the limit at one window and partition 1
// lagging four windows behind partition 0, at most one window's cells are
// held (on main: every pending window's, 4 here); once partition 1 catches
// up, each next window is read again (Reread) and its mean comes out as
// with no limit.
func TestPendingAveragesUnderSumsLimit(t *testing.T) {
	cfg := &config.Config{Histograms: []config.Histogram{{Name: "v", Kind: config.KindAverage, Bins: []string{"a", "b"}, Average: config.Average{Users: 4}}}}
	s := &stage{Node: &node.Node{Cfg: cfg, CountingConfig: "c"}}
	const parts, windows, size = 2, 4, 60
	layout := partial.Layout{Bins: []int{2}, Groups: []int{1}}
	// The log: partition 0's partials of every window, then partition 1's.
	var log []*partial.Partial
	for _, p := range []int{0, 1} {
		for w := range windows {
			start := int64(w * size)
			v := float64(w+p) / 10
			log = append(log, &partial.Partial{WindowStart: start, WindowMs: size, Partition: p, Partitions: parts, Next: start + size, Config: "c",
				Averages: []partial.AverageCell{{H: 0, Users: []uint64{uint64(10*p + 1)}, Vectors: [][]float64{{v, 1 - v}}}}})
		}
	}
	run := func(limit int) (means [][]float64, most int) {
		m, err := partial.NewMerger(parts, size, 0, layout, "c")
		if err != nil {
			t.Fatal(err)
		}
		m.SetSumsLimit(limit)
		pa := s.newPendingAverages()
		for off := 0; off < len(log); {
			p := log[off]
			res, err := m.Add(p, int64(off))
			if err != nil {
				t.Fatal(err)
			}
			pa.note(m, p, res)
			most = max(most, len(pa.byWin))
			off++
			for {
				w, ok := m.Next()
				if !ok {
					break
				}
				means = append(means, pa.means(w).Mean(0, nil))
				m.Released(w)
				pa.released(w.Start)
			}
			if from, ok := m.Reread(); ok {
				off = int(from)
			}
		}
		return means, most
	}
	want, _ := run(windows)
	got, most := run(1)
	if len(got) != windows || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("means with a one-window limit %v, want %v", got, want)
	}
	if most > 1 {
		t.Errorf("average cells held for %d windows at once, want at most the sums limit, 1", most)
	}
}
