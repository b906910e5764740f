package mechanism

import (
	"errors"
	"math"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

// stageLaplace returns the stage's Laplace baseline for (Δ1, Δ∞), the
// sensitivities plan.DeriveSensitivity gives (replace m=1: (2, 1);
// add_remove m=1: (1, 1); replace m=2: (4, 2)).
func stageLaplace(t *testing.T, l1, linf, eps float64) Mechanism {
	t.Helper()
	return mustNew(t, Spec{Kind: Laplace, Order: 2, RDPEpsilon: eps,
		Sensitivity: Sensitivity{L1: l1, L2Sq: l1 * linf, LInf: linf}})
}

// The wrapper reports exactly the wrapped mechanism's curve, parameters and
// spec, plus the prior.
func TestCountPosteriorDelegates(t *testing.T) {
	base := stageLaplace(t, 2, 1, 0.7)
	m, err := NewCountPosterior(base, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []float64{1.01, 1.5, 2, 3, 10, 256, math.NaN(), 1, math.Inf(1)} {
		if got, want := m.RDP(o), base.RDP(o); got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Errorf("RDP(%g) = %v, base %v", o, got, want)
		}
	}
	if m.RDP(2) > 0.7 || m.RDP(2) < 0.7*(1-1e-9) {
		t.Errorf("RDP(2) = %v, target 0.7", m.RDP(2))
	}
	if m.MaxOrder() != base.MaxOrder() || m.Spec().Kind != Laplace || m.Spec().RDPEpsilon != 0.7 {
		t.Errorf("MaxOrder %v, Spec %+v", m.MaxOrder(), m.Spec())
	}
	p := m.Params()
	if p.Scale != base.Params().Scale || p.Prior != 0.5 || m.Prior() != 0.5 || base.Params().Prior != 0 {
		t.Errorf("Params %+v, base %+v", p, base.Params())
	}
	if m.Base() != base {
		t.Error("Base() is not the wrapped mechanism")
	}
}

// Release, ReleaseCounts, ReleasePosterior and the Laplace baseline's Release
// are the same draw post-processed differently: with the same seed,
// α̃ = α₀ + max(x̃, 0), the baseline's output is x̃ clipped and renormalized,
// and the posterior's Release is α̃/Σα̃ (PosteriorMean).
func TestCountPosteriorSameDraw(t *testing.T) {
	base := stageLaplace(t, 2, 1, 0.3) // b ≈ 5: negatives and zeros occur
	m, _ := NewCountPosterior(base, 1.5)
	cr := base.(CountReleaser)
	counts := []float64{0, 1, 3, 40, 0, 7}
	d := len(counts)
	sawNegative := false
	for s := byte(0); s < 50; s++ {
		noisy := make([]float64, d)
		if err := cr.ReleaseCounts(NewSeededRand(seed(s)), counts, noisy); err != nil {
			t.Fatal(err)
		}
		alpha := make([]float64, d)
		if err := m.ReleasePosterior(NewSeededRand(seed(s)), counts, alpha); err != nil {
			t.Fatal(err)
		}
		mean := make([]float64, d)
		if err := m.Release(NewSeededRand(seed(s)), counts, mean); err != nil {
			t.Fatal(err)
		}
		proj := make([]float64, d)
		if err := base.Release(NewSeededRand(seed(s)), counts, proj); err != nil {
			t.Fatal(err)
		}
		wantMean := make([]float64, d)
		if err := PosteriorMean(alpha, wantMean); err != nil {
			t.Fatal(err)
		}
		clipSum := 0.0
		for i := range counts {
			if noisy[i] != math.Trunc(noisy[i]) {
				t.Fatalf("noisy count %v is not a whole number", noisy[i])
			}
			if noisy[i] < 0 {
				sawNegative = true
			}
			if want := 1.5 + math.Max(noisy[i], 0); alpha[i] != want {
				t.Errorf("seed %d bin %d: α̃ %v, want α₀ + max(x̃, 0) = %v", s, i, alpha[i], want)
			}
			if alpha[i] < 1.5 {
				t.Errorf("α̃ %v below the prior", alpha[i])
			}
			if math.Abs(mean[i]-wantMean[i]) > 1e-15 {
				t.Errorf("Release %v, α̃/Σα̃ %v", mean[i], wantMean[i])
			}
			clipSum += math.Max(noisy[i], 0)
		}
		for i := range counts {
			want := 1 / float64(d)
			if clipSum > 0 {
				want = math.Max(noisy[i], 0) / clipSum
			}
			if math.Abs(proj[i]-want) > 1e-15 {
				t.Errorf("baseline Release %v, clipped/renormalized ReleaseCounts %v", proj[i], want)
			}
		}
	}
	if !sawNegative {
		t.Error("no negative noisy count in 50 draws at b ≈ 5: the test did not exercise the clamp")
	}
}

// Distribution of the sampler: α̃_i − α₀ has the law of max(c_i + Z, 0),
// Z ~ Lap_Z(b), checked by a chi-square test per coordinate (c = 0 and
// c = 4; cells 0..K with the last holding the upper tail, expected count
// ≥ 20 per cell). False-failure rate ≤ 1e-6 per coordinate.
func TestCountPosteriorChiSquare(t *testing.T) {
	base := stageLaplace(t, 1, 1, 0.8)
	m, _ := NewCountPosterior(base, 1)
	b := base.Params().Scale
	n := trials(100000)
	counts := []float64{0, 4}
	rng := NewSeededRand(seed(21))
	obs := [2]map[int]int{{}, {}}
	alpha := make([]float64, 2)
	for i := 0; i < n; i++ {
		if err := m.ReleasePosterior(rng, counts, alpha); err != nil {
			t.Fatal(err)
		}
		for j := range alpha {
			obs[j][int(alpha[j]-1)]++
		}
	}
	q := math.Exp(-1 / b)
	lap := func(z int) float64 { return (1 - q) / (1 + q) * math.Pow(q, math.Abs(float64(z))) }
	for j, c := range counts {
		ci := int(c)
		pmf := func(v int) float64 { // P[max(c+Z, 0) = v]
			if v > 0 {
				return lap(v - ci)
			}
			p := 0.0
			for z := -ci - 4000; z <= -ci; z++ {
				p += lap(z)
			}
			return p
		}
		upper := func(k int) float64 { // P[max(c+Z,0) ≥ k], k ≥ 1
			p := 0.0
			for v := k; v <= ci+4000; v++ {
				p += lap(v - ci)
			}
			return p
		}
		K := 1
		for float64(n)*upper(K+1) >= 20 {
			K++
		}
		chi2, cells := 0.0, 0
		for v := 0; v <= K; v++ {
			p := pmf(v)
			o := float64(obs[j][v])
			if v == K {
				p = upper(K)
				for w, cnt := range obs[j] {
					if w > K {
						o += float64(cnt)
					}
				}
			}
			e := p * float64(n)
			chi2 += (o - e) * (o - e) / e
			cells++
		}
		crit := distuv.ChiSquared{K: float64(cells - 1)}.Quantile(1 - 1e-6)
		if chi2 > crit {
			t.Errorf("c=%d b=%g: chi-square %.1f > %.1f (%d cells)", ci, b, chi2, crit, cells)
		}
	}
}

// clampedRenyi is D_λ(max(c+Z,0) ‖ max(c′+Z,0)) for Z ~ Lap_Z(b), by
// summation over the output values.
func clampedRenyi(lambda float64, c, c2 int, b float64) float64 {
	q := math.Exp(-1 / b)
	logLap := func(z int) float64 { return math.Log((1-q)/(1+q)) - math.Abs(float64(z))/b }
	logP := func(v, c int) float64 {
		if v > 0 {
			return logLap(v - c)
		}
		// P[Z ≤ −c] = q^c/(1+q) for c ≥ 0.
		return float64(c)*math.Log(q) - math.Log1p(q)
	}
	hi := max(c, c2) + int(80*b*lambda) + 80
	var terms []float64
	for v := 0; v <= hi; v++ {
		terms = append(terms, lambda*logP(v, c)+(1-lambda)*logP(v, c2))
	}
	return logSumExp(terms) / (lambda - 1)
}

// Privacy of the output itself: the exact Rényi divergence of the law of α̃
// (a product over bins of clamped discrete Laplace laws, shifted by the
// prior) between every pair of neighbouring count vectors within the
// stage's sensitivities (d = 3, counts 0..3 and 30, near and far from the
// clamp) never exceeds RDP(λ), and the worst pair comes within 0.1% of it
// (the clamp only ever helps; far from 0 the bound is attained).
func TestCountPosteriorExactRenyi(t *testing.T) {
	for _, s := range []struct{ l1, linf int }{{1, 1}, {2, 1}, {4, 2}} {
		base := stageLaplace(t, float64(s.l1), float64(s.linf), 0.9)
		m, _ := NewCountPosterior(base, 1)
		b := base.Params().Scale
		vals := []int{0, 1, 2, 3, 30}
		for _, lambda := range []float64{1.5, 2, 8} {
			bound := m.RDP(lambda)
			worst := 0.0
			var x [3]int
			var rec func(i int)
			rec = func(i int) {
				if i == 3 {
					// every change vector with |Δ_i| ≤ Δ∞, Σ|Δ_i| ≤ Δ1, x + Δ ≥ 0
					for d0 := -s.linf; d0 <= s.linf; d0++ {
						for d1 := -s.linf; d1 <= s.linf; d1++ {
							for d2 := -s.linf; d2 <= s.linf; d2++ {
								dd := [3]int{d0, d1, d2}
								l1 := 0
								ok := true
								for j, v := range dd {
									l1 += max(v, -v)
									ok = ok && x[j]+v >= 0
								}
								if !ok || l1 > s.l1 || l1 == 0 {
									continue
								}
								sum := 0.0
								for j := range dd {
									if dd[j] != 0 {
										sum += clampedRenyi(lambda, x[j], x[j]+dd[j], b)
									}
								}
								if !(sum <= bound*(1+1e-9)) {
									t.Fatalf("Δ1=%d Δ∞=%d λ=%g x=%v Δ=%v: exact %.12g > RDP %.12g", s.l1, s.linf, lambda, x, dd, sum, bound)
								}
								worst = math.Max(worst, sum)
							}
						}
					}
					return
				}
				for _, v := range vals {
					x[i] = v
					rec(i + 1)
				}
			}
			rec(0)
			if worst < bound*(1-1e-3) {
				t.Errorf("Δ1=%d Δ∞=%d λ=%g: worst exact divergence %.9g well below RDP %.9g: the reported curve is not the noise's", s.l1, s.linf, lambda, worst, bound)
			}
		}
	}
}

func TestCountPosteriorErrors(t *testing.T) {
	lap := stageLaplace(t, 2, 1, 1)
	gauss := mustNew(t, Spec{Kind: Gaussian, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2}})
	dir := mustNew(t, Spec{Kind: Dirichlet, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2, LInf: 1}})
	for _, c := range []struct {
		name  string
		base  Mechanism
		prior float64
	}{
		{"nil base", nil, 1}, {"gaussian", gauss, 1}, {"dirichlet", dir, 1},
		{"prior 0", lap, 0}, {"prior < 0", lap, -1}, {"prior NaN", lap, math.NaN()},
		{"prior +Inf", lap, math.Inf(1)}, {"prior > 1e12", lap, 2e12},
	} {
		if m, err := NewCountPosterior(c.base, c.prior); err == nil || m != nil || !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("%s: (%v, %v), want a *ParamError", c.name, m, err)
		}
	}
	m, err := NewCountPosterior(lap, 1e12)
	if err != nil {
		t.Fatal(err)
	}
	rng := NewSeededRand(seed(3))
	for _, counts := range [][]float64{{1}, {1, 0.5}, {1, -1}, {1, math.NaN()}, {1, math.Inf(1)}, {1, 0x1p54}} {
		out := []float64{7, 7}
		if len(counts) == 1 {
			out = out[:1]
		}
		if err := m.ReleasePosterior(rng, counts, out); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("counts %v: err %v", counts, err)
		}
		if out[0] != 7 {
			t.Errorf("counts %v: output written on error", counts)
		}
		if err := m.Release(rng, counts, out); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("Release counts %v: err %v", counts, err)
		}
	}
	if err := m.ReleasePosterior(rng, []float64{1, 2}, make([]float64, 3)); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("length mismatch: %v", err)
	}
	if err := m.ReleasePosterior(nil, []float64{1, 2}, make([]float64, 2)); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("nil rng: %v", err)
	}
	for _, a := range [][]float64{{1}, {1, 0}, {1, -2}, {1, math.NaN()}, {1, math.Inf(1)}, {1, 1e301}} {
		if err := PosteriorMean(a, make([]float64, len(a))); !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("PosteriorMean(%v): %v", a, err)
		}
	}
	if err := PosteriorMean([]float64{1, 3}, make([]float64, 3)); !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("PosteriorMean length mismatch: %v", err)
	}
	out := make([]float64, 2)
	if err := PosteriorMean([]float64{1, 3}, out); err != nil || out[0] != 0.25 || out[1] != 0.75 {
		t.Errorf("PosteriorMean([1 3]) = %v, %v", out, err)
	}
}

// ReleasePosterior and Release do not allocate.
func TestCountPosteriorZeroAllocs(t *testing.T) {
	m, _ := NewCountPosterior(stageLaplace(t, 2, 1, 1), 1)
	rng := NewSeededRand(seed(4))
	counts := []float64{3, 0, 9, 1}
	out := make([]float64, 4)
	if a := testing.AllocsPerRun(100, func() { _ = m.ReleasePosterior(rng, counts, out) }); a != 0 {
		t.Errorf("ReleasePosterior: %v allocations", a)
	}
	if a := testing.AllocsPerRun(100, func() { _ = m.Release(rng, counts, out) }); a != 0 {
		t.Errorf("Release: %v allocations", a)
	}
}
