package release_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/consume"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/cputime"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/release"
)

// BenchmarkCloseSelecting1e6Keys is the whole close of one window of a
// selecting histogram with 1,000,000 distinct keys of which 1 % pass
// (issue 30's figure): the aggregator's Close (the shards' keys merged,
// sorted, counted, the Arrow record built) and the releaser's Record (the
// selection's draw over every key, one release per selected key, the
// ledger write). 990,000 keys have one user each; 10,000 keys have the
// users at which the plan keeps a group with probability 0.999 (496), so
// about 1 % of the keys pass. Filling the window is not timed. cpu-ms/op is the
// process's CPU time (getrusage) of the timed part.
func BenchmarkCloseSelecting1e6Keys(b *testing.B) {
	const n, pass = 1_000_000, 10_000
	// 5.95 million users in the window: over the default cap of tracked
	// users (2,000,000), which would leave most keys untracked; and 10⁶
	// keys are at the default selection.max_keys_per_window, whose noisy
	// test would withhold the window half the time.
	cfg := selectConfig(b, b.TempDir(), "contribution: {max_tracked_users: 8000000}\nselection: {max_keys_per_window: 2000000}")
	led, err := ledger.Open(cfg.State.Dir)
	if err != nil {
		b.Fatal(err)
	}
	defer led.Close()
	f := newSelFixture(b, cfg, led, 1)
	big := int(f.plan.Selection.Selection.Threshold.UsersAt(0.999))
	dec, err := decode.New(cfg, siphash.MustNewKey())
	if err != nil {
		b.Fatal(err)
	}
	var cpu time.Duration
	var selected int
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		agg, err := aggregate.New(consume.AggregateSpec(cfg))
		if err != nil {
			b.Fatal(err)
		}
		w := int64(i) * minute
		ev := dec.NewEvent()
		user := uint64(1)
		for k := range n {
			users := 1
			if k%(n/pass) == 0 {
				users = big
			}
			key := []byte(fmt.Sprintf("key-%07d", k))
			for range users {
				ev.TimeMs, ev.User = w, user*0x9e3779b97f4a7c15
				user++
				ev.Bins[0], ev.Groups[0], ev.Keys[0], ev.Drops[0] = int32(k%2), 0, key, decode.ReasonNone
				ev.Bins[1], ev.Groups[1], ev.Drops[1] = -1, -1, decode.ReasonMissingField
				agg.Add(w, ev)
			}
		}
		runtime.GC()
		c0 := cputime.Now()
		b.StartTimer()
		counts, err := agg.Close(w)
		if err != nil {
			b.Fatal(err)
		}
		units, err := f.rel.Record(w, counts, nil)
		b.StopTimer()
		cpu += cputime.Now() - c0
		if err != nil {
			b.Fatal(err)
		}
		if counts.Keys(0) != n || len(units) == 0 {
			b.Fatalf("%d keys tracked, want %d", counts.Keys(0), n)
		}
		counts.Release()
		for _, u := range units {
			if u.Histogram == "campaigns" {
				selected = len(release.ReleaseMessages(u))
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(selected), "selected")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
}
