package budget

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/dpstage/stage/mechanism"
)

// recompose re-composes m's curve independently: m.RDP at each order below
// MaxOrder plus, for a Dirichlet mechanism, the grid residual written out
// from its formula (residualByHand), times k, converted by the bisection of
// the plain eq. (2).
func recompose(m mechanism.Mechanism, orders []float64, k int, delta float64) float64 {
	rdp := make([]float64, len(orders))
	for i, lam := range orders {
		rdp[i] = math.Inf(1)
		if lam < m.MaxOrder() {
			r := m.RDP(lam)
			if s := m.Spec(); s.Kind == mechanism.Dirichlet {
				r += residualByHand(lam, math.Min(s.Sensitivity.L1, s.Sensitivity.L2Sq))
			}
			rdp[i] = float64(k) * r
		}
	}
	return directEpsilon(orders, rdp, delta)
}

var planTemplates = []mechanism.Spec{
	{Kind: mechanism.Dirichlet, Calibration: mechanism.Concentrated, Order: 2, Sensitivity: mechanism.Sensitivity{L1: 2, L2Sq: 2, LInf: 1}},
	{Kind: mechanism.Dirichlet, Calibration: mechanism.ClosedForm, Order: 2, Sensitivity: mechanism.Sensitivity{L1: 2, L2Sq: 2, LInf: 1}},
	{Kind: mechanism.Dirichlet, Calibration: mechanism.Diffuse, Order: 2, Sensitivity: mechanism.Sensitivity{L1: 2, L2Sq: 2, LInf: 1}},
	{Kind: mechanism.Dirichlet, Calibration: mechanism.Diffuse, Order: 3, LowerBound: 1, Sensitivity: mechanism.Sensitivity{L1: 4, L2Sq: 8, LInf: 2}},
	{Kind: mechanism.Gaussian, Order: 2, Sensitivity: mechanism.Sensitivity{L1: 2, L2Sq: 2, LInf: 1}},
	{Kind: mechanism.Laplace, Order: 2, Sensitivity: mechanism.Sensitivity{L1: 2, L2Sq: 2, LInf: 1}},
}

// The planner's output, re-composed independently, meets the requested
// (ε, δ) and is tight: ε_r·(1 + 1e-3) would exceed.
func TestPlanReleasesMechanisms(t *testing.T) {
	for _, tmpl := range planTemplates {
		for _, tc := range []struct {
			eps, delta float64
			releases   int
		}{{1, 1e-6, 24}, {1, 1e-6, 1}, {2, 1e-8, 1440}} {
			p, err := PlanReleases(tmpl, tc.eps, tc.delta, tc.releases)
			if err != nil {
				t.Fatalf("%s %s %+v: %v", tmpl.Kind, tmpl.Calibration, tc, err)
			}
			orders := p.PerRelease.Orders()
			got := recompose(p.Mechanism, orders, tc.releases, tc.delta)
			if got > tc.eps*(1+1e-12) || p.Epsilon > tc.eps {
				t.Errorf("%s %s %+v: recomposed ε = %.15g (plan %.15g) > %v", tmpl.Kind, tmpl.Calibration, tc, got, p.Epsilon, tc.eps)
			}
			if math.Abs(got-p.Epsilon) > 1e-9*tc.eps {
				t.Errorf("%s %s %+v: recomposed ε = %.15g, plan says %.15g", tmpl.Kind, tmpl.Calibration, tc, got, p.Epsilon)
			}
			spec := p.Spec
			spec.RDPEpsilon *= 1 + 1e-3
			m2, err := mechanism.New(spec)
			if err != nil {
				t.Fatal(err)
			}
			if over := recompose(m2, orders, tc.releases, tc.delta); !(over > tc.eps) {
				t.Errorf("%s %s %+v: ε_r·(1+1e-3) still fits (ε = %v)", tmpl.Kind, tmpl.Calibration, tc, over)
			}
			if !(p.Order < p.Mechanism.MaxOrder()) {
				t.Errorf("%s %s: conversion order %v ≥ MaxOrder %v", tmpl.Kind, tmpl.Calibration, p.Order, p.Mechanism.MaxOrder())
			}
			pr := p.Mechanism.Params()
			// Cross-check with 000 Theorem 4 (continuous λ) for one release of
			// the r = 1 calibrations: its δ at ε is at most the grid's.
			if tc.releases == 1 && tmpl.Kind == mechanism.Dirichlet && pr.R == 1 {
				d, _, err := DirichletDelta(pr.Alpha, tmpl.Sensitivity.L2Sq, tmpl.Sensitivity.LInf, tc.eps)
				if err != nil || d > tc.delta {
					t.Errorf("%s: Theorem 4 δ = %v (err %v) > planned δ %v", tmpl.Calibration, d, err, tc.delta)
				}
			}
			t.Logf("%-9s %-12s ε=%v δ=%v k=%-4d → ε_r=%.6g at λ=%v (α=%.5g r=%.5g σ=%.5g b=%.5g), total ε=%.10g at λ=%v",
				tmpl.Kind, tmpl.Calibration, tc.eps, tc.delta, tc.releases, p.Spec.RDPEpsilon, p.Spec.Order,
				pr.Alpha, pr.R, pr.Sigma, pr.Scale, p.Epsilon, p.Order)
		}
	}
}

func TestPlanReleasesBadTemplate(t *testing.T) {
	tmpl := planTemplates[0]
	tmpl.Sensitivity.LInf = 0
	_, err := PlanReleases(tmpl, 1, 1e-6, 24)
	if !errors.Is(err, mechanism.ErrInvalidParameter) {
		t.Errorf("zero Δ∞: %v", err)
	}
	tmpl = planTemplates[0]
	tmpl.Kind = "exponential"
	if _, err := PlanReleases(tmpl, 1, 1e-6, 24); !errors.Is(err, mechanism.ErrInvalidParameter) {
		t.Errorf("unknown kind: %v", err)
	}
}

func BenchmarkPlanReleases(b *testing.B) {
	for _, tmpl := range planTemplates {
		name := fmt.Sprintf("%s-%s-order%v-k1440", tmpl.Kind, tmpl.Calibration, tmpl.Order)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := PlanReleases(tmpl, 1, 1e-6, 1440); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkCalibrate(b *testing.B) {
	spec := planTemplates[0]
	spec.RDPEpsilon = 1
	b.Run("mechanism.New-dirichlet-concentrated", func(b *testing.B) {
		for b.Loop() {
			if _, err := mechanism.New(spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	m, _ := mechanism.New(spec)
	orders, _ := WithOrder(DefaultOrders(), 2)
	b.Run("CurveOf-dirichlet", func(b *testing.B) {
		for b.Loop() {
			_ = CurveOf(m, orders)
		}
	})
	c := CurveOf(m, orders).Scale(1440)
	b.Run("Epsilon", func(b *testing.B) {
		for b.Loop() {
			_, _, _ = c.Epsilon(1e-6)
		}
	})
	b.Run("DirichletDelta", func(b *testing.B) {
		for b.Loop() {
			_, _, _ = DirichletDelta(3.46, 2, 1, 1)
		}
	})
}

// TestPlanReleasesUsesTheBudgetAtEveryCount: for every release count from
// 1 to 64 the planned composition reaches the budget (above 0.99·ε), for
// every template. A calibration that spuriously refuses a target between
// the bracket's ends used to end the bisection early: the Gaussian refused
// ε̂ = 0.003125·(1 − 2⁻⁵³) (σ² rounded to a dyadic 640 evaluates an ulp
// above ε̂), and 5 releases of ε = 1 were planned to ε = 0.377.
func TestPlanReleasesUsesTheBudgetAtEveryCount(t *testing.T) {
	for _, tmpl := range planTemplates {
		for k := 1; k <= 64; k++ {
			p, err := PlanReleases(tmpl, 1, 1e-6, k)
			if err != nil {
				t.Fatalf("%s %s k=%d: %v", tmpl.Kind, tmpl.Calibration, k, err)
			}
			if !(p.Epsilon > 0.99 && p.Epsilon <= 1) {
				t.Errorf("%s %s k=%d: planned ε = %.6g, want in (0.99, 1]", tmpl.Kind, tmpl.Calibration, k, p.Epsilon)
			}
		}
	}
}

// residualByHand is the grid residual written out from its derivation
// (mechanism.GridResidualRDP's doc): cellwise P′ ≤ (1+ρ)^k·P and
// Q′ ≥ (1−ρ)^k·Q give e_k(λ) = [kλ·log(1+ρ) − k(λ−1)·log(1−ρ)]/(λ−1),
// ρ = 10⁻⁵. Issue #21's form with ρ′ = (1+ρ)^k − 1 (residualIssueForm) is
// above it by O(k²ρ²).
func residualByHand(lam, k float64) float64 {
	const rho = 1e-5
	return (k*lam*math.Log1p(rho) - k*(lam-1)*math.Log1p(-rho)) / (lam - 1)
}

// residualIssueForm is issue #21's e(λ) = [λ·log(1+ρ′) − (λ−1)·log(1−ρ′)]/(λ−1),
// ρ′ = (1+ρ)^k − 1.
func residualIssueForm(lam, k float64) float64 {
	rp := math.Pow(1+1e-5, k) - 1
	return (lam*math.Log1p(rp) - (lam-1)*math.Log1p(-rp)) / (lam - 1)
}
