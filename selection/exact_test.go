package selection

import (
	"math"
	"testing"
)

// bernoulliPairs is a neighbouring pair's selections of the keys one user
// changes over a period: kinds[j] copies of independent Bernoulli pairs
// (p[j] on D′, q[j] on D). The rest of the output is equal on both sides.
type bernoulliPairs struct {
	count []int
	p, q  []float64
}

// hockey is the exact δ(ε) = Σ_x [P(x) − e^ε·Q(x)]₊ of the product
// distributions (a sufficient statistic: the number of selections of each
// kind), computed by enumeration — independently of the RDP conversion.
func (b bernoulliPairs) hockey(eps float64) float64 {
	var rec func(j int, lp, lq float64) float64
	rec = func(j int, lp, lq float64) float64 {
		if j == len(b.count) {
			d := math.Exp(lp) - math.Exp(eps+lq)
			return math.Max(0, d)
		}
		s := 0.0
		n := b.count[j]
		for k := 0; k <= n; k++ {
			lc := lchoose(n, k)
			s += rec(j+1, lp+lc+xlogy(k, b.p[j])+xlogy(n-k, 1-b.p[j]), lq+lc+xlogy(k, b.q[j])+xlogy(n-k, 1-b.q[j]))
		}
		return s
	}
	return rec(0, 0, 0)
}

func (b bernoulliPairs) swap() bernoulliPairs { return bernoulliPairs{b.count, b.q, b.p} }

func lchoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	c, _ := math.Lgamma(float64(k + 1))
	d, _ := math.Lgamma(float64(n - k + 1))
	return a - c - d
}

// xlogy is k·log(y), 0 when k = 0 (also for y = 0).
func xlogy(k int, y float64) float64 {
	if k == 0 {
		return 0
	}
	return float64(k) * math.Log(y)
}

// TestGuaranteeCoversExactLoss: for calibrated periods under both relations,
// the exact hockey-stick divergence of the neighbouring pairs that differ
// most (one user's l0 keys in each of the windows the period composes,
// common keys near the threshold where a user moves the selection most,
// exclusive keys that exist only with the user, and mixtures of both) is at
// most the δ the stage claims at its ε — in both directions. This is a
// check of the accounting by an independent computation on the worst
// candidates, not a proof over all pairs (the package doc has the proof).
func TestGuaranteeCoversExactLoss(t *testing.T) {
	for _, tc := range []struct {
		eps, delta float64
		l0, w, k   int
		replace    bool
	}{
		{1, 1e-5, 1, 1, 0, false},
		{1, 1e-5, 2, 24, 3, false},
		{1, 1e-5, 1, 24, 3, true},
		{0.3, 1e-6, 1, 4, 0, true},
	} {
		per := NewPeriod(tc.w, tc.k, tc.replace)
		pl, err := Calibrate(tc.eps, tc.delta, tc.l0, per, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		th, g := pl.Threshold, pl.Guarantee
		n := per.Units * tc.l0 // Bernoulli trials: keys a user changes over the period
		nd := per.DeltaUnits * tc.l0
		worst := 0.0
		// Common keys at c and c+1 users (add_remove), c−1/c (the user's
		// removal under replace) and c′/c′+1 on u′'s keys.
		for c := max(int64(1), th.T-int64(4*th.Sigma)); c <= th.T+int64(4*th.Sigma); c += max(1, int64(th.Sigma/2)) {
			pc, pc1 := th.PassProbability(c), th.PassProbability(c+1)
			var pairs []bernoulliPairs
			if !tc.replace {
				pairs = append(pairs,
					bernoulliPairs{[]int{n}, []float64{pc1}, []float64{pc}},
					// exclusive keys in the user's windows, beside common ones
					bernoulliPairs{[]int{n / 2, n - n/2}, []float64{pc1, th.PassProbability(1)}, []float64{pc, 0}},
					bernoulliPairs{[]int{n}, []float64{th.PassProbability(1)}, []float64{0}})
			} else {
				// u's keys lose one user, u′'s gain one; in windows only one
				// of them is admitted to, only one side changes (2K′ windows
				// of one-sided changes at most: DeltaUnits).
				pairs = append(pairs,
					bernoulliPairs{[]int{n, n}, []float64{th.PassProbability(c - 1), pc1}, []float64{pc, pc}},
					bernoulliPairs{[]int{nd}, []float64{th.PassProbability(1)}, []float64{0}},
					bernoulliPairs{[]int{n, n}, []float64{0, th.PassProbability(1)}, []float64{th.PassProbability(1), 0}})
			}
			for _, b := range pairs {
				worst = math.Max(worst, math.Max(b.hockey(g.Epsilon), b.swap().hockey(g.Epsilon)))
			}
		}
		t.Logf("ε=%g δ=%g l0=%d W=%d K=%d replace=%v: σ=%.3f T=%d claims (%.4f, %.3g); exact worst δ at that ε: %.3g",
			tc.eps, tc.delta, tc.l0, tc.w, tc.k, tc.replace, th.Sigma, th.T, g.Epsilon, g.Delta(), worst)
		if worst > g.Delta() {
			t.Errorf("exact δ %.4g exceeds the claimed %.4g", worst, g.Delta())
		}
	}
}
