package config

import (
	"fmt"
	"math"
)

// CollisionDelta is the δ that collisions of the keyed 64-bit user hashes
// add to the guarantee (issue #21 item 6), for n = privacy.expected_users
// users per period: 2n·2⁻⁶⁴; 0 when expected_users is not given (the term
// exists then too, but cannot be computed: `stage validate` says so).
//
// Why. Every per-user state of the stage is keyed by the user hash
// (decode's package doc): the per-window contribution bound, the
// tracked-user cap and, with contribution.max_windows_per_user, the
// period's admission count. Two users whose hashes collide are merged:
// they share one bound, and adding one can change which of the other's
// events and windows count — a change the sensitivities and the
// cross-window bound do not cover. Fix neighbours D = D₀ + u and
// D′ = D₀ + u′ (replace; add_remove has only u) and let E be the event,
// over the secret key alone, that h(u) or h(u′) equals the hash of one of
// the n users of D₀ in the period. For a keyed hash indistinguishable from
// a random function, P(E) ≤ 2n·2⁻⁶⁴ (n·2⁻⁶⁴ under add_remove; the stage
// charges 2n for both). For every key outside E the analysis holds as
// stated — the stage is (ε, δ)-DP for that key, the noise being drawn
// independently — so for every set S of outputs
//
//	P[M(D) ∈ S] ≤ Σ_{key ∉ E} P(key)·(e^ε·P[M_key(D′) ∈ S] + δ) + P(E)
//	           ≤ e^ε·P[M(D′) ∈ S] + δ + 2n·2⁻⁶⁴.
//
// Hence δ_total ≤ privacy.budget.delta + 2n·2⁻⁶⁴. It matters only for
// very large populations: 3·10⁻¹¹ at n = 2.9·10⁸ (the quickstart
// generator's ids per day), 2.6·10⁻¹³ at n = 2.4·10⁷.
func (c *Config) CollisionDelta() float64 {
	n := c.Privacy.ExpectedUsers
	if n <= 0 {
		return 0
	}
	return 2 * float64(n) * 0x1p-64
}

// TotalDelta is the δ of the stage's whole guarantee per period:
// privacy.budget.delta, which the budget composes releases within, plus
// [Config.CollisionDelta]. The δ·users checks ([DeltaUsersWarn], the
// refusal at δ·users ≥ 1) apply to it.
func (c *Config) TotalDelta() float64 {
	return c.TotalDeltaOf(c.Privacy.Budget.Delta)
}

// TotalDeltaOf is delta — a period's δ as the budget book holds it (the
// configured one, or a lower one an earlier config of the period left as
// its limit) — plus [Config.CollisionDelta], rounded up. With
// privacy.expected_users it is the δ of the guarantee a release of that
// period states as privacy.total_delta (issue 28 item 5); without it the
// collision term exists too but cannot be computed, and no total is
// stated ([Config.StatesTotalDelta]).
func (c *Config) TotalDeltaOf(delta float64) float64 {
	return addUp(delta, c.CollisionDelta())
}

// StatesTotalDelta reports whether the total δ can be stated: whether
// privacy.expected_users gives the n of the collision term 2n·2⁻⁶⁴.
func (c *Config) StatesTotalDelta() bool { return c.Privacy.ExpectedUsers > 0 }

// addUp is a + b rounded toward +∞ (a, b ≥ 0).
func addUp(a, b float64) float64 {
	s := a + b
	if math.IsInf(s, 0) || math.IsNaN(s) || b == 0 {
		return s
	}
	return math.Nextafter(s, math.Inf(1))
}

// collisionWarnings flags a δ that fits privacy.expected_users alone but not
// with the user hashes' collision term: the total δ·users above
// [DeltaUsersWarn] where δ·users is not (Warnings flags that case itself).
func (c *Config) collisionWarnings() []Warning {
	n, d, total := c.Privacy.ExpectedUsers, c.Privacy.Budget.Delta, c.TotalDelta()
	if n <= 0 || d*float64(n) > DeltaUsersWarn || !(total*float64(n) > DeltaUsersWarn) {
		return nil
	}
	fix := fmt.Sprintf("privacy.budget.delta ≤ %.3g keeps it ≤ %g", DeltaUsersWarn/float64(n)-c.CollisionDelta(), DeltaUsersWarn)
	if !(DeltaUsersWarn/float64(n) > c.CollisionDelta()) {
		fix = fmt.Sprintf("no δ keeps it ≤ %g at this population; shorten privacy.budget.period", DeltaUsersWarn)
	}
	return []Warning{{Path: "privacy.budget.delta", Message: fmt.Sprintf("total δ·expected_users = %.3g (δ = %g plus the 64-bit user-hash collision term 2n·2⁻⁶⁴ = %.3g): "+
		"a mechanism that publishes each user's events in the clear with probability δ_total meets this guarantee and would expose "+
		"some user with a chance of about %.2g%% per period; %s",
		total*float64(n), d, c.CollisionDelta(), -100*math.Expm1(float64(n)*math.Log1p(-total)), fix)}}
}
