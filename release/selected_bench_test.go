package release_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dpstage/stage/internal/lib/cputime"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/release"
)

// BenchmarkRecordSelecting1e6Keys is the releaser's part of closing a
// window of a selecting histogram with 1,000,000 distinct keys of which
// 1 % pass (10,000 keys of 100,000 users, far above the threshold; the rest
// of 1 user): the selection's draws over every key and the 10,000
// releases, recorded in the ledger. The aggregator's part of the close is
// aggregate's BenchmarkKeyedClose.
func BenchmarkRecordSelecting1e6Keys(b *testing.B) {
	const n, pass = 1_000_000, 10_000
	kc := keyedCounts{keys: make([]string, n), users: make([]int64, n), counts: make([][]float64, n)}
	for i := range n {
		kc.keys[i] = fmt.Sprintf("key-%07d", i)
		kc.users[i], kc.counts[i] = 1, []float64{1, 0}
		if i%(n/pass) == 0 {
			kc.users[i], kc.counts[i] = 100_000, []float64{60_000, 40_000}
		}
	}
	cfg := selectConfig(b, b.TempDir(), "")
	led, err := ledger.Open(cfg.State.Dir)
	if err != nil {
		b.Fatal(err)
	}
	defer led.Close()
	f := newSelFixture(b, cfg, led, 1)
	b.ResetTimer()
	var selected int
	var cpu time.Duration
	for i := range b.N {
		c0 := cputime.Now()
		units, err := f.rel.Record(int64(i)*minute, kc, nil)
		cpu += cputime.Now() - c0
		if err != nil {
			b.Fatal(err)
		}
		for _, u := range units {
			if u.Histogram == "campaigns" {
				selected = len(release.ReleaseMessages(u))
			}
		}
	}
	b.ReportMetric(float64(selected), "selected")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
}
