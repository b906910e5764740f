package budget

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dpstage/stage/mechanism"
)

func TestPureCurve(t *testing.T) {
	orders := DefaultOrders()
	for _, eps := range []float64{0.1, 1, 3} {
		c, err := PureCurve(eps, orders)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range c.Points() {
			if p.Epsilon > eps || p.Epsilon > p.Order*eps*eps/2 {
				t.Errorf("ε=%g λ=%g: %g above min(ε, λε²/2)", eps, p.Order, p.Epsilon)
			}
		}
	}
	if _, err := PureCurve(-1, orders); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("negative ε: %v", err)
	}
	if _, err := PureCurve(1, nil); err == nil {
		t.Error("empty grid accepted")
	}
}

// Hand-checkable composition: a Gaussian RDP curve plus two (ε, δ)-DP
// releases. The total is the curve converted at δ − Σδ_i plus Σε_i.
func TestComposeMixed(t *testing.T) {
	orders := DefaultOrders()
	g := make([]float64, len(orders))
	for i, o := range orders {
		g[i] = o * 0.05 // ρ = 0.05 zCDP
	}
	curve, _ := NewCurve(orders, g)
	c, err := ComposeMixed(curve, []float64{0.5, 1.1}, []float64{1e-6, 2e-6}, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	wantRDP, order, _ := curve.Epsilon(1e-5 - 3e-6)
	if math.Abs(c.RDPEpsilon-wantRDP) > 1e-12 || c.RDPOrder != order {
		t.Errorf("RDP part %v at %v, want %v at %v", c.RDPEpsilon, c.RDPOrder, wantRDP, order)
	}
	if !(c.ApproxEpsilon >= 1.6) || c.ApproxEpsilon > 1.6*(1+1e-14) || !(c.ApproxDelta >= 3e-6) || c.ApproxReleases != 2 {
		t.Errorf("approx part %+v", c)
	}
	if math.Abs(c.Epsilon-(c.RDPEpsilon+c.ApproxEpsilon)) > 0 || !(c.Delta <= 1e-5*(1+1e-12)) {
		t.Errorf("total %+v", c)
	}
	if !strings.Contains(c.Method, "basic composition of 2") || !strings.Contains(c.Method, "RDP composition") {
		t.Errorf("method %q", c.Method)
	}
	// All δ used by the approx part: refused.
	if _, err := ComposeMixed(curve, []float64{1}, []float64{1e-5}, 1e-5); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("no δ left: %v", err)
	}
	// Only approx: no δ needed for the (empty) RDP part.
	zero, _ := ZeroCurve(orders)
	c, err = ComposeMixed(zero, []float64{1, 2}, []float64{0.01, 0.02}, 0.5)
	if err != nil || math.Abs(c.Epsilon-3) > 1e-12 || math.Abs(c.Delta-0.03) > 1e-12 || c.RDPDelta != 0 {
		t.Errorf("approx only: %+v %v", c, err)
	}
	for _, bad := range [][2][]float64{{{-1}, {0}}, {{1}, {1}}, {{1, 2}, {0}}, {{math.NaN()}, {0}}} {
		if _, err := ComposeMixed(zero, bad[0], bad[1], 0.5); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

func TestMixedAccountant(t *testing.T) {
	orders := DefaultOrders()
	a, err := NewMixedAccountant(orders, 10, 0.12)
	if err != nil {
		t.Fatal(err)
	}
	// A simplex-dirichlet release: (ε, δ)-DP only.
	sim := mechanism.SimplexSpec{K: 24, Eta: 0.05, EtaBar: 0.05, Bins: 3, W: []int{0, 1}, B: 1, Average: 100, TargetDelta: 0.05}
	sm, err := mechanism.New(mechanism.Spec{Kind: mechanism.SimplexDirichlet, Simplex: &sim})
	if err != nil {
		t.Fatal(err)
	}
	// A laplace-posterior release: pure ε-DP, enters as its RDP curve.
	ps := mechanism.PosteriorSpec{Prior: []float64{1, 1, 1}, Epsilon: 0.5}
	lp, err := mechanism.New(mechanism.Spec{Kind: mechanism.LaplacePosterior, Posterior: &ps})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := a.SpendMechanism(sm); err != nil {
			t.Fatal(err)
		}
		if err := a.SpendMechanism(lp); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.SpendPure(0.3); err != nil {
		t.Fatal(err)
	}
	tot := a.Total()
	se, sd := sm.(mechanism.ApproxDP).DP()
	if tot.ApproxReleases != 2 || !(tot.ApproxEpsilon >= 2*se) || !(tot.ApproxDelta >= 2*sd) {
		t.Errorf("approx part %+v", tot)
	}
	if math.Abs(tot.RDPDelta-(0.12-tot.ApproxDelta)) > 1e-15 || !(tot.Epsilon <= 10) {
		t.Errorf("total %+v", tot)
	}
	// The RDP part is no more than pure composition would give (ε's add).
	lpe, _ := lp.(mechanism.ApproxDP).DP()
	if tot.RDPEpsilon > 2*lpe+0.3 {
		t.Errorf("RDP part %v above basic composition %v", tot.RDPEpsilon, 2*lpe+0.3)
	}
	// δ exhausted: a third simplex release pushes Σδ past 0.12.
	err = a.SpendMechanism(sm)
	var ee *ExceededError
	if !errors.As(err, &ee) || !errors.Is(err, ErrBudgetExceeded) {
		t.Errorf("δ exhausted: %v", err)
	}
	if a.Total().ApproxReleases != 2 {
		t.Errorf("refused spend changed the state")
	}
	// ε over the limit.
	if err := a.SpendApprox(20, 0); !errors.Is(err, ErrBudgetExceeded) {
		t.Errorf("ε over limit: %v", err)
	}
	if err := a.SpendApprox(-1, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad ε: %v", err)
	}
	if err := a.SpendRDP(Curve{}); err == nil {
		t.Error("empty curve accepted")
	}
	if err := a.SpendMechanism(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil mechanism: %v", err)
	}
	other, _ := ZeroCurve([]float64{2, 3})
	if err := a.SpendRDP(other); !errors.Is(err, ErrGridMismatch) {
		t.Errorf("grid mismatch: %v", err)
	}
	if _, err := NewMixedAccountant(orders, 0, 0.1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ε = 0: %v", err)
	}
}
