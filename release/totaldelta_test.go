package release_test

import (
	"encoding/json"
	"testing"

	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/release"
)

// TestMessagesStateTheTotalDelta (issue 28 item 5): with
// privacy.expected_users every release and status message states the
// guarantee's total δ, privacy.total_delta = delta + 2n·2⁻⁶⁴ (the user-hash
// collision term), beside privacy.delta, the δ its spent and budget ε are
// stated at; without expected_users (n unknown) it is omitted, never
// equal to delta as if the term were 0.
func TestMessagesStateTheTotalDelta(t *testing.T) {
	const n = 5000 // δ·n = 0.005: a population the budget's δ fits
	for _, tc := range []struct {
		name  string
		users string
		want  float64 // 0: omitted
	}{
		{"expected_users", "  expected_users: 5000\n", 1e-6 + 2*n*0x1p-64},
		{"no expected_users", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, tc.users)
			cfg.Privacy.Budget.Epsilon = 1
			fitRDPEpsilon(t, cfg, 1, nil) // 1 unit per period: the window's second histogram gets a status message
			f := newFixture(t, cfg)
			period := int64(29_000_000) * minute
			seen := map[ledger.Status]bool{}
			for _, u := range f.window(t, period, [][4]string{{"a", "home", "US", "mobile"}}) {
				seen[u.Status] = true
				for _, m := range u.Messages {
					var raw struct {
						Privacy map[string]any `json:"privacy"`
					}
					if err := json.Unmarshal(m.Value, &raw); err != nil {
						t.Fatal(err)
					}
					priv := raw.Privacy
					if priv["delta"] != 1e-6 {
						t.Errorf("%s: privacy.delta %v, want the budget's 1e-06", u.Status, priv["delta"])
					}
					got, ok := priv["total_delta"].(float64)
					if tc.want == 0 {
						if ok {
							t.Errorf("%s: privacy.total_delta %v without privacy.expected_users", u.Status, got)
						}
						continue
					}
					// Rounded up once from the exact sum: within an ulp above it.
					if !ok || got < tc.want || got > tc.want*(1+1e-15) {
						t.Errorf("%s: privacy.total_delta %v, want δ + 2n·2⁻⁶⁴ = %v", u.Status, priv["total_delta"], tc.want)
					}
					if u.Status == ledger.StatusReleased {
						var r release.Release
						if err := json.Unmarshal(m.Value, &r); err != nil || r.Privacy.TotalDelta != got {
							t.Errorf("release.Release decodes total_delta %v (%v)", r.Privacy.TotalDelta, err)
						}
					}
				}
			}
			if !seen[ledger.StatusReleased] || !seen[ledger.StatusBudgetExhausted] {
				t.Fatalf("want a release and a status message in the window, got %v", seen)
			}
		})
	}
}
