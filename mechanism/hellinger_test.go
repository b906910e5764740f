package mechanism

import (
	"math"
	"testing"
)

// Hellinger distances against 30-digit mpmath values; 0.23362948070887528
// is also 004 Table 1's one-step distance from Beta(5, 5)
// (0.233629480709).
func TestHellingerAccuracy(t *testing.T) {
	cases := []struct {
		a, b []float64
		want float64
	}{
		{[]float64{2, 1}, []float64{1, 2}, 0.46325137517610424},
		{[]float64{5, 5}, []float64{4, 6}, 0.23362948070887528},
		{[]float64{21, 21}, []float64{3, 39}, 0.99775481308245806},
		{[]float64{1001, 19001}, []float64{1000, 19002}, 0.011470394057458083},
		{[]float64{1.5, 2.5, 3.5}, []float64{2.5, 1.5, 3.5}, 0.38881054106495734},
		{[]float64{0.3, 0.7}, []float64{1.3, 0.7}, 0.44526285335931613},
	}
	for _, c := range cases {
		h, tau := hellinger(c.a, c.b)
		err := math.Abs(h - c.want)
		if err > tau {
			t.Errorf("H(%v, %v) = %.17g, mpmath %.17g: error %.3g above its bound %.3g", c.a, c.b, h, c.want, err, tau)
		}
		if err > 1e-6 {
			t.Errorf("H(%v, %v) error %.3g", c.a, c.b, err)
		}
		if h2, _ := hellinger(c.b, c.a); math.Abs(h2-h) > 1e-14 {
			t.Errorf("not symmetric: %v vs %v", h, h2)
		}
	}
	if h, tau := hellinger([]float64{3, 4}, []float64{3, 4}); h != 0 || tau != 0 {
		t.Errorf("H(a, a) = %v ± %v", h, tau)
	}
}

// GS: the formula against a brute force over every neighbouring pair of
// posteriors of small datasets, for several priors; and 002's constant at
// α = (1, 1).
func TestGlobalHellingerSensitivity(t *testing.T) {
	gs, _ := GlobalHellingerSensitivity([]float64{1, 1})
	if math.Abs(gs-math.Sqrt(1-math.Pi/4)) > 1e-15 {
		t.Errorf("GS(1, 1) = %.17g, want √(1 − π/4)", gs)
	}
	for _, prior := range [][]float64{{1, 1}, {0.5, 0.5}, {0.2, 3}, {2, 5, 0.7}, {1, 1, 1}} {
		gs, _ := GlobalHellingerSensitivity(prior)
		worst := 0.0
		for n := 1; n <= 6; n++ {
			cands, _ := PosteriorCandidates(prior, n, 0)
			d := len(prior)
			for i := 0; i < len(cands)/d; i++ {
				u := cands[i*d : (i+1)*d]
				for a := 0; a < d; a++ {
					for b := 0; b < d; b++ {
						if a == b || u[a]-prior[a] < 1 {
							continue
						}
						v := append([]float64(nil), u...)
						v[a]--
						v[b]++
						h, _ := hellinger(u, v)
						worst = math.Max(worst, h)
					}
				}
			}
			ls, _ := LocalHellingerSensitivity(prior, subtract(cands[:d], prior))
			if ls > gs+1e-12 {
				t.Errorf("LS %v > GS %v", ls, gs)
			}
		}
		if worst > gs+1e-12 || worst < gs-1e-12 {
			t.Errorf("prior %v: brute-force max %.15f, GS %.15f", prior, worst, gs)
		}
	}
	gsHalf, _ := GlobalHellingerSensitivity([]float64{0.5, 0.5})
	if !(gsHalf > math.Sqrt(1-math.Pi/4)) {
		t.Errorf("GS(0.5, 0.5) = %v should exceed 002's constant", gsHalf)
	}
}

func subtract(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

func TestPosteriorCandidates(t *testing.T) {
	for _, c := range []struct{ d, n, want int }{{2, 10, 11}, {3, 4, 15}, {4, 3, 20}, {3, 100, 5151}} {
		prior := make([]float64, c.d)
		for i := range prior {
			prior[i] = 1
		}
		cands, err := PosteriorCandidates(prior, c.n, 0)
		if err != nil || len(cands) != c.want*c.d {
			t.Fatalf("d=%d n=%d: %d candidates, err %v", c.d, c.n, len(cands)/c.d, err)
		}
		seen := map[string]bool{}
		for i := 0; i < c.want; i++ {
			u := cands[i*c.d : (i+1)*c.d]
			var s float64
			key := ""
			for _, x := range u {
				s += x - 1
				key += formatG(x) + ","
			}
			if s != float64(c.n) || seen[key] {
				t.Fatalf("bad or repeated candidate %v", u)
			}
			seen[key] = true
		}
	}
}

// bernoulliFloat: frequencies for several dyadic weights, 200 000 trials,
// 5.3 standard errors (false-failure rate 1e-7 each).
func TestBernoulliFloat(t *testing.T) {
	rng := NewSeededRand(seed(110))
	for _, w := range []float64{0.3, 0.5, 1e-3, 0.999, 0x1.8p-3} {
		const n = 200000
		k := 0
		for i := 0; i < n; i++ {
			if rng.bernoulliFloat(w) {
				k++
			}
		}
		se := math.Sqrt(w * (1 - w) / n)
		if math.Abs(float64(k)/n-w) > 5.3*se {
			t.Errorf("w = %g: frequency %g", w, float64(k)/n)
		}
	}
	// Weights below 2^-64 need the multi-word path: never true in 10^5 tries
	// of w = 2^-70 (probability of a false failure 1e-16).
	for i := 0; i < 100000; i++ {
		if rng.bernoulliFloat(0x1p-70) {
			t.Fatal("Bernoulli(2^-70) succeeded")
		}
	}
	if rng.bernoulliFloat(0) || !rng.bernoulliFloat(1) {
		t.Error("edge weights")
	}
}

// exactLaw returns the output law of an ehd/ehds mechanism for counts c,
// computed from the same weights the sampler uses.
func exactLaw(m *hellingerMech, counts []float64, scale func(u []float64) float64) []float64 {
	u := make([]float64, m.d)
	for i := range u {
		u[i] = m.p.Prior[i] + counts[i]
	}
	s := scale(u)
	w := make([]float64, m.ncand)
	var z float64
	for i := range w {
		h, _ := hellinger(u, m.cand(i))
		w[i] = math.Exp(-s * h)
		z += w[i]
	}
	for i := range w {
		w[i] /= z
	}
	return w
}

// neighbourPairs calls f for every ordered pair of neighbouring count
// vectors among the candidates.
func neighbourPairs(m *hellingerMech, f func(x, y []float64)) {
	for i := 0; i < m.ncand; i++ {
		x := subtract(m.cand(i), m.p.Prior)
		for a := 0; a < m.d; a++ {
			for b := 0; b < m.d; b++ {
				if a == b || x[a] < 1 {
					continue
				}
				y := append([]float64(nil), x...)
				y[a]--
				y[b]++
				f(x, y)
			}
		}
	}
}

// EHD is ε-DP: the exact output laws of every neighbouring pair (Beta
// n = 30, Dirichlet d = 3 n = 8, priors below and above 1) have log ratios
// ≤ ε. EHDS is (ε, δ)-DP: the hockey-stick divergence
// Σ_r max(0, P_x(r) − e^ε P_y(r)) of every pair is ≤ δ.
func TestHellingerExactPrivacy(t *testing.T) {
	for _, c := range []struct {
		prior []float64
		n     int
	}{{[]float64{1, 1}, 30}, {[]float64{0.4, 2}, 30}, {[]float64{1, 1, 1}, 8}, {[]float64{0.5, 1, 3}, 8}} {
		ps := PosteriorSpec{Prior: c.prior, N: c.n, Epsilon: 1}
		e := mustNew(t, Spec{Kind: EHD, Posterior: &ps}).(*ehdMech)
		worst := 0.0
		neighbourPairs(e.hellingerMech, func(x, y []float64) {
			lx := exactLaw(e.hellingerMech, x, func([]float64) float64 { return e.scale })
			ly := exactLaw(e.hellingerMech, y, func([]float64) float64 { return e.scale })
			for r := range lx {
				worst = math.Max(worst, math.Log(lx[r]/ly[r]))
			}
		})
		if worst > 1 {
			t.Errorf("ehd %v n=%d: worst log ratio %.6f > ε = 1", c.prior, c.n, worst)
		}
		ps.Delta = 1e-3
		s := mustNew(t, Spec{Kind: EHDS, Posterior: &ps}).(*ehdsMech)
		worstHS, worstRatio := 0.0, 0.0
		neighbourPairs(s.hellingerMech, func(x, y []float64) {
			sc := func(u []float64) float64 { return s.t / s.smooth(u) }
			lx := exactLaw(s.hellingerMech, x, sc)
			ly := exactLaw(s.hellingerMech, y, sc)
			var hs float64
			for r := range lx {
				hs += math.Max(0, lx[r]-math.E*ly[r])
				worstRatio = math.Max(worstRatio, math.Log(lx[r]/ly[r]))
			}
			worstHS = math.Max(worstHS, hs)
		})
		if worstHS > ps.Delta {
			t.Errorf("ehds %v n=%d: hockey-stick %.3g > δ", c.prior, c.n, worstHS)
		}
		t.Logf("%v n=%d: ehd worst log ratio %.4f (ε = 1); ehds worst log ratio %.4f, hockey-stick at ε=1 %.3g (δ = 1e-3), γ = %.4f",
			c.prior, c.n, worst, worstRatio, worstHS, s.gamma)
	}
}

// The EHD sampler against its exact law: chi-square over the 31
// candidates of a Beta n = 30 model, 50 000 draws, false-failure 1e-6.
func TestEHDSamplerChiSquare(t *testing.T) {
	ps := PosteriorSpec{Prior: []float64{1, 1}, N: 30, Epsilon: 2}
	e := mustNew(t, Spec{Kind: EHD, Posterior: &ps}).(*ehdMech)
	counts := []float64{7, 23}
	law := exactLaw(e.hellingerMech, counts, func([]float64) float64 { return e.scale })
	rng := NewSeededRand(seed(120))
	out := make([]float64, 2)
	hist := make([]float64, 31)
	const n = 50000
	for i := 0; i < n; i++ {
		if err := e.ReleasePosterior(rng, counts, out); err != nil {
			t.Fatal(err)
		}
		hist[int(out[0]-1)]++
	}
	var chi float64
	for r := range hist {
		ex := law[r] * n
		chi += (hist[r] - ex) * (hist[r] - ex) / ex
	}
	// χ²(30 df) quantile at 1 − 1e-6 ≈ 84.4.
	if chi > 84.4 {
		t.Errorf("chi-square %.1f > 84.4", chi)
	}
	if e.RDP(2) > 2*4/8.0+1e-12 || e.RDP(2) > PureDPRDP(2, 2) {
		t.Errorf("ehd RDP(2) = %v", e.RDP(2))
	}
}

// EHDS sampler against its exact law (Dirichlet d = 3, n = 10: 66
// candidates), chi-square over the candidates with expected count ≥ 5
// pooled, 50 000 draws, false-failure 1e-6.
func TestEHDSSamplerChiSquare(t *testing.T) {
	ps := PosteriorSpec{Prior: []float64{1, 1, 1}, N: 10, Epsilon: 2, Delta: 1e-4}
	s := mustNew(t, Spec{Kind: EHDS, Posterior: &ps}).(*ehdsMech)
	counts := []float64{2, 3, 5}
	law := exactLaw(s.hellingerMech, counts, func(u []float64) float64 { return s.t / s.smooth(u) })
	idx := map[[3]float64]int{}
	for i := 0; i < s.ncand; i++ {
		c := s.cand(i)
		idx[[3]float64{c[0], c[1], c[2]}] = i
	}
	rng := NewSeededRand(seed(121))
	out := make([]float64, 3)
	hist := make([]float64, s.ncand)
	const n = 50000
	for i := 0; i < n; i++ {
		if err := s.ReleasePosterior(rng, counts, out); err != nil {
			t.Fatal(err)
		}
		hist[idx[[3]float64{out[0], out[1], out[2]}]]++
	}
	var chi, poolO, poolE float64
	df := -1
	for r := range hist {
		ex := law[r] * n
		if ex < 5 {
			poolO += hist[r]
			poolE += ex
			continue
		}
		chi += (hist[r] - ex) * (hist[r] - ex) / ex
		df++
	}
	if poolE > 0 {
		chi += (poolO - poolE) * (poolO - poolE) / poolE
		df++
	}
	// Wilson–Hilferty 1 − 1e-6 quantile of χ²(df).
	z := 4.753
	k := float64(df)
	q := k * math.Pow(1-2/(9*k)+z*math.Sqrt(2/(9*k)), 3)
	if chi > q {
		t.Errorf("chi-square %.1f > %.1f (%d df)", chi, q, df)
	}
	sm, err := s.SmoothSensitivity(counts)
	ls, _ := LocalHellingerSensitivity(ps.Prior, counts)
	if err != nil || !(sm >= ls) {
		t.Errorf("S = %v < LS = %v (%v)", sm, ls, err)
	}
}
