package mechanism

import (
	"errors"
	"math"
	"testing"
)

// PureDPRDP: the randomized-response curve is below both cited bounds and
// equals the exact Rényi divergence of randomized response.
func TestPureDPRDP(t *testing.T) {
	for _, eps := range []float64{0.01, 0.1, 0.5, 1, 2, 5, 20} {
		for _, l := range []float64{1.01, 1.5, 2, 3, 10, 64, 1024} {
			v := PureDPRDP(eps, l)
			p, q := math.Exp(eps)/(1+math.Exp(eps)), 1/(1+math.Exp(eps))
			rr := math.Log(math.Pow(p, l)*math.Pow(q, 1-l)+math.Pow(q, l)*math.Pow(p, 1-l)) / (l - 1)
			if v > eps || v > l*eps*eps/2 || !(v >= 0) {
				t.Errorf("ε=%g λ=%g: %g above a cited bound", eps, l, v)
			}
			if math.Abs(v-rr) > 1e-9*(1+rr) && v < math.Min(eps, l*eps*eps/2) {
				t.Errorf("ε=%g λ=%g: %g, randomized response %g", eps, l, v, rr)
			}
		}
	}
	for _, bad := range [][2]float64{{-1, 2}, {math.NaN(), 2}, {1, 1}, {1, math.Inf(1)}, {math.Inf(1), 2}} {
		if !math.IsInf(PureDPRDP(bad[0], bad[1]), 1) {
			t.Errorf("PureDPRDP%v not +Inf", bad)
		}
	}
}

// lapPMF is P[Z = z] of the discrete Laplace with scale b.
func lapPMF(z int, b float64) float64 {
	q := math.Exp(-1 / b)
	return (1 - q) / (1 + q) * math.Pow(q, math.Abs(float64(z)))
}

// clampedPMF is the law of clamp(c + Z, 0, n) on 0..n.
func clampedPMF(c, n int, b float64) []float64 {
	out := make([]float64, n+1)
	for z := -n - c - 200; z <= n+200; z++ {
		v := min(max(c+z, 0), n)
		out[v] += lapPMF(z, b)
	}
	return out
}

// The exact output law of laplace-posterior (d = 3, n small) on every pair
// of neighbouring count vectors: the log ratio of output probabilities never
// exceeds DP()'s ε, which is ≤ the target.
func TestLaplacePosteriorExactPrivacy(t *testing.T) {
	for _, v := range []PosteriorVariant{Hist, Dim} {
		ps := PosteriorSpec{Prior: []float64{1, 1, 1}, N: 4, Epsilon: 0.8, Variant: v}
		m := mustNew(t, Spec{Kind: LaplacePosterior, Posterior: &ps})
		eps, delta := m.(ApproxDP).DP()
		if delta != 0 || !(eps <= 0.8) {
			t.Fatalf("%s: DP() = (%v, %v)", v, eps, delta)
		}
		b := m.Params().Scale
		n := 4
		law := func(c []int) map[[2]int]float64 {
			p0, p1 := clampedPMF(c[0], n, b), clampedPMF(c[1], n, b)
			out := map[[2]int]float64{}
			for i, a := range p0 {
				for j, bb := range p1 {
					last := min(max(n-i-j, 0), n)
					out[[2]int{i*100 + j, last}] += a * bb
				}
			}
			return out
		}
		worst := 0.0
		var comps [][]int
		for a := 0; a <= n; a++ {
			for bb := 0; a+bb <= n; bb++ {
				comps = append(comps, []int{a, bb, n - a - bb})
			}
		}
		for _, c := range comps {
			for i := 0; i < 3; i++ {
				for j := 0; j < 3; j++ {
					if i == j || c[i] == 0 {
						continue
					}
					c2 := []int{c[0], c[1], c[2]}
					c2[i]--
					c2[j]++
					lx, ly := law(c), law(c2)
					for k, px := range lx {
						worst = math.Max(worst, math.Log(px/ly[k]))
					}
				}
			}
		}
		if worst > eps*(1+1e-9) {
			t.Errorf("%s: exact worst log ratio %.6f > ε %.6f", v, worst, eps)
		}
		t.Logf("%s: scale %g, ε = %.6f, exact worst log ratio %.6f", v, b, eps, worst)
	}
}

// The sampler's law: α̃_0 − α_0 = clamp(c_0 + Z, 0, n); chi-square against
// the exact pmf, 20 000 draws, false-failure rate 1e-6.
func TestLaplacePosteriorSampler(t *testing.T) {
	ps := PosteriorSpec{Prior: []float64{0.5, 2, 1}, N: 12, Epsilon: 1}
	m := mustNew(t, Spec{Kind: LaplacePosterior, Posterior: &ps})
	pr := m.(PosteriorReleaser)
	rng := NewSeededRand(seed(100))
	counts := []float64{3, 4, 5}
	const draws = 20000
	hist := make([]float64, 13)
	out := make([]float64, 3)
	for i := 0; i < draws; i++ {
		if err := pr.ReleasePosterior(rng, counts, out); err != nil {
			t.Fatal(err)
		}
		for j := range out {
			if !(out[j] >= ps.Prior[j]) || out[j]-ps.Prior[j] != math.Trunc(out[j]-ps.Prior[j]) {
				t.Fatalf("α̃ = %v not prior + whole numbers ≥ 0", out)
			}
		}
		hist[int(out[0]-0.5)]++
	}
	want := clampedPMF(3, 12, m.Params().Scale)
	var chi float64
	for v := range hist {
		e := want[v] * draws
		chi += (hist[v] - e) * (hist[v] - e) / e
	}
	// χ²(12 df) quantile at 1 − 1e-6 is ≈ 49.1.
	if chi > 49.1 {
		t.Errorf("chi-square %.2f > 49.1 (12 df, false-failure 1e-6)", chi)
	}
	if err := m.Release(rng, counts, out); err != nil {
		t.Fatal(err)
	}
	checkSimplex(t, "laplace-posterior", out, true)
	if m.RDP(2) > PureDPRDP(2/m.Params().Scale, 2) || m.RDP(0.5) != math.Inf(1) {
		t.Errorf("RDP curve: %v", m.RDP(2))
	}
}

func TestPosteriorErrors(t *testing.T) {
	ok := PosteriorSpec{Prior: []float64{1, 1}, N: 5, Epsilon: 1}
	mod := func(k Kind, f func(*PosteriorSpec)) Spec {
		p := ok
		p.Prior = []float64{1, 1}
		f(&p)
		return Spec{Kind: k, Posterior: &p}
	}
	bad := map[string]Spec{
		"no spec":         {Kind: LaplacePosterior},
		"prior short":     mod(LaplacePosterior, func(p *PosteriorSpec) { p.Prior = []float64{1} }),
		"prior zero":      mod(EHD, func(p *PosteriorSpec) { p.Prior = []float64{0, 1} }),
		"prior NaN":       mod(EHDS, func(p *PosteriorSpec) { p.Prior = []float64{math.NaN(), 1}; p.Delta = 1e-6 }),
		"epsilon":         mod(LaplacePosterior, func(p *PosteriorSpec) { p.Epsilon = 0 }),
		"lp delta":        mod(LaplacePosterior, func(p *PosteriorSpec) { p.Delta = 0.1 }),
		"variant":         mod(LaplacePosterior, func(p *PosteriorSpec) { p.Variant = "foo" }),
		"ehd variant":     mod(EHD, func(p *PosteriorSpec) { p.Variant = Hist }),
		"ehd n":           mod(EHD, func(p *PosteriorSpec) { p.N = 0 }),
		"ehd delta":       mod(EHD, func(p *PosteriorSpec) { p.Delta = 0.1 }),
		"ehds delta":      mod(EHDS, func(p *PosteriorSpec) {}),
		"ehds delta 1":    mod(EHDS, func(p *PosteriorSpec) { p.Delta = 1 }),
		"n negative":      mod(LaplacePosterior, func(p *PosteriorSpec) { p.N = -1 }),
		"max candidates":  mod(EHD, func(p *PosteriorSpec) { p.MaxCandidates = -1 }),
		"ehd huge eps":    mod(EHD, func(p *PosteriorSpec) { p.Epsilon = 1e6 }),
		"rdp eps set":     {Kind: EHD, Posterior: &ok, RDPEpsilon: 1},
		"sensitivity set": {Kind: EHD, Posterior: &ok, Sensitivity: Sensitivity{L1: 1}},
	}
	for name, s := range bad {
		if _, err := New(s); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	big := mod(EHD, func(p *PosteriorSpec) { p.Prior = []float64{1, 1, 1, 1}; p.N = 1000; p.MaxCandidates = 1000 })
	_, err := New(big)
	var ce *CandidateLimitError
	if !errors.As(err, &ce) || !errors.Is(err, ErrTooManyCandidates) || !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("candidate limit: %v", err)
	}
	for _, k := range []Kind{LaplacePosterior, EHD, EHDS} {
		s := mod(k, func(p *PosteriorSpec) {
			if k == EHDS {
				p.Delta = 1e-6
			}
		})
		m := mustNew(t, s)
		rng := NewSeededRand(seed(101))
		out := make([]float64, 2)
		for name, c := range map[string][]float64{"sum": {1, 1}, "frac": {2.5, 2.5}, "neg": {-1, 6}, "len": {5}, "NaN": {math.NaN(), 5}} {
			if err := m.Release(rng, c, out); !errors.Is(err, ErrInvalidParameter) {
				t.Errorf("%s Release %s: %v", k, name, err)
			}
		}
		if err := m.Release(nil, []float64{2, 3}, out); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("%s nil rng: %v", k, err)
		}
		if err := m.(PosteriorReleaser).ReleasePosterior(rng, []float64{2, 3}, out[:1]); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("%s short out: %v", k, err)
		}
	}
	if _, err := Hellinger([]float64{1}, []float64{1}); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("Hellinger short: %v", err)
	}
	if _, err := Hellinger([]float64{1, 0}, []float64{1, 1}); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("Hellinger zero: %v", err)
	}
	if _, err := GlobalHellingerSensitivity([]float64{1}); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("GS short: %v", err)
	}
	if _, err := LocalHellingerSensitivity([]float64{1, 1}, []float64{1.5, 1}); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("LS frac: %v", err)
	}
	if _, err := PosteriorCandidates([]float64{1, 1}, 0, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("candidates n=0: %v", err)
	}
	if _, err := SampleByWeight(NewSeededRand(seed(1)), 3, func(int) float64 { return 2 }); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("weight > 1: %v", err)
	}
	if _, err := SampleByWeight(NewSeededRand(seed(1)), 3, func(int) float64 { return 0 }); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("all-zero weights: %v", err)
	}
}
