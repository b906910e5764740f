package aggregate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/decode"
)

// The bias of the cross-window bound, measured for the README: per window
// index of a period (W = 12 one-minute windows, K = 5), the number of users
// counted (N) and the ℓ2 distance between the bounded window's normalized
// histogram and the unbounded one (every user's event counted), with no
// noise — the bias a release inherits before its own noise error, which
// grows as N falls. Three streams of 2,000 users, one event per active
// (user, window), 5 bins:
//
//   - every: each user in every window, on a bin of its own (half of
//     them on the last bin);
//   - light: each user in 4 random windows (K never binds);
//   - mixed: 20% heavy users in every window, all on bin 0; 80% light
//     users in 4 random windows each, uniform bins.
//
// The assertions are the exact facts (no bias while K cannot bind; every
// user gone after its K windows); the figures are logged.
func TestWindowBoundBias(t *testing.T) {
	const (
		users, windows, k, bins = 2000, 12, 5, 5
		size                    = 60_000
	)
	type activity struct {
		windows []bool
		bin     func(r *rand.Rand) int
	}
	streams := []struct {
		name string
		user func(u int, r *rand.Rand) activity
	}{
		{"every", func(u int, r *rand.Rand) activity {
			ws := make([]bool, windows)
			for i := range ws {
				ws[i] = true
			}
			return activity{ws, func(*rand.Rand) int { return min(u%8, bins-1) }}
		}},
		{"light", func(u int, r *rand.Rand) activity {
			ws := make([]bool, windows)
			for _, i := range r.Perm(windows)[:4] {
				ws[i] = true
			}
			return activity{ws, func(r *rand.Rand) int { return r.IntN(bins) }}
		}},
		{"mixed", func(u int, r *rand.Rand) activity {
			ws := make([]bool, windows)
			if u%5 == 0 {
				for i := range ws {
					ws[i] = true
				}
				return activity{ws, func(*rand.Rand) int { return 0 }}
			}
			for _, i := range r.Perm(windows)[:4] {
				ws[i] = true
			}
			return activity{ws, func(r *rand.Rand) int { return r.IntN(bins) }}
		}},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-6s %s\n", "stream", "per window index 0..11: N counted / ℓ2 bias of the normalized histogram")
	for _, st := range streams {
		r := rand.New(rand.NewPCG(7, 8))
		spec := Spec{Histograms: []HistSpec{{Name: "h", Bins: []string{"a", "b", "c", "d", "e"}, Groups: []string{"*"}}},
			MaxEventsPerUser: 1, MaxGroupsPerUser: 1, WindowSize: time.Minute}
		bounded, all := mustNew(t, spec), mustNew(t, spec)
		adm, _ := NewAdmissions(k)
		acts := make([]activity, users)
		for u := range users {
			acts[u] = st.user(u, r)
		}
		fmt.Fprintf(&table, "%-6s", st.name)
		for w := range windows {
			for u, a := range acts {
				if !a.windows[w] {
					continue
				}
				ev := &decode.Event{User: mix64(uint64(u) + 1), TimeMs: int64(w) * size, Bins: []int32{int32(a.bin(r))}, Groups: []int32{0}, Drops: make([]decode.Reason, 1)}
				all.Add(int64(w)*size, ev)
				if adm.Admissible(ev.User, 0) {
					bounded.Add(int64(w)*size, ev)
				}
			}
			wb, err := bounded.CloseAdmitted(int64(w)*size, func(u uint64) bool { return adm.Admit(0, u) })
			if err != nil {
				t.Fatal(err)
			}
			wa, err := all.Close(int64(w) * size)
			if err != nil {
				t.Fatal(err)
			}
			cb, ca := wb.Counts(0, 0, make([]float64, bins)), wa.Counts(0, 0, make([]float64, bins))
			wb.Release()
			wa.Release()
			n, bias := 0.0, l2(normalized(cb), normalized(ca))
			for _, c := range cb {
				n += c
			}
			fmt.Fprintf(&table, " %4.0f/%.3f", n, bias)
			switch {
			case st.name == "light" && bias != 0:
				t.Errorf("light, window %d: bias %v while K cannot bind", w, bias)
			case st.name == "every" && (w < k) != (n == users):
				t.Errorf("every, window %d: %v users counted", w, n)
			case st.name == "every" && w >= k && n != 0:
				t.Errorf("every, window %d: %v users counted after their K windows", w, n)
			case st.name == "mixed" && w >= k && bias == 0:
				t.Errorf("mixed, window %d: no bias once the heavy users are out", w)
			}
		}
		table.WriteByte('\n')
	}
	t.Logf("window-bound bias (K = %d of %d windows, %d users, no noise):\n%s", k, windows, users, table.String())
}

// normalized is c/Σc, or the uniform vector for an empty c (what a
// release of an empty window is centred on).
func normalized(c []float64) []float64 {
	s := 0.0
	for _, x := range c {
		s += x
	}
	out := make([]float64, len(c))
	for i, x := range c {
		if s == 0 {
			out[i] = 1 / float64(len(c))
		} else {
			out[i] = x / s
		}
	}
	return out
}

func l2(p, q []float64) float64 {
	s := 0.0
	for i := range p {
		s += (p[i] - q[i]) * (p[i] - q[i])
	}
	return math.Sqrt(s)
}
