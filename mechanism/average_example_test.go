package mechanism_test

import (
	"fmt"

	"github.com/dpstage/stage/mechanism"
)

// Calibrate the simplex-average Dirichlet mechanism for a 5-bin histogram
// averaged over 1000 users, then release one private average. Real releases
// use mechanism.NewRand(); the seed is for the example's reproducible output
// only.
func ExampleNewSimplexAverage() {
	m, err := mechanism.NewSimplexAverage(mechanism.AverageSpec{
		Bins:        5,
		Users:       1000,
		Eta:         0.01,
		K:           1000,
		TargetDelta: 1e-6 / 60,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	g := m.Guarantee()
	fmt.Printf("epsilon = %.4g (psi part %.4g + log part %.4g), delta = %.4g\n", g.Epsilon, g.EpsilonPsi, g.EpsilonLog, g.Delta)
	fmt.Printf("gamma = %.4g, beta = %.4g\n", g.Gamma, g.Beta)

	pbar := []float64{0.4, 0.3, 0.2, 0.1, 0}
	mean := make([]float64, len(pbar))
	if err := m.Smoothed(pbar, mean); err != nil {
		fmt.Println(err)
		return
	}
	out := make([]float64, len(pbar))
	if err := m.Release(mechanism.NewSeededRand([32]byte{7}), pbar, out); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("mean     %.3f\n", mean)
	fmt.Printf("released %v\n", out) // multiples of 1/10⁴ (ReleaseGrid(5))
	// Output:
	// epsilon = 11.3 (psi part 4.384 + log part 6.915), delta = 1.667e-08
	// gamma = 0.0006878, beta = 0.0019
	// mean     [0.390 0.295 0.200 0.105 0.010]
	// released [0.3784 0.2731 0.2281 0.1089 0.0115]
}
