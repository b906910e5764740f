package aggregate

import (
	"math/rand/v2"
	"testing"

	"github.com/dpstage/stage/decode"
)

// TestMergeKeptIsSingleProcessMean: the distributed mode's average — each
// of n partitions keeps its own Users smallest hashes (an Averager per
// partition), the releaser keeps the Users smallest of their union
// (MergeKept) — equals one Averager over the same events, on random
// windows where the cap binds and where it does not, with and without
// the cross-window bound's deferred cap (a random admission per user).
func TestMergeKeptIsSingleProcessMean(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for it := range 300 {
		users, bins, n := 1+r.IntN(8), 2+r.IntN(4), 1+r.IntN(4)
		deferred := r.IntN(2) == 0
		hs := []AverageHist{{Index: 0, Name: "h", Bins: bins, Users: users}}
		mk := func() *Averager {
			newA := NewAverager
			if deferred {
				newA = NewDeferredAverager
			}
			a, err := newA(hs)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		one := mk()
		parts := make([]*Averager, n)
		for p := range parts {
			parts[p] = mk()
		}
		admitted := map[uint64]bool{}
		ev := &decode.Event{Vectors: [][]float64{nil}, Drops: []decode.Reason{decode.ReasonNone}}
		for range r.IntN(30) {
			u := uint64(r.IntN(20)) * 0x9e3779b97f4a7c15
			admitted[u] = r.IntN(4) != 0
			ev.User, ev.Vectors[0] = u, randVec(r, bins)
			one.Add(0, ev)
			parts[int(u>>40)%n].Add(0, ev)
		}
		closeW := func(a *Averager) *AverageWindow {
			if !deferred {
				return a.Close(0)
			}
			w, err := a.CloseAdmitted(0, func(u uint64) bool { return admitted[u] })
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		want := closeW(one).Mean(0, make([]float64, bins))
		kept := make([][]KeptUser, n)
		for p, a := range parts {
			kept[p] = closeW(a).KeptUsers(0)
			if len(kept[p]) > users {
				t.Fatalf("instance %d: partition %d keeps %d users, more than %d", it, p, len(kept[p]), users)
			}
		}
		got, err := MergeKept(users, bins, kept, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := l1(got, want); d > 1e-12 {
			t.Fatalf("instance %d (users %d, %d partitions, deferred %v): merged %v, one averager %v (ℓ1 %g)", it, users, n, deferred, got, want, d)
		}
	}
	if _, err := MergeKept(2, 3, [][]KeptUser{{{User: 1, Vector: []float64{1, 0}}}}, nil); err == nil {
		t.Error("a vector of the wrong length merged")
	}
}
