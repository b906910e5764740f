package eval

import (
	"fmt"
	"math"

	"github.com/dpstage/stage/mechanism"
)

// Figure3Counts are 001 Figure 3 (bottom)'s counts f(x).
var Figure3Counts = []float64{119, 74, 618, 272, 13, 187}

// RDPForApproxDP inverts 001 eq. (14) (Appendix B; the conversion of
// 000 Lemma 1 eq. (2) / CKS20 at one order): the RDP ε at order λ whose
// conversion is (ε̂, δ)-DP,
//
//	ε = ε̂ − log(λ−1) + (log δ + λ·log λ)/(λ−1).
//
// It is ≤ 0 when no release at this order can be (ε̂, δ)-DP (the missing
// points of 001 Figure 3 at small ε̂ for λ = 2 and 20).
func RDPForApproxDP(order, epsHat, delta float64) float64 {
	return epsHat - math.Log(order-1) + (math.Log(delta)+order*math.Log(order))/(order-1)
}

// KLConfig is experiment (c), 001 Figure 3 (bottom): for each order λ and
// ε̂, calibrate each variant at the RDP target whose conversion at λ is
// (ε̂, δ)-DP, draw y from the mechanism for Figure3Counts and record
// D_KL(f̃(x) ‖ y) (f̃ = f/Σf; 001 §3.2).
type KLConfig struct {
	Orders   []float64
	EpsHats  []float64
	Delta    float64
	Reps     int
	Seed     uint64
	Workers  int
	Variants []Variant // RDPEpsilon and Order are filled in per point
}

// KLVariants are the calibrations compared in experiment (c), with
// Figure 3's sensitivities: diffuse (001 Algorithm 1, the paper's curve),
// concentrated (000 eq. (8)) and exact (replace).
func KLVariants() []Variant {
	s := mechanism.Sensitivity{L1: 2, L2Sq: fig3L2Sq, LInf: fig3LInf}
	d := func(c mechanism.Calibration) mechanism.Spec {
		return mechanism.Spec{Kind: mechanism.Dirichlet, Calibration: c, Sensitivity: s}
	}
	exact := d(mechanism.Exact)
	exact.Neighbour = mechanism.Replace
	return []Variant{
		{"dirichlet-diffuse", d(mechanism.Diffuse)},
		{"dirichlet-concentrated", d(mechanism.Concentrated)},
		{"dirichlet-exact", exact},
	}
}

// KLPoint is the mean KL divergence of one variant at one (λ, ε̂).
type KLPoint struct {
	Order, EpsHat float64
	RDPEps        float64 // the per-release RDP target at Order
	Variant       string
	Feasible      bool // false: RDPEps ≤ 0 or the calibration is out of range
	Params        mechanism.Params
	Stat          Stat
}

// RunKL runs experiment (c). It also returns the uniform baseline
// D_KL(f̃ ‖ uniform).
func RunKL(cfg KLConfig) ([]KLPoint, float64, error) {
	f := Figure3Counts
	ft := make([]float64, len(f))
	normalize(f, ft)
	base := kl(ft, Uniform(len(f)))
	var points []KLPoint
	var mechs []mechanism.Mechanism
	for _, o := range cfg.Orders {
		for _, eh := range cfg.EpsHats {
			rdp := RDPForApproxDP(o, eh, cfg.Delta)
			for _, v := range cfg.Variants {
				p := KLPoint{Order: o, EpsHat: eh, RDPEps: rdp, Variant: v.Name}
				var m mechanism.Mechanism
				if rdp > 0 {
					spec := v.Spec
					spec.Order, spec.RDPEpsilon = o, rdp
					if mm, err := mechanism.New(spec); err == nil {
						m, p.Feasible, p.Params = mm, true, mm.Params()
					}
				}
				points = append(points, p)
				mechs = append(mechs, m)
			}
		}
	}
	err := parallel(len(points), cfg.Workers, func(i int) error {
		m := mechs[i]
		if m == nil {
			return nil
		}
		p := &points[i]
		rel, _ := streams(cfg.Seed, fmt.Sprintf("kl/λ=%g/ε̂=%g/%s", p.Order, p.EpsHat, p.Variant))
		y := make([]float64, len(f))
		for r := 0; r < cfg.Reps; r++ {
			if err := m.Release(rel, f, y); err != nil {
				return err
			}
			p.Stat.Add(kl(ft, y))
		}
		return nil
	})
	return points, base, err
}
