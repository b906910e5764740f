package aggregate

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/cputime"
)

// openKeyedWindow adds, to window 0 of a fresh aggregator of one selecting
// histogram (4 bins, m = 1, G = 1, no cap), n distinct keys of usersPerKey
// users each (every user one event), and returns it.
func openKeyedWindow(tb testing.TB, n, usersPerKey int) *Aggregator {
	a := mustNew(tb, Spec{
		Histograms:       []HistSpec{{Name: "pages", Bins: []string{"0", "1", "2", "3"}, Selects: true}},
		MaxEventsPerUser: 1, MaxGroupsPerUser: 1, WindowSize: time.Minute,
	})
	ev := &decode.Event{Bins: []int32{0}, Groups: []int32{0}, Keys: [][]byte{nil}}
	key := make([]byte, 0, 32)
	u := uint64(0)
	for k := range n {
		key = strconv.AppendInt(append(key[:0], "page/"...), int64(k), 10)
		for range usersPerKey {
			u++
			ev.User, ev.TimeMs, ev.Bins[0], ev.Keys[0] = mix64(u), int64(u), int32(u&3), key
			if o := a.Add(0, ev); o.Counted != 1 {
				tb.Fatalf("key %d: outcome %+v", k, o)
			}
		}
	}
	return a
}

// BenchmarkKeyedBytesPerKey: the heap an open window holds per distinct
// key (runtime.MemStats after a GC, before and after building it), with
// one user per key and with ten; the user records (the bounder's own
// per-user state) included. Keys are "page/<n>", 6 to 11 bytes.
func BenchmarkKeyedBytesPerKey(b *testing.B) {
	for _, c := range []struct{ keys, users int }{{500_000, 1}, {100_000, 10}} {
		b.Run(fmt.Sprintf("keys=%d,users/key=%d", c.keys, c.users), func(b *testing.B) {
			for b.Loop() {
				var m0, m1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m0)
				a := openKeyedWindow(b, c.keys, c.users)
				runtime.GC()
				runtime.ReadMemStats(&m1)
				if got := a.keysHeld(0, 0); got < c.keys {
					b.Fatalf("%d keys held, want at least %d", got, c.keys)
				}
				d := float64(int64(m1.HeapAlloc) - int64(m0.HeapAlloc))
				b.ReportMetric(d/float64(c.keys), "bytes/key")
				b.ReportMetric(d/float64(c.keys*c.users), "bytes/user")
				runtime.KeepAlive(a)
			}
		})
	}
}

// BenchmarkKeyedClose1M: Close of a window of 1,000,000 distinct keys of
// one user each (4 bins: a record of 4,000,000 keyed rows); the build is
// not timed; record-bytes/key is the Arrow record's buffers per key (its
// 4 rows). cpu-ms/op is the process's user+system CPU time of the Close
// (getrusage), which counts every thread.
func BenchmarkKeyedClose1M(b *testing.B) {
	const n = 1_000_000
	var cpu time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		a := openKeyedWindow(b, n, 1)
		runtime.GC()
		c0 := cputime.Now()
		b.StartTimer()
		wc, err := a.Close(0)
		b.StopTimer()
		cpu += cputime.Now() - c0
		if err != nil {
			b.Fatal(err)
		}
		if wc.Keys(0) != n || wc.Total(0) != n {
			b.Fatalf("%d keys, total %d", wc.Keys(0), wc.Total(0))
		}
		rb := 0
		for _, col := range wc.Record().Columns() {
			for _, buf := range col.Data().Buffers() {
				if buf != nil {
					rb += buf.Len()
				}
			}
		}
		b.ReportMetric(float64(rb)/n, "record-bytes/key")
		wc.Release()
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
}
