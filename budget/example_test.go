package budget_test

import (
	"errors"
	"fmt"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/mechanism"
)

// gaussian is the RDP curve of the Gaussian mechanism, λΔ2²/(2σ²).
type gaussian struct{ l2sq, sigma float64 }

func (g gaussian) RDP(order float64) float64 { return order * g.l2sq / (2 * g.sigma * g.sigma) }

// Compose ten releases of the Gaussian mechanism (σ = 1, Δ2 = 1: ε̂(λ) =
// λ/2 each) and convert the total to (ε, δ)-DP.
func ExampleToEpsilon() {
	one := budget.CurveOf(gaussian{l2sq: 1, sigma: 1}, budget.DefaultOrders())
	ten := one.Scale(10) // ε̂(λ) = 5λ
	eps, order := budget.ToEpsilon(ten, 1e-6)
	fmt.Printf("ε = %.4f at δ = 1e-6 (order %v)\n", eps, order)
	delta, order := budget.ToDelta(ten, 20)
	fmt.Printf("δ = %.3g at ε = 20 (order %v)\n", delta, order)
	// Output:
	// ε = 20.5520 at δ = 1e-6 (order 2.6)
	// δ = 2.42e-06 at ε = 20 (order 2.5)
}

// The (ε, δ) of one draw of the Dirichlet mechanism of 000's worked example
// (α_m ≈ 3.46, Δ2² = 2, Δ∞ = 1) by 000 Theorem 4.
func ExampleDirichletDelta() {
	delta, order, err := budget.DirichletDelta(3.46, 2, 1, 1)
	if err != nil {
		panic(err)
	}
	fmt.Printf("δ = %.4f at ε = 1 (λ = %.3f)\n", delta, order)
	// Output:
	// δ = 0.2467 at ε = 1 (λ = 1.910)
}

// An accountant for one period refuses the release that would exceed it.
func ExampleAccountant() {
	orders := budget.DefaultOrders()
	acct, err := budget.NewAccountant(orders, 1, 1e-6)
	if err != nil {
		panic(err)
	}
	release := budget.CurveOf(gaussian{l2sq: 2, sigma: 20}, orders) // ε̂(λ) = λ/400
	n := 0
	for acct.Spend(release) == nil {
		n++
	}
	fmt.Printf("%d releases fit; spent ε = %.4f\n", n, acct.SpentEpsilon())
	err = acct.Spend(release)
	var ex *budget.ExceededError
	fmt.Println(errors.Is(err, budget.ErrBudgetExceeded), errors.As(err, &ex) && ex.Epsilon > 1)
	// Output:
	// 9 releases fit; spent ε = 0.9585
	// true true
}

// Allocate RDP per window: 24 hourly windows per day, one release each,
// (ε = 1, δ = 1e-6) per day, Gaussian mechanism.
func ExamplePlanReleases() {
	tmpl := mechanism.Spec{Kind: mechanism.Gaussian, Order: 2, Sensitivity: mechanism.Sensitivity{L2Sq: 2, LInf: 1}}
	p, err := budget.PlanReleases(tmpl, 1, 1e-6, 24)
	if err != nil {
		panic(err)
	}
	fmt.Printf("per release: (λ=%v, ε=%.5f)-RDP, σ = %.3f\n", p.Spec.Order, p.Spec.RDPEpsilon, p.Mechanism.Params().Sigma)
	fmt.Printf("24 releases: ε = %.6f at δ = %g\n", p.Epsilon, p.Delta)
	// Output:
	// per release: (λ=2, ε=0.00203)-RDP, σ = 31.391
	// 24 releases: ε = 1.000000 at δ = 1e-06
}
