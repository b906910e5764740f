package mechanism_test

import (
	"fmt"

	"github.com/dpstage/stage/mechanism"
)

// Calibrate the Dirichlet mechanism once, then release a private normalized
// histogram. Real releases use mechanism.NewRand(); the seed is for the
// example's reproducible output only.
func ExampleNew() {
	m, err := mechanism.New(mechanism.Spec{
		Kind:        mechanism.Dirichlet,
		Calibration: mechanism.Concentrated,
		Order:       2,
		RDPEpsilon:  1,
		Sensitivity: mechanism.Sensitivity{L2Sq: 2, LInf: 1},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	rng := mechanism.NewSeededRand([32]byte{42})
	counts := []float64{120, 30, 0, 850}
	out := make([]float64, len(counts))
	if err := m.Release(rng, counts, out); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("alpha = %.4f, RDP(2) = %.4f, RDP(3) = %.4f\n", m.Params().Alpha, m.RDP(2), m.RDP(3))
	sum := 0.0
	for i, y := range out {
		fmt.Printf("bin %d: %.4f\n", i, y)
		sum += y
	}
	fmt.Printf("sum = %.12f\n", sum)
	// Output:
	// alpha = 3.4600, RDP(2) = 1.0000, RDP(3) = 2.9075
	// bin 0: 0.1122
	// bin 1: 0.0377
	// bin 2: 0.0019
	// bin 3: 0.8482
	// sum = 1.000000000000
}

// The worked example of 000 §3.3: λ = 2, ε = 1, Δ2² = 2, Δ∞ = 1.
func Example_workedExample() {
	for _, cal := range []mechanism.Calibration{mechanism.Concentrated, mechanism.ClosedForm, mechanism.Diffuse} {
		m, err := mechanism.New(mechanism.Spec{
			Kind: mechanism.Dirichlet, Calibration: cal, Order: 2, RDPEpsilon: 1,
			Sensitivity: mechanism.Sensitivity{L2Sq: 2, LInf: 1},
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		p := m.Params()
		fmt.Printf("%-12s alpha = %.6f  r = %.6f  RDP(2) = %.6f  max order = %.4f\n", cal, p.Alpha, p.R, m.RDP(2), m.MaxOrder())
	}
	// Output:
	// concentrated alpha = 3.459953  r = 1.000000  RDP(2) = 1.000000  max order = 4.4600
	// closed-form  alpha = 4.000000  r = 1.000000  RDP(2) = 0.789868  max order = 5.0000
	// diffuse      alpha = 7.622277  r = 1.655569  RDP(2) = 1.000000  max order = 5.6040
}

// The exact Rényi divergence of 000 eq. (19) for one neighbouring pair of the
// worked example (one observation moved from bin 0 to bin 1).
func ExampleDirichletRenyi() {
	alpha := 3.4599529483523073
	u := []float64{5 + alpha, 0 + alpha, 2 + alpha}
	uPrime := []float64{4 + alpha, 1 + alpha, 2 + alpha}
	d, err := mechanism.DirichletRenyi(2, u, uPrime)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("D_2 = %.4f (calibrated bound 1)\n", d)
	// Output:
	// D_2 = 0.4669 (calibrated bound 1)
}
