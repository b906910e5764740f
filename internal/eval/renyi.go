package eval

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mathext"

	"github.com/dpstage/stage/mechanism"
)

// Figure3X and Figure3XPrime are 001 Figure 3 (top)'s neighbouring
// histograms; they differ by one in two bins (‖δ‖₂² = 2, ‖δ‖∞ = 1).
var (
	Figure3X      = []float64{11, 8, 65, 25, 38, 1}
	Figure3XPrime = []float64{11, 7, 65, 25, 38, 0}
)

// Figure 3's sensitivities (001 §3.2 uses the pair above, whose change has
// Δ2² = 2 and Δ∞ = 1).
const (
	fig3L2Sq = 2.0
	fig3LInf = 1.0
)

// RenyiPoint is one r of experiment (b), 001 Figure 3 (top).
type RenyiPoint struct {
	Order, R, Alpha float64
	// Exact is D_λ(Dir(r·x + α) ‖ Dir(r·x′ + α)) by 000 eq. (19), the
	// direction 001 plots; Reverse is D_λ(Dir(r·x′ + α) ‖ Dir(r·x + α)).
	Exact, Reverse float64
	// Bound is 001 Algorithm 1 line 1's guarantee at this r:
	// ½·λ·r²·Δ2²·ψ′(1 + 3(λ−1)·r·Δ∞), with α = 1 + 4(λ−1)r (line 2).
	Bound float64
}

// Ratio is Bound / max(Exact, Reverse): how much the guarantee overstates
// the true divergence of this pair.
func (p RenyiPoint) Ratio() float64 { return p.Bound / math.Max(p.Exact, p.Reverse) }

// Algorithm1Bound is 001 Algorithm 1 line 1's ε as a function of r:
// ½·λ·r²·Δ2²·ψ′(1 + 3(λ−1)·r·Δ∞), with ψ′(z) = ζ(2, z) (Hurwitz zeta).
func Algorithm1Bound(order, r, l2sq, linf float64) float64 {
	return 0.5 * order * r * r * l2sq * mathext.Zeta(2, 1+3*(order-1)*r*linf)
}

// RenyiVsR computes experiment (b) for every order and r.
func RenyiVsR(orders, rs []float64) ([]RenyiPoint, error) {
	var out []RenyiPoint
	u := make([]float64, len(Figure3X))
	up := make([]float64, len(Figure3X))
	for _, o := range orders {
		for _, r := range rs {
			alpha := 1 + 4*(o-1)*r
			for i := range u {
				u[i] = r*Figure3X[i] + alpha
				up[i] = r*Figure3XPrime[i] + alpha
			}
			ex, err := mechanism.DirichletRenyi(o, u, up)
			if err != nil {
				return nil, fmt.Errorf("eval: divergence at λ = %g, r = %g: %w", o, r, err)
			}
			rev, err := mechanism.DirichletRenyi(o, up, u)
			if err != nil {
				return nil, fmt.Errorf("eval: divergence at λ = %g, r = %g: %w", o, r, err)
			}
			out = append(out, RenyiPoint{Order: o, R: r, Alpha: alpha, Exact: ex, Reverse: rev,
				Bound: Algorithm1Bound(o, r, fig3L2Sq, fig3LInf)})
		}
	}
	return out, nil
}
