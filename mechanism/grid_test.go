package mechanism

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkGrid fails unless out is a release on its grid q = ReleaseGrid(len):
// every entry is exactly float64(n_i)/q for an integer n_i ≥ 0, and
// Σ n_i = q.
func checkGrid(t *testing.T, name string, out []float64) {
	t.Helper()
	q := ReleaseGrid(len(out))
	var total int64
	for i, y := range out {
		n := math.Round(y * float64(q))
		if !(n >= 0) || float64(n)/float64(q) != y {
			t.Fatalf("%s: entry %d = %v is not a multiple of 1/%d", name, i, y, q)
		}
		total += int64(n)
	}
	if total != q {
		t.Fatalf("%s: grid units sum to %d, want %d", name, total, q)
	}
}

// refRound is the largest-remainder rounding written the obvious way (a
// stable sort of the indices by remainder, descending), to check
// roundToGrid's allocation-free selection against.
func refRound(p []float64, q int64) []int64 {
	n := make([]int64, len(p))
	idx := make([]int, len(p))
	rem := make([]float64, len(p))
	left := q
	for i, v := range p {
		t := v * float64(q)
		f := math.Floor(t)
		n[i], rem[i], idx[i] = int64(f), t-f, i
		left -= int64(f)
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case rem[a] > rem[b]:
			return -1
		case rem[a] < rem[b]:
			return 1
		}
		return 0
	})
	for k := int64(0); k < left; k++ {
		n[idx[k]]++
	}
	return n
}

// TestRoundToGrid: on random probability vectors of many shapes — Dirichlet
// draws, vectors with many zeros and many equal entries (ties), exact
// half-units, sums off by up to 1e-9 — the rounding gives integers n_i ≥ 0
// summing to exactly q, moves no coordinate by 1/q or more (|n_i − q·p_i| <
// 1), and equals the sort-based largest-remainder rounding (ties to the
// lower index). Grid vectors are fixed points. Deterministic (seeded).
// Mutations: handing the leftover units to the smallest remainders, or
// dropping the tie rule, fail it.
func TestRoundToGrid(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 4))
	gen := []struct {
		name string
		make func(d int) []float64
	}{
		{"dirichlet", func(d int) []float64 {
			p := make([]float64, d)
			rng := NewSeededRand([32]byte{byte(r.IntN(256)), byte(d)})
			rng.dirichlet(make([]float64, d), 1, 0, 0.3+r.Float64()*3, true, p)
			return p
		}},
		{"sparse", func(d int) []float64 {
			p := make([]float64, d)
			p[r.IntN(d)] = 1
			for k := 0; k < 3 && d > 2; k++ {
				i := r.IntN(d)
				x := r.Float64() * p[0]
				p[i] += x
				p[0] -= x
			}
			return p
		}},
		{"ties", func(d int) []float64 {
			p := make([]float64, d)
			for i := range p {
				p[i] = 1 / float64(d)
			}
			return p
		}},
		{"half units", func(d int) []float64 {
			q := float64(ReleaseGrid(d))
			p := make([]float64, d)
			rest := q
			for i := 0; i < d-1; i++ {
				u := math.Floor(r.Float64()*rest/float64(d-i)) + 0.5
				if u > rest {
					u = 0
				}
				p[i] = u / q
				rest -= u
			}
			p[d-1] = rest / q
			return p
		}},
		{"sum off by 1e-9", func(d int) []float64 {
			p := make([]float64, d)
			for i := range p {
				p[i] = r.Float64()
			}
			s := 0.0
			for _, v := range p {
				s += v
			}
			f := (1 + (2*r.Float64()-1)*0.9e-9) / s
			for i := range p {
				p[i] *= f
			}
			return p
		}},
	}
	for _, g := range gen {
		for _, d := range []int{1, 2, 3, 5, 17, 100, 101, 1000, 1001, 20000} {
			if d == 1 && g.name != "ties" {
				continue
			}
			for rep := 0; rep < 20; rep++ {
				p := g.make(d)
				for _, q := range []int64{ReleaseGrid(d), 7, 1e8} {
					got := slices.Clone(p)
					if err := RoundToGrid(got, q); err != nil {
						t.Fatalf("%s d=%d q=%d: %v", g.name, d, q, err)
					}
					want := refRound(p, q)
					var total int64
					for i, y := range got {
						n := math.Round(y * float64(q))
						if float64(n)/float64(q) != y || n < 0 {
							t.Fatalf("%s d=%d q=%d: entry %d = %v is not n/q", g.name, d, q, i, y)
						}
						if !(math.Abs(n-p[i]*float64(q)) < 1) {
							t.Fatalf("%s d=%d q=%d: entry %d moved from %v to %v (≥ 1/q)", g.name, d, q, i, p[i], y)
						}
						if int64(n) != want[i] {
							t.Fatalf("%s d=%d q=%d: entry %d = %d/q, largest remainder gives %d/q", g.name, d, q, i, int64(n), want[i])
						}
						total += int64(n)
					}
					if total != q {
						t.Fatalf("%s d=%d q=%d: units sum to %d", g.name, d, q, total)
					}
					again := slices.Clone(got)
					if err := RoundToGrid(again, q); err != nil || !slices.Equal(again, got) {
						t.Fatalf("%s d=%d q=%d: not a fixed point (%v)", g.name, d, q, err)
					}
				}
			}
		}
	}
	// Ties go to the lower index: thirds on a grid of 10 → 4, 3, 3.
	p := []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}
	if err := RoundToGrid(p, 10); err != nil || !slices.Equal(p, []float64{0.4, 0.3, 0.3}) {
		t.Errorf("thirds on 1/10: %v (%v), want [0.4 0.3 0.3]", p, err)
	}
	// Invalid input: an error, p untouched.
	for _, c := range []struct {
		p []float64
		q int64
	}{
		{[]float64{0.5, 0.5}, 0},
		{[]float64{0.5, 0.5}, 1e8 + 1},
		{nil, 10},
		{[]float64{0.5, 0.6}, 10},
		{[]float64{1.5, -0.5}, 10},
		{[]float64{math.NaN(), 1}, 10},
		{[]float64{math.Inf(1), 0}, 10},
	} {
		before := slices.Clone(c.p)
		if err := RoundToGrid(c.p, c.q); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("RoundToGrid(%v, %d): %v, want ErrInvalidParameter", c.p, c.q, err)
		}
		if !slices.EqualFunc(before, c.p, func(a, b float64) bool { return a == b || a != a && b != b }) {
			t.Errorf("RoundToGrid(%v, %d) modified its input on error", before, c.q)
		}
	}
	src := []float64{0.1, 0.25, 0.3, 0.35}
	buf := make([]float64, len(src))
	if a := testing.AllocsPerRun(10, func() {
		copy(buf, src)
		if err := RoundToGrid(buf, 7); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("RoundToGrid: %g allocations", a)
	}
}

// TestReleaseGrid: every mechanism whose draw is floating point releases
// exactly RoundToGrid(ReleaseUnrounded, ReleaseGrid(d)) (same seed, bit for
// bit) — the dirichlet calibrations (both sampling paths), exact (covered
// and fallback), simplex-dirichlet and the average kind — at d on both
// sides of the grid's steps; the exact-sampler mechanisms (gaussian,
// laplace, laplace-posterior) have no unrounded draw to hide and do not
// implement Unrounded. Mutation: dropping roundRelease from one Release
// fails it.
func TestReleaseGrid(t *testing.T) {
	for d, want := range map[int]int64{0: 1e4, 2: 1e4, 100: 1e4, 101: 1e5, 1000: 1e5, 1001: 1e6, 1e7: 1e6} {
		if got := ReleaseGrid(d); got != want {
			t.Errorf("ReleaseGrid(%d) = %d, want %d", d, got, want)
		}
	}
	type releaser interface {
		Release(*Rand, []float64, []float64) error
		Unrounded
	}
	var mechs []struct {
		name string
		m    func(d int) releaser
		in   func(d int) []float64
	}
	counts := func(d int) []float64 {
		c := make([]float64, d)
		for i := range c {
			c[i] = float64((i * 7) % 11)
		}
		return c
	}
	probs := func(d int) []float64 {
		p := make([]float64, d)
		s := 0.0
		for i := range p {
			p[i] = 1 + float64(i%3)
			s += p[i]
		}
		for i := range p {
			p[i] /= s
		}
		return p
	}
	for _, s := range []Spec{
		example,
		{Kind: Dirichlet, Calibration: ClosedForm, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2, LInf: 1}},
		{Kind: Dirichlet, Calibration: Diffuse, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2, LInf: 1}},
		{Kind: Dirichlet, Order: 1.1, RDPEpsilon: 50, Sensitivity: Sensitivity{L2Sq: 1, LInf: 1}}, // log path
		{Kind: Dirichlet, Calibration: Exact, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L1: 2, L2Sq: 2, LInf: 1}, Neighbour: Replace},
		{Kind: Dirichlet, Calibration: Exact, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L1: 4, L2Sq: 8, LInf: 2}, Neighbour: Replace}, // fallback
	} {
		m := mustNew(t, s)
		mechs = append(mechs, struct {
			name string
			m    func(d int) releaser
			in   func(d int) []float64
		}{string(m.Spec().Calibration), func(int) releaser { return m.(releaser) }, counts})
	}
	mechs = append(mechs, struct {
		name string
		m    func(d int) releaser
		in   func(d int) []float64
	}{"simplex-dirichlet", func(d int) releaser {
		return mustNew(t, Spec{Kind: SimplexDirichlet, Simplex: &SimplexSpec{Bins: d, K: 50, W: []int{1, 2}, Eta: 0.05, EtaBar: 0.05, B: 0.4, Average: 1, TargetDelta: 0.05}}).(releaser)
	}, func(d int) []float64 { // W = {1, 2} at 0.1 each, the rest spread
		p := make([]float64, d)
		for i := range p {
			p[i] = 0.8 / float64(d-2)
		}
		p[1], p[2] = 0.1, 0.1
		return p
	}}, struct {
		name string
		m    func(d int) releaser
		in   func(d int) []float64
	}{"average", func(d int) releaser {
		a, err := NewSimplexAverage(AverageSpec{Bins: d, Users: 100, Eta: 0.1 / float64(d), K: 1000, TargetDelta: 1e-6})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}, probs})
	for _, c := range mechs {
		for _, d := range []int{2, 5, 100, 101, 1001} {
			if d == 2 && c.name == "simplex-dirichlet" {
				continue // needs ≥ 3 bins
			}
			m, in := c.m(d), c.in(d)
			got, raw := make([]float64, d), make([]float64, d)
			if err := m.Release(NewSeededRand(seed(byte(d))), in, got); err != nil {
				t.Fatalf("%s d=%d: %v", c.name, d, err)
			}
			if err := m.ReleaseUnrounded(NewSeededRand(seed(byte(d))), in, raw); err != nil {
				t.Fatalf("%s d=%d: %v", c.name, d, err)
			}
			checkGrid(t, c.name, got)
			if err := RoundToGrid(raw, ReleaseGrid(d)); err != nil || !slices.Equal(raw, got) {
				t.Fatalf("%s d=%d: Release is not the rounded unrounded draw (%v)", c.name, d, err)
			}
		}
	}
	for _, s := range []Spec{
		{Kind: Gaussian, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2}},
		{Kind: Laplace, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L1: 2, LInf: 1}},
	} {
		m := mustNew(t, s)
		if _, ok := m.(Unrounded); ok {
			t.Errorf("%s: implements Unrounded, but its noise is an exact integer sampler's", s.Kind)
		}
		cp, err := NewCountPosterior(m, 1)
		if s.Kind == Laplace && err == nil {
			if _, ok := any(cp).(Unrounded); ok {
				t.Errorf("laplace-posterior implements Unrounded")
			}
		}
	}
}
