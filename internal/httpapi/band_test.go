package httpapi

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// dirichlet draws one y ~ Dir(shapes).
func dirichlet(rng *rand.Rand, shapes []float64) []float64 {
	y := make([]float64, len(shapes))
	sum := 0.0
	for i, a := range shapes {
		y[i] = distuv.Gamma{Alpha: a, Beta: 1, Src: rng}.Rand()
		sum += y[i]
	}
	for i := range y {
		y[i] /= sum
	}
	return y
}

// TestDirichletBandCoverage checks the band's promise by simulation: for
// windows of very different sizes (the size is what the band must not
// depend on), each bar's band contains the centre m_i of its draw in at
// least BandLevel of the draws (less a Monte Carlo margin).
func TestDirichletBandCoverage(t *testing.T) {
	cases := []struct {
		name     string
		alpha, r float64
		x        []float64
	}{
		{"concentrated quickstart, 1000 users", 81.2735, 1, []float64{400, 300, 200, 80, 20}},
		{"concentrated quickstart, empty window", 81.2735, 1, []float64{0, 0, 0, 0, 0}},
		{"diffuse, a million users, a rare bin", 1.01234, 0.00308571, []float64{5e5, 3e5, 1.5e5, 4.9e4, 1e3}},
		{"diffuse, 3000 users, an empty bin", 1.38671, 0.0966774, []float64{2000, 900, 100, 0}},
		{"small prior, skewed", 0.3, 1, []float64{1e5, 10, 0, 3}},
		{"two bins, empty window", 1, 1, []float64{0, 0}},
	}
	const draws = 400
	for k, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, uint64(k)))
			d := float64(len(tc.x))
			n := 0.0
			for _, v := range tc.x {
				n += v
			}
			shapes := make([]float64, len(tc.x))
			centre := make([]float64, len(tc.x))
			for i, v := range tc.x {
				shapes[i] = tc.r*v + tc.alpha
				centre[i] = shapes[i] / (tc.r*n + d*tc.alpha)
			}
			covered := make([]int, len(tc.x))
			width := make([]float64, len(tc.x))
			start := time.Now()
			for range draws {
				y := dirichlet(rng, shapes)
				lo, hi := DirichletBand(y, tc.alpha, BandLevel)
				for i := range y {
					if lo[i] > y[i] || hi[i] < y[i] || lo[i] < 0 || hi[i] > 1 {
						t.Fatalf("band [%g, %g] does not contain its release %g", lo[i], hi[i], y[i])
					}
					if lo[i] <= centre[i] && centre[i] <= hi[i] {
						covered[i]++
					}
					width[i] += (hi[i] - lo[i]) / draws
				}
			}
			// 3.5 standard errors below the level.
			floor := BandLevel - 3.5*math.Sqrt(BandLevel*(1-BandLevel)/draws)
			for i := range covered {
				c := float64(covered[i]) / draws
				if c < floor {
					t.Errorf("bin %d (centre %.4g): coverage %.3f < %.3f", i, centre[i], c, floor)
				}
				t.Logf("bin %d centre %.4g coverage %.3f mean width %.4g", i, centre[i], c, width[i])
			}
			t.Logf("%s per band", time.Since(start)/draws)
		})
	}
}

func ExampleDirichletBand() {
	// A release of 5 bins by the quickstart's Dirichlet mechanism (α ≈ 81).
	y := []float64{0.35, 0.25, 0.2, 0.12, 0.08}
	lo, hi := DirichletBand(y, 81.2735, BandLevel)
	for i := range y {
		fmt.Printf("%.2f in [%.3f, %.3f]\n", y[i], lo[i], hi[i])
	}
	// Output:
	// 0.35 in [0.312, 0.389]
	// 0.25 in [0.216, 0.286]
	// 0.20 in [0.169, 0.234]
	// 0.12 in [0.095, 0.148]
	// 0.08 in [0.060, 0.104]
}
