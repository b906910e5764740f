package aggregate

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpstage/stage/decode"
)

type avgEvent struct {
	user uint64
	vec  []float64
}

// padded returns the padded average of one (window, histogram) fed with evs
// in the given order.
func padded(t *testing.T, users, bins int, evs []avgEvent) ([]float64, int) {
	t.Helper()
	a, err := NewAverager([]AverageHist{{Index: 0, Name: "h", Bins: bins, Users: users}})
	if err != nil {
		t.Fatal(err)
	}
	ev := &decode.Event{Vectors: [][]float64{nil}, Drops: []decode.Reason{decode.ReasonNone}}
	for _, e := range evs {
		ev.User, ev.Vectors[0] = e.user, e.vec
		a.Add(0, ev)
	}
	w := a.Close(0)
	return w.Mean(0, make([]float64, bins)), w.Kept(0)
}

func randVec(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	if r.IntN(3) == 0 { // a vertex of the simplex: the largest ℓ1 changes
		v[r.IntN(n)] = 1
		return v
	}
	var s float64
	for i := range v {
		v[i] = r.ExpFloat64()
		s += v[i]
	}
	for i := range v {
		v[i] /= s
	}
	return v
}

func l1(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += math.Abs(a[i] - b[i])
	}
	return s
}

func TestAverageMeanAndPadding(t *testing.T) {
	// Two users, Users = 4: two uniform padding copies.
	got, kept := padded(t, 4, 2, []avgEvent{
		{1, []float64{1, 0}},
		{2, []float64{0, 1}},
		{1, []float64{0, 1}}, // user 1's second vector: user 1 averages to (½, ½)
	})
	want := []float64{(0.5 + 0 + 0.5 + 0.5) / 4, (0.5 + 1 + 0.5 + 0.5) / 4}
	if kept != 2 || l1(got, want) > 1e-15 {
		t.Errorf("mean %v (kept %d), want %v (kept 2)", got, kept, want)
	}
	// An empty window releases the uniform vector.
	got, kept = padded(t, 3, 4, nil)
	if kept != 0 || l1(got, []float64{0.25, 0.25, 0.25, 0.25}) > 1e-15 {
		t.Errorf("empty window mean %v kept %d", got, kept)
	}
}

func TestAverageKeepsSmallestHashes(t *testing.T) {
	// Users 10..1 arrive in decreasing hash order with Users = 3: the kept
	// set must be {1, 2, 3} whatever the order.
	var evs []avgEvent
	for u := uint64(10); u >= 1; u-- {
		v := []float64{0, 0}
		if u <= 3 {
			v[0] = 1
		} else {
			v[1] = 1
		}
		evs = append(evs, avgEvent{u, v})
	}
	got, kept := padded(t, 3, 2, evs)
	if kept != 3 || l1(got, []float64{1, 0}) > 1e-15 {
		t.Errorf("mean %v kept %d: want the users with the 3 smallest hashes, (1, 0)", got, kept)
	}
}

// TestAverageSensitivity checks the bound of the package doc on random
// neighbouring user sets: add, remove, replace a user's data, and swap a
// user for another; and that the bound is attained (it is not vacuous).
func TestAverageSensitivity(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	worst := 0.0
	for trial := range 3000 {
		n := 2 + r.IntN(4)
		users := 1 + r.IntN(8)
		m := r.IntN(2*users + 2) // below, at and above the cap
		base := map[uint64][][]float64{}
		for len(base) < m {
			u := r.Uint64N(1000)
			for range 1 + r.IntN(3) {
				base[u] = append(base[u], randVec(r, n))
			}
		}
		neighbour := map[uint64][][]float64{}
		for u, v := range base {
			neighbour[u] = v
		}
		kind := r.IntN(4)
		var some uint64
		for u := range base {
			some = u
			break
		}
		switch {
		case kind == 0 || len(base) == 0: // add a user
			u := 1000 + r.Uint64N(1000)
			neighbour[u] = [][]float64{randVec(r, n)}
		case kind == 1: // remove a user
			delete(neighbour, some)
		case kind == 2: // replace the user's data
			neighbour[some] = [][]float64{randVec(r, n), randVec(r, n)}
		default: // replace the user by another
			delete(neighbour, some)
			neighbour[1000+r.Uint64N(1000)] = [][]float64{randVec(r, n)}
		}
		flat := func(s map[uint64][][]float64) []avgEvent {
			var evs []avgEvent
			for u, vs := range s {
				for _, v := range vs {
					evs = append(evs, avgEvent{u, v})
				}
			}
			r.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
			return evs
		}
		p, _ := padded(t, users, n, flat(base))
		q, _ := padded(t, users, n, flat(neighbour))
		d := l1(p, q)
		bound := 2 / float64(users)
		if d > bound*(1+1e-12) {
			t.Fatalf("trial %d (kind %d, users %d, n %d, m %d): ‖p̄ − p̄′‖₁ = %g > 2/Users = %g", trial, kind, users, n, m, d, bound)
		}
		worst = max(worst, d/bound)
		// Arrival order does not matter (up to rounding).
		p2, _ := padded(t, users, n, flat(base))
		if l1(p, p2) > 1e-12 {
			t.Fatalf("trial %d: order changed the mean by %g", trial, l1(p, p2))
		}
	}
	t.Logf("largest ‖p̄ − p̄′‖₁ / (2/Users) over 3000 neighbours: %.6f", worst)
	if worst < 0.999 {
		t.Errorf("the bound 2/Users was never approached (worst ratio %g): the test is not exercising it", worst)
	}
}

func TestNewAveragerErrors(t *testing.T) {
	for _, h := range []AverageHist{
		{Name: "a", Bins: 1, Users: 1},
		{Name: "b", Bins: 2, Users: 0},
		{Name: "c", Bins: 2, Users: 1, Index: -1},
	} {
		if _, err := NewAverager([]AverageHist{h}); err == nil {
			t.Errorf("NewAverager(%+v) accepted", h)
		}
	}
	if _, err := NewAverager(nil); err != ErrNoAverages {
		t.Errorf("NewAverager(nil) = %v, want ErrNoAverages", err)
	}
}

// TestAverageWindowByConfigIndex: a closed window's averages are addressed
// by the histogram's config index (as WindowCounts.Counts and
// decode.Event are), not by position among the average histograms; an
// index that is not an average histogram is a caller bug and panics.
func TestAverageWindowByConfigIndex(t *testing.T) {
	// Config order: 0 count, 1 average (3 bins), 2 count, 3 average (2 bins).
	a, err := NewAverager([]AverageHist{{Index: 1, Name: "a", Bins: 3, Users: 1}, {Index: 3, Name: "b", Bins: 2, Users: 1}})
	if err != nil {
		t.Fatal(err)
	}
	none := decode.ReasonNone
	ev := &decode.Event{User: 7, Vectors: [][]float64{nil, {1, 0, 0}, nil, {0, 1}}, Drops: []decode.Reason{none, none, none, none}}
	a.Add(0, ev)
	w := a.Close(0)
	if got := w.Mean(1, make([]float64, 3)); got[0] != 1 {
		t.Errorf("Mean(1) = %v, want [1 0 0]", got)
	}
	if got := w.Mean(3, make([]float64, 2)); got[1] != 1 {
		t.Errorf("Mean(3) = %v, want [0 1]", got)
	}
	if w.Kept(1) != 1 || w.Kept(3) != 1 {
		t.Errorf("kept %d, %d", w.Kept(1), w.Kept(3))
	}
	defer func() {
		if recover() == nil {
			t.Error("Mean(2) of a count histogram did not panic")
		}
	}()
	w.Mean(2, make([]float64, 2))
}
