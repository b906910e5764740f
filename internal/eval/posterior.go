// This file (folded in from internal/evalposterior, which had no importers)
// compares the utility of the private-posterior mechanisms — laplace-
// posterior (002 LSHist), ehd (002 EHD), ehds (002 EHDS) and, for reference
// only, EHDL (002 Algorithm 4: the exponential mechanism with LOCAL
// sensitivity, which is NOT differentially private) — by the Hellinger
// distance between the released posterior and the true one, as in 004 §6,
// and checks 002 Corollaries 4.5.1–4.5.2 qualitatively (LSHist more accurate
// than EHD for large n, EHD better for small n).
//
// Every figure is computed twice: exactly (the output laws of all four
// mechanisms are known in closed form: the clamped discrete Laplace of
// LSHist, the Gibbs weights of the exponential mechanisms) and by seeded
// Monte Carlo runs through the mechanisms' own samplers, whose mean and
// standard error are reported next to the exact value.
//
// EHDL is built here from exported helpers
// (mechanism.LocalHellingerSensitivity, mechanism.SampleByWeight); it is
// deliberately not a mechanism.Kind and cannot be constructed through
// mechanism.New or used by the stage.

package eval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/dpstage/stage/mechanism"
)

// Mechanism names in the CSVs and PosteriorSummary.
const (
	PosteriorLSHist = "lshist"
	PosteriorEHD    = "ehd"
	PosteriorEHDS   = "ehds"
	PosteriorEHDL   = "ehdl-NOT-DP" // 002 Algorithm 4: local sensitivity, not differentially private
)

// PosteriorSetting is one comparison point: a model (prior), a dataset (counts) and
// privacy parameters.
type PosteriorSetting struct {
	Model   string    // "beta-binomial" or "dirichlet-multinomial"
	Prior   []float64 // α
	Counts  []float64 // c, Σc = n
	Epsilon float64
	Delta   float64 // for PosteriorEHDS
	Reps    int     // Monte Carlo releases per mechanism
}

// N returns Σcounts.
func (s PosteriorSetting) N() int {
	var n float64
	for _, c := range s.Counts {
		n += c
	}
	return int(n)
}

// PosteriorRow is one mechanism's utility at one setting.
type PosteriorRow struct {
	Model     string
	N         int
	Counts    []float64
	Epsilon   float64
	Mechanism string
	DP        bool    // false for PosteriorEHDL
	Exact     float64 // exact E[H(true posterior, released)]
	Mean      float64 // Monte Carlo mean of H over Reps releases
	StdErr    float64 // its standard error
	Reps      int
	PExact    float64 // exact P[released = true posterior]
}

// PosteriorComparison is LSHist versus EHD at one setting (002 Corollaries
// 4.5.1–4.5.2): Diff = E_EHD[H] − E_LSHist[H] (exact, and Monte Carlo with
// its standard error; Z = DiffMC/DiffSE).
type PosteriorComparison struct {
	Model          string
	N              int
	Counts         []float64
	Epsilon        float64
	DiffExact      float64
	DiffMC, DiffSE float64
	Z              float64
	Better         string // "lshist" or "ehd" (by the exact difference)
}

// PosteriorSummary is what RunPosterior returns.
type PosteriorSummary struct {
	Rows        []PosteriorRow
	Comparisons []PosteriorComparison
	Files       []string
}

// DefaultPosteriorSettings are the settings RunPosterior evaluates: the Beta–Binomial model
// with a Beta(1, 1) prior at ε = 0.8 (004 §6's prior and ε; δ = 1e-8 for
// EHDS) and at ε = 0.2, on balanced data (half ones, so that clamping at 0
// and n favours neither mechanism) for n from 2 to 1000; 004 §6's
// unbalanced data (10% ones) at ε = 0.8 for n = 10, 100, 1000; and the
// Dirichlet–Multinomial model with a Dir(1, 1, 1) prior on data split
// 20/30/50% (004 §6) for n = 4, 10, 30 at both ε.
func DefaultPosteriorSettings(reps int) []PosteriorSetting {
	var out []PosteriorSetting
	for _, eps := range []float64{0.2, 0.8} {
		for _, n := range []int{2, 4, 10, 30, 100, 300, 1000} {
			out = append(out, PosteriorSetting{Model: "beta-binomial", Prior: []float64{1, 1}, Counts: []float64{float64(n / 2), float64(n - n/2)}, Epsilon: eps, Delta: 1e-8, Reps: reps})
		}
	}
	for _, n := range []int{10, 100, 1000} {
		ones := math.Round(0.1 * float64(n))
		out = append(out, PosteriorSetting{Model: "beta-binomial", Prior: []float64{1, 1}, Counts: []float64{ones, float64(n) - ones}, Epsilon: 0.8, Delta: 1e-8, Reps: reps})
	}
	for _, eps := range []float64{0.2, 0.8} {
		for _, n := range []int{4, 10, 30} {
			a, b := math.Round(0.2*float64(n)), math.Round(0.3*float64(n))
			out = append(out, PosteriorSetting{Model: "dirichlet-multinomial", Prior: []float64{1, 1, 1}, Counts: []float64{a, b, float64(n) - a - b}, Epsilon: eps, Delta: 1e-8, Reps: reps})
		}
	}
	return out
}

// RunPosterior evaluates DefaultPosteriorSettings(2000) with randomness from seed (a
// simulation: mechanism.NewSeededRand, never used for real data), writes
// outDir/posterior_utility.csv and outDir/posterior_comparison.csv, and
// returns the summary. It stops early with ctx's error if ctx is done.
func RunPosterior(ctx context.Context, outDir string, seed uint64) (PosteriorSummary, error) {
	return RunPosteriorSettings(ctx, outDir, seed, DefaultPosteriorSettings(2000))
}

// RunPosteriorSettings is RunPosterior on the given settings.
func RunPosteriorSettings(ctx context.Context, outDir string, seed uint64, settings []PosteriorSetting) (PosteriorSummary, error) {
	var sum PosteriorSummary
	var s [32]byte
	for i := 0; i < 8; i++ {
		s[i] = byte(seed >> (8 * i))
	}
	s[31] = 0xe7
	rng := mechanism.NewSeededRand(s)
	for _, st := range settings {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		rows, err := EvaluatePosterior(rng, st)
		if err != nil {
			return sum, fmt.Errorf("evalposterior: %s n=%d: %w", st.Model, st.N(), err)
		}
		sum.Rows = append(sum.Rows, rows...)
		var lap, ehd *PosteriorRow
		for i := range rows {
			switch rows[i].Mechanism {
			case PosteriorLSHist:
				lap = &rows[i]
			case PosteriorEHD:
				ehd = &rows[i]
			}
		}
		c := PosteriorComparison{Model: st.Model, N: st.N(), Counts: st.Counts, Epsilon: st.Epsilon,
			DiffExact: ehd.Exact - lap.Exact, DiffMC: ehd.Mean - lap.Mean,
			DiffSE: math.Hypot(ehd.StdErr, lap.StdErr)}
		c.Z = c.DiffMC / c.DiffSE
		c.Better = PosteriorLSHist
		if c.DiffExact < 0 {
			c.Better = PosteriorEHD
		}
		sum.Comparisons = append(sum.Comparisons, c)
	}
	if outDir != "" {
		files, err := writePosteriorCSVs(outDir, sum)
		sum.Files = files
		if err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// EvaluatePosterior returns the four mechanisms' rows at one setting.
func EvaluatePosterior(rng *mechanism.Rand, st PosteriorSetting) ([]PosteriorRow, error) {
	n := st.N()
	if n < 1 || st.Reps < 2 {
		return nil, errors.New("need n ≥ 1 and at least 2 repetitions")
	}
	d := len(st.Prior)
	truth := make([]float64, d)
	for i := range truth {
		truth[i] = st.Prior[i] + st.Counts[i]
	}
	cands, err := mechanism.PosteriorCandidates(st.Prior, n, 0)
	if err != nil {
		return nil, err
	}
	nc := len(cands) / d
	cand := func(i int) []float64 { return cands[i*d : (i+1)*d] }
	hTruth := make([]float64, nc)
	truthIdx := -1
	for i := range hTruth {
		if hTruth[i], err = mechanism.Hellinger(truth, cand(i)); err != nil {
			return nil, err
		}
		if hTruth[i] == 0 {
			truthIdx = i
		}
	}
	ps := mechanism.PosteriorSpec{Prior: st.Prior, N: n, Epsilon: st.Epsilon}
	var rows []PosteriorRow
	row := func(name string, dp bool, exact, pTruth float64, draw func() ([]float64, error)) error {
		r := PosteriorRow{Model: st.Model, N: n, Counts: st.Counts, Epsilon: st.Epsilon, Mechanism: name, DP: dp, Reps: st.Reps, Exact: exact, PExact: pTruth}
		var s, s2 float64
		for k := 0; k < st.Reps; k++ {
			a, err := draw()
			if err != nil {
				return err
			}
			h, err := mechanism.Hellinger(truth, a)
			if err != nil {
				return err
			}
			s += h
			s2 += h * h
		}
		m := s / float64(st.Reps)
		r.Mean = m
		r.StdErr = math.Sqrt(math.Max(0, s2/float64(st.Reps)-m*m) / float64(st.Reps-1))
		rows = append(rows, r)
		return nil
	}
	out := make([]float64, d)
	release := func(m mechanism.Mechanism) func() ([]float64, error) {
		return func() ([]float64, error) {
			err := m.(mechanism.PosteriorReleaser).ReleasePosterior(rng, st.Counts, out)
			return out, err
		}
	}
	// gibbs returns E[H] and P[truth] under P[i] ∝ exp(−scale·H_i).
	gibbs := func(scale float64) (float64, float64) {
		var z, eh float64
		for i := range hTruth {
			w := math.Exp(-scale * hTruth[i])
			z += w
			eh += w * hTruth[i]
		}
		return eh / z, math.Exp(-scale*hTruth[truthIdx]) / z
	}

	// LSHist.
	lp, err := mechanism.New(mechanism.Spec{Kind: mechanism.LaplacePosterior, Posterior: &ps})
	if err != nil {
		return nil, err
	}
	le, lt, err := lshistExact(st, lp.Params().Scale)
	if err != nil {
		return nil, err
	}
	if err := row(PosteriorLSHist, true, le, lt, release(lp)); err != nil {
		return nil, err
	}
	// EHD: exponent ε/(2Δ), Δ the sensitivity the mechanism uses.
	eh, err := mechanism.New(mechanism.Spec{Kind: mechanism.EHD, Posterior: &ps})
	if err != nil {
		return nil, err
	}
	ee, et := gibbs(st.Epsilon / (2 * eh.Params().HellingerSensitivity))
	if err := row(PosteriorEHD, true, ee, et, release(eh)); err != nil {
		return nil, err
	}
	// EHDS: exponent t/S(c), t = ε/4 (1 − 1e-9) as in mechanism.newEHDS.
	pss := ps
	pss.Delta = st.Delta
	es, err := mechanism.New(mechanism.Spec{Kind: mechanism.EHDS, Posterior: &pss})
	if err != nil {
		return nil, err
	}
	sm, err := es.(interface {
		SmoothSensitivity([]float64) (float64, error)
	}).SmoothSensitivity(st.Counts)
	if err != nil {
		return nil, err
	}
	se, stt := gibbs(st.Epsilon / 4 * (1 - 1e-9) / sm)
	if err := row(PosteriorEHDS, true, se, stt, release(es)); err != nil {
		return nil, err
	}
	// EHDL — NOT DIFFERENTIALLY PRIVATE (002 Algorithm 4, 004 §4.1.2): the
	// exponent uses the local sensitivity of the data itself.
	ls, err := mechanism.LocalHellingerSensitivity(st.Prior, st.Counts)
	if err != nil {
		return nil, err
	}
	scale := st.Epsilon / (2 * ls)
	le2, lt2 := gibbs(scale)
	if err := row(PosteriorEHDL, false, le2, lt2, func() ([]float64, error) {
		i, err := mechanism.SampleByWeight(rng, nc, func(i int) float64 { return math.Exp(-scale * hTruth[i]) })
		if err != nil {
			return nil, err
		}
		copy(out, cand(i))
		return out, nil
	}); err != nil {
		return nil, err
	}
	return rows, nil
}

// lshistExact returns E[H(truth, LSHist output)] and P[output = truth]
// exactly: the first d−1 noisy counts are independent clamp(c_i + Z_i, 0, n)
// with Z_i discrete Laplace of scale b, the last is clamp(n − Σ, 0, n) (002
// Algorithm 2), enumerated over the (n+1)^(d−1) values (small domains).
func lshistExact(st PosteriorSetting, b float64) (eh, pTruth float64, err error) {
	d := len(st.Prior)
	n := st.N()
	if math.Pow(float64(n+1), float64(d-1)) > 5e6 {
		return 0, 0, errors.New("domain too large for the exact LSHist law")
	}
	truth := make([]float64, d)
	for i := range truth {
		truth[i] = st.Prior[i] + st.Counts[i]
	}
	pmfs := make([][]float64, d-1)
	for i := range pmfs {
		pmfs[i] = clampedPMF(int(st.Counts[i]), n, b)
	}
	v := make([]int, d-1)
	a := make([]float64, d)
	for {
		p := 1.0
		s := 0
		for i, x := range v {
			p *= pmfs[i][x]
			s += x
			a[i] = st.Prior[i] + float64(x)
		}
		a[d-1] = st.Prior[d-1] + float64(min(max(n-s, 0), n))
		h, err := mechanism.Hellinger(truth, a)
		if err != nil {
			return 0, 0, err
		}
		eh += p * h
		if h == 0 {
			pTruth += p
		}
		k := 0
		for k < d-1 {
			v[k]++
			if v[k] <= n {
				break
			}
			v[k] = 0
			k++
		}
		if k == d-1 {
			break
		}
	}
	return eh, pTruth, nil
}

// clampedPMF is the law of clamp(c + Z, 0, n), Z discrete Laplace with
// scale b (P[Z = z] ∝ e^{−|z|/b}), on 0..n, in closed form.
func clampedPMF(c, n int, b float64) []float64 {
	q := math.Exp(-1 / b)
	norm := (1 - q) / (1 + q)
	out := make([]float64, n+1)
	for v := 1; v < n; v++ {
		out[v] = norm * math.Pow(q, math.Abs(float64(v-c)))
	}
	// P[Z ≤ −c] and P[Z ≥ n − c]: tails Σ_{k≥m} norm·q^k = norm·q^m/(1−q)
	// for m ≥ 1, and 1 − (that) + … for m ≤ 0; computed by complement.
	tail := func(m int) float64 { // P[Z ≥ m]
		if m >= 1 {
			return norm * math.Pow(q, float64(m)) / (1 - q)
		}
		return 1 - norm*math.Pow(q, float64(1-m))/(1-q)
	}
	out[0] += tail(c) // P[Z ≤ −c] = P[Z ≥ c]
	if n > 0 {
		out[n] += tail(n - c)
	} else {
		out[0] = 1
	}
	return out
}

func writePosteriorCSVs(dir string, s PosteriorSummary) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f1 := filepath.Join(dir, "posterior_utility.csv")
	rows := [][]string{{"model", "n", "counts", "epsilon", "mechanism", "differentially_private", "exact_mean_hellinger", "mc_mean_hellinger", "mc_stderr", "reps", "exact_p_truth"}}
	for _, r := range s.Rows {
		rows = append(rows, []string{r.Model, strconv.Itoa(r.N), fmtVec(r.Counts), posteriorFloat(r.Epsilon), r.Mechanism, strconv.FormatBool(r.DP), posteriorFloat(r.Exact), posteriorFloat(r.Mean), posteriorFloat(r.StdErr), strconv.Itoa(r.Reps), posteriorFloat(r.PExact)})
	}
	if err := writeCSV(f1, rows[0], rows[1:]); err != nil {
		return nil, err
	}
	f2 := filepath.Join(dir, "posterior_comparison.csv")
	rows = [][]string{{"model", "n", "counts", "epsilon", "ehd_minus_lshist_exact", "ehd_minus_lshist_mc", "mc_stderr", "z", "better"}}
	for _, c := range s.Comparisons {
		rows = append(rows, []string{c.Model, strconv.Itoa(c.N), fmtVec(c.Counts), posteriorFloat(c.Epsilon), posteriorFloat(c.DiffExact), posteriorFloat(c.DiffMC), posteriorFloat(c.DiffSE), posteriorFloat(c.Z), c.Better})
	}
	if err := writeCSV(f2, rows[0], rows[1:]); err != nil {
		return []string{f1}, err
	}
	return []string{f1, f2}, nil
}

func posteriorFloat(x float64) string { return strconv.FormatFloat(x, 'g', 8, 64) }

func fmtVec(v []float64) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += " "
		}
		s += strconv.FormatFloat(x, 'g', -1, 64)
	}
	return s
}
