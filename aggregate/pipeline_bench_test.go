package aggregate

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/siphash"
)

// benchConfig is the quickstart-like configuration of the in-process
// benchmark: one histogram over pages grouped by country.
func benchConfig() *config.Config {
	return &config.Config{
		Events: config.Events{TimeField: "ts", UserField: "user_id"},
		Window: config.Window{Size: config.Duration(time.Minute)},
		Histograms: []config.Histogram{{Name: "pages", Field: "page", Bins: []string{"home", "search", "cart", "checkout", "other"},
			OverflowBin: "other", GroupBy: "country", Groups: []string{"US", "DE", "FR"}}},
		Contribution: config.Contribution{MaxEventsPerUser: 1, MaxGroupsPerUser: 1, MaxTrackedUsers: 2_000_000},
	}
}

// benchMessages are ~100-byte events, 1,000 per second of event time (so a
// one-minute window holds 60,000), from 100,000 users with skewed activity.
func benchMessages(n int) [][]byte {
	r := rand.New(rand.NewPCG(7, 7))
	pages := []string{"home", "search", "cart", "checkout", "pricing", "home", "search"}
	countries := []string{"US", "DE", "FR", "US", "GB"}
	msgs := make([][]byte, n)
	for i := range msgs {
		u := r.IntN(100_000)
		u = u * u / 100_000
		msgs[i] = fmt.Appendf(nil, `{"ts":%d,"user_id":"u%d","page":"%s","country":"%s","session":"%010x"}`,
			1_700_000_000_000+int64(i), u, pages[r.IntN(len(pages))], countries[r.IntN(len(countries))], r.Uint64()&0xffffffffff)
	}
	return msgs
}

// BenchmarkDecodeAdd is the in-process path on one goroutine: decode, bound
// and aggregate pre-generated message bytes, closing (and releasing) each
// window as event time leaves it.
func BenchmarkDecodeAdd(b *testing.B) {
	cfg := benchConfig()
	d, err := decode.New(cfg, siphash.MustNewKey())
	if err != nil {
		b.Fatal(err)
	}
	a := mustNew(b, Spec{MaxEventsPerUser: 1, MaxGroupsPerUser: 1, MaxTrackedUsers: 2_000_000, WindowSize: time.Minute,
		Histograms: []HistSpec{{Name: "pages", Bins: cfg.Histograms[0].Bins, Groups: cfg.Histograms[0].Groups}}})
	msgs := benchMessages(1 << 18)
	size := cfg.Window.Size.D().Milliseconds()
	ev := d.NewEvent()
	var o Outcome
	open := int64(-1)
	var bytes int64
	b.ReportAllocs()
	start := time.Now()
	i := 0
	for b.Loop() {
		msg := msgs[i&(len(msgs)-1)]
		i++
		bytes += int64(len(msg))
		if d.Decode(msg, ev) != decode.ReasonNone {
			b.Fatal("decode")
		}
		w := ev.TimeMs - ev.TimeMs%size
		if w != open {
			if open >= 0 {
				wc, err := a.Close(open)
				if err != nil {
					b.Fatal(err)
				}
				wc.Release()
			}
			open = w
		}
		o.Add(a.Add(w, ev))
	}
	el := time.Since(start)
	b.ReportMetric(float64(i)/el.Seconds(), "events/s")
	b.ReportMetric(float64(bytes)/float64(i), "bytes/msg")
	b.ReportMetric(float64(o.Counted)/float64(i), "counted/event")
}
