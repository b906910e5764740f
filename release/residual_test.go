package release_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/dpstage/stage/config"
)

// TestReleaseStatesGridResidual (issue #21 item 1): a Dirichlet release
// states, and its unit is charged, the mechanism's RDP plus the release
// grid's residual e_2(2) = 2·[2·log(1+ρ) − log(1−ρ)] (replace, one event per
// user: k = 2 changed coordinates); before, both were the mechanism's alone.
// (Since issue 29 also the unit's totals' curve.)
func TestReleaseStatesGridResidual(t *testing.T) {
	y := fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1m, watermark: event, start: "2026-01-01T00:00:00Z"}
histograms:
  - {name: pages, field: page, bins: [home, cart], group_by: country, groups: [US, DE]}
  - {name: devices, field: device, bins: [mobile, desktop]}
privacy:
  mechanism: dirichlet
  calibration: concentrated
  neighbour: replace
  budget: {epsilon: 10, delta: 1.0e-6, period: 5m}
state: {dir: %q}
`, t.TempDir())
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, cfg)
	p := mustPlan(t, cfg)
	w := int64(29_000_000) * minute
	units := f.window(t, w, [][4]string{{"a", "home", "US", "mobile"}, {"b", "cart", "DE", "desktop"}})
	ideal := p.Count.Mechanism.RDP(2)
	// And the unit's totals (the discrete Gaussian, exact: no residual).
	want := ideal + 2*(2*math.Log1p(1e-5)-math.Log1p(-1e-5)) + p.Totals.CountRDP(2)
	for _, u := range units {
		i := -1
		for j, o := range u.Charge.Orders {
			if o == 2 {
				i = j
			}
		}
		if i < 0 || math.Abs(u.Charge.Epsilons[i]-want) > 1e-12*want {
			t.Errorf("%s: charged at λ=2 %v, want %v + e_2(2) = %v", u.Histogram, u.Charge.Epsilons, ideal, want)
		}
		for g, r := range releases(t, u) {
			if math.Abs(r.Privacy.RDPEpsilon-want) > 1e-12*want || r.Privacy.ChargeRDPEpsilon != r.Privacy.RDPEpsilon ||
				r.Privacy.TotalRDPEpsilon != p.Totals.CountRDP(2) {
				t.Errorf("%s/%s: rdp_epsilon %v, charge_rdp_epsilon %v, want %v (mechanism %v + residual)",
					u.Histogram, g, r.Privacy.RDPEpsilon, r.Privacy.ChargeRDPEpsilon, want, ideal)
			}
		}
	}
}
