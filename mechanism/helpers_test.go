package mechanism

import (
	"flag"
	"math"
	"sort"
	"testing"
)

// -long enables the heavier sweeps (more random trials, larger grids).
var long = flag.Bool("long", false, "run the long property and distribution sweeps")

// trials returns n, or 10·n with -long.
func trials(n int) int {
	if *long {
		return 10 * n
	}
	return n
}

// seed returns a fixed test seed derived from a small integer.
func seed(i byte) [32]byte {
	var s [32]byte
	s[0], s[31] = i, 0x5e
	return s
}

// kolmogorovThreshold returns the critical value of the one-sample
// Kolmogorov–Smirnov statistic D_n for sample size n at false-failure rate p,
// from the asymptotic Kolmogorov distribution P(√n·D > x) =
// 2·Σ_{k≥1} (−1)^{k−1}·exp(−2k²x²) with Stephens' finite-n correction
// (√n + 0.12 + 0.11/√n). For a discontinuous CDF (atoms) the test is
// conservative, so p is an upper bound on the false-failure rate.
func kolmogorovThreshold(n int, p float64) float64 {
	tail := func(x float64) float64 {
		s := 0.0
		for k := 1; k <= 100; k++ {
			term := 2 * math.Exp(-2*float64(k*k)*x*x)
			if k%2 == 0 {
				term = -term
			}
			s += term
		}
		return s
	}
	lo, hi := 0.3, 10.0
	for i := 0; i < 200; i++ {
		mid := (lo + hi) / 2
		if tail(mid) > p {
			lo = mid
		} else {
			hi = mid
		}
	}
	sn := math.Sqrt(float64(n))
	return hi / (sn + 0.12 + 0.11/sn)
}

// ksStatistic returns sup_x |ECDF(x) − F(x)| for the samples xs (sorted in
// place). leftLimit(x) is F(x−) for the left-hand comparison; for continuous
// distributions pass nil (F itself is used). It differs from F at atoms, e.g.
// the floor 2^-1022 where the Dirichlet sampler reports all smaller values.
func ksStatistic(xs []float64, cdf func(float64) float64, leftLimit func(float64) float64) float64 {
	sort.Float64s(xs)
	if leftLimit == nil {
		leftLimit = cdf
	}
	n := float64(len(xs))
	d := 0.0
	for i, x := range xs {
		d = math.Max(d, float64(i+1)/n-cdf(x))
		d = math.Max(d, leftLimit(x)-float64(i)/n)
	}
	return d
}

// zThreshold returns the two-sided standard normal critical value for
// false-failure rate p (bisection on erfc).
func zThreshold(p float64) float64 {
	lo, hi := 0.0, 40.0
	for i := 0; i < 200; i++ {
		mid := (lo + hi) / 2
		if math.Erfc(mid/math.Sqrt2) > p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// logSumExp returns log Σ exp(v_i).
func logSumExp(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	if math.IsInf(m, -1) {
		return m
	}
	s := 0.0
	for _, x := range v {
		s += math.Exp(x - m)
	}
	return m + math.Log(s)
}

// mustNew calls New and fails the test on error.
func mustNew(t testing.TB, spec Spec) Mechanism {
	t.Helper()
	m, err := New(spec)
	if err != nil {
		t.Fatalf("New(%+v): %v", spec, err)
	}
	return m
}
