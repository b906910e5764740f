package eval

import (
	"context"
	"encoding/csv"
	"math"
	"os"
	"testing"

	"github.com/dpstage/stage/mechanism"
)

// 002 Corollaries 4.5.1–4.5.2, qualitatively, on seeded runs: with a
// Beta(1, 1) prior and balanced data, EHD's released posterior is closer (in
// Hellinger distance to the true posterior) than LSHist's for small n, and
// LSHist's is closer for large n. 4000 releases per mechanism and setting;
// each conclusion must hold both exactly and in the Monte Carlo mean with
// |z| > 5 (false-failure rate < 6e-7 per comparison), and every Monte Carlo
// mean must agree with its exact value within 5 standard errors (which
// checks the samplers against the closed-form laws).
func TestCorollaries(t *testing.T) {
	rng := mechanism.NewSeededRand([32]byte{7, 0xe7})
	cases := []struct {
		eps     float64
		n       int
		ehdWins bool
	}{
		{0.2, 2, true},     // Corollary 4.5.2: small n
		{0.2, 4, true},     //
		{0.2, 1000, false}, // Corollary 4.5.1: large n
		{0.8, 100, false},
		{0.8, 1000, false},
	}
	for _, c := range cases {
		st := PosteriorSetting{Model: "beta-binomial", Prior: []float64{1, 1}, Counts: []float64{float64(c.n / 2), float64(c.n - c.n/2)}, Epsilon: c.eps, Delta: 1e-8, Reps: 4000}
		rows, err := EvaluatePosterior(rng, st)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if math.Abs(r.Mean-r.Exact) > 5*r.StdErr+1e-12 {
				t.Errorf("ε=%g n=%d %s: Monte Carlo %.4f ± %.4f vs exact %.4f", c.eps, c.n, r.Mechanism, r.Mean, r.StdErr, r.Exact)
			}
			if r.Mechanism == PosteriorEHDL && r.DP {
				t.Error("EHDL labelled differentially private")
			}
		}
		lap, ehd := rows[0], rows[1]
		diff, se := ehd.Mean-lap.Mean, math.Hypot(ehd.StdErr, lap.StdErr)
		z := diff / se
		t.Logf("ε=%g n=%d: E[H] LSHist %.4f (MC %.4f±%.4f), EHD %.4f (MC %.4f±%.4f); EHD − LSHist exact %.4f, MC %.4f (z = %.1f)",
			c.eps, c.n, lap.Exact, lap.Mean, lap.StdErr, ehd.Exact, ehd.Mean, ehd.StdErr, ehd.Exact-lap.Exact, diff, z)
		if c.ehdWins && !(ehd.Exact < lap.Exact && z < -5) {
			t.Errorf("ε=%g n=%d: EHD should be more accurate (z = %.1f)", c.eps, c.n, z)
		}
		if !c.ehdWins && !(lap.Exact < ehd.Exact && z > 5) {
			t.Errorf("ε=%g n=%d: LSHist should be more accurate (z = %.1f)", c.eps, c.n, z)
		}
	}
}

func TestRunWritesCSVs(t *testing.T) {
	dir := t.TempDir()
	s, err := RunPosteriorSettings(context.Background(), dir, 3, DefaultPosteriorSettings(50))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Files) != 2 || len(s.Rows) != 4*len(DefaultPosteriorSettings(1)) || len(s.Comparisons) != len(DefaultPosteriorSettings(1)) {
		t.Fatalf("summary: %d files, %d rows, %d comparisons", len(s.Files), len(s.Rows), len(s.Comparisons))
	}
	for _, f := range s.Files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(fh).ReadAll()
		fh.Close()
		if err != nil || len(recs) < 2 {
			t.Fatalf("%s: %v, %d records", f, err, len(recs))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunPosterior(ctx, "", 1); err == nil {
		t.Error("cancelled context not reported")
	}
}

// clampedPMF sums to 1 and matches a direct summation.
func TestClampedPMF(t *testing.T) {
	for _, c := range [][3]float64{{0, 5, 1.25}, {3, 5, 2}, {5, 5, 0.5}, {2, 10, 10}} {
		p := clampedPMF(int(c[0]), int(c[1]), c[2])
		q := math.Exp(-1 / c[2])
		direct := make([]float64, len(p))
		for z := -2000; z <= 2000; z++ {
			v := min(max(int(c[0])+z, 0), int(c[1]))
			direct[v] += (1 - q) / (1 + q) * math.Pow(q, math.Abs(float64(z)))
		}
		var s float64
		for i := range p {
			s += p[i]
			if math.Abs(p[i]-direct[i]) > 1e-12 {
				t.Errorf("%v: pmf[%d] = %v, direct %v", c, i, p[i], direct[i])
			}
		}
		if math.Abs(s-1) > 1e-12 {
			t.Errorf("%v: sums to %v", c, s)
		}
	}
}
