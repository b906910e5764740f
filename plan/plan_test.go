package plan_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
)

// TestExactAddRemoveCappedIsReplaceShaped pins what the tracked-user cap
// does to the exact calibration under add_remove (see Plan): the change is
// one user out and one in, so the worst case is h₊ + h₋, not 2·max(h₊, h₋).
// At λ = 2, ε = 1, unit contributions (h₊ = log((α+1)/α), h₋ = log(α/(α−1)),
// mechanism/exact.go):
//
//   - capped add_remove, now: h₊ + h₋ = log((α+1)/(α−1)) = 1, α = (e+1)/(e−1)
//     ≈ 2.164, the replace relation's α;
//   - the same spec with the add_remove shape (before): 2h₋ = 1,
//     α = √e/(√e−1) ≈ 2.541; at the α now released that shape would charge
//     2·log((e+1)/2) ≈ 1.240 instead of 1;
//   - without the cap add_remove keeps its shape and Δ1 = 1: max(h₊, h₋) =
//     h₋ = 1, α = e/(e−1) ≈ 1.582.
func TestExactAddRemoveCappedIsReplaceShaped(t *testing.T) {
	derive := func(neighbour string, maxTracked int) *plan.Plan {
		y := fmt.Sprintf(`
kafka: {brokers: ["localhost:9092"]}
window: {size: 1m}
histograms:
  - {name: pages, field: page, bins: [a, b, c], group_by: g, groups: [x, y]}
contribution: {max_events_per_user: 1, max_tracked_users: %d}
privacy:
  mechanism: dirichlet
  calibration: exact
  neighbour: %s
  order: 2
  rdp_epsilon: %v
  budget: {epsilon: 100, delta: 1.0e-6, period: 1h}
`, maxTracked, neighbour, 1/(1-config.DefaultTotalShare)) // the histogram's part: 1 (the rest to its totals)
		cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("config: %v", err)
		}
		p, err := plan.DerivePlan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	e := math.E
	near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-9*want }

	capped := derive("add_remove", 1000)
	if got := capped.Count.Mechanism.Spec().Neighbour; got != mechanism.Replace {
		t.Errorf("capped add_remove: spec neighbour %q, want replace", got)
	}
	if capped.Neighbour != "add_remove" {
		t.Errorf("plan neighbour %q, want the configured add_remove", capped.Neighbour)
	}
	alpha := capped.Count.Mechanism.Params().Alpha
	if want := (e + 1) / (e - 1); !near(alpha, want) {
		t.Errorf("capped add_remove: α %v, want (e+1)/(e−1) = %v", alpha, want)
	}
	if r := derive("replace", 1000).Count.Mechanism.Params().Alpha; r != alpha {
		t.Errorf("capped add_remove α %v ≠ replace α %v", alpha, r)
	}
	// Charged: the calibrated 1 plus the grid residual of k = Δ1 = 2 changed
	// coordinates (issue #21 item 1), e_2(2) = 2·[2·log(1+ρ) − log(1−ρ)].
	// And the unit's totals: the rest of rdp_epsilon.
	tot, _ := capped.Totals.CountCharge.At(2)
	if got, ok := capped.Count.Charge.At(2); !ok || !near(got, 1+gridResidual(2, 2)+tot) || !near(tot, config.DefaultTotalShare/(1-config.DefaultTotalShare)) {
		t.Errorf("capped add_remove: charge at λ=2 %v (%v), want 1 + e_2(2) + the totals' %v", got, ok, tot)
	}

	// Before: the add_remove shape over the same (capped) sensitivities.
	old := capped.Count.Mechanism.Spec()
	old.Neighbour = mechanism.AddRemove
	m, err := mechanism.New(old)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Params().Alpha, math.Sqrt(e)/(math.Sqrt(e)-1); !near(got, want) {
		t.Errorf("add_remove shape: α %v, want √e/(√e−1) = %v", got, want)
	}
	at := old
	at.RDPEpsilon = 2 * math.Log((e+1)/2) * (1 + 1e-12) // what that shape charges at the α now released
	m2, err := mechanism.New(at)
	if err != nil {
		t.Fatal(err)
	}
	if !near(m2.Params().Alpha, alpha) {
		t.Errorf("the add_remove shape reaches α = %v only at ε = 2·log((e+1)/2); got α %v", alpha, m2.Params().Alpha)
	}

	// Without the cap add_remove keeps its one-sided shape.
	free := derive("add_remove", 0)
	if got := free.Count.Mechanism.Spec().Neighbour; got != mechanism.AddRemove {
		t.Errorf("uncapped add_remove: spec neighbour %q", got)
	}
	if got, want := free.Count.Mechanism.Params().Alpha, e/(e-1); !near(got, want) {
		t.Errorf("uncapped add_remove: α %v, want e/(e−1) = %v", got, want)
	}
}

// gridResidual is the release grid's residual written out by hand (issue
// #21 item 1; mechanism.GridResidualRDP's derivation): k changed Gamma
// coordinates, each moving a cell's probability by a factor in [1−ρ, 1+ρ],
// ρ = 10⁻⁵, add [kλ·log(1+ρ) − k(λ−1)·log(1−ρ)]/(λ−1) at order λ.
func gridResidual(lam, k float64) float64 {
	const rho = 1e-5
	return (k*lam*math.Log1p(rho) - k*(lam-1)*math.Log1p(-rho)) / (lam - 1)
}
