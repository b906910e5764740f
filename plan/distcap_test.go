package plan_test

import (
	"fmt"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
)

// TestDistributedCapSensitivity: with contribution.max_tracked_users in
// the distributed mode the cap holds per input partition
// (plan/distcap.go): under replace the plan charges the sensitivities of
// 2m (two users out, two in), under add_remove and without the cap those
// of the single-process mode.
func TestDistributedCapSensitivity(t *testing.T) {
	const m = 2
	for _, tc := range []struct {
		mech        string
		neighbour   string
		distributed bool
		cap         int
		want        mechanism.Sensitivity
	}{
		{"gaussian", "replace", false, 100, mechanism.Sensitivity{L1: 2 * m, L2Sq: 2 * m * m, LInf: m}},
		{"gaussian", "replace", true, 100, mechanism.Sensitivity{L1: 4 * m, L2Sq: 8 * m * m, LInf: 2 * m}},
		{"dirichlet", "replace", true, 100, mechanism.Sensitivity{L1: 4 * m, L2Sq: 8 * m * m, LInf: 2 * m}},
		{"gaussian", "replace", true, 0, mechanism.Sensitivity{L1: 2 * m, L2Sq: 2 * m * m, LInf: m}},
		{"gaussian", "add_remove", true, 100, mechanism.Sensitivity{L1: 2 * m, L2Sq: 2 * m * m, LInf: m}},
		{"gaussian", "add_remove", true, 0, mechanism.Sensitivity{L1: m, L2Sq: m * m, LInf: m}},
	} {
		t.Run(fmt.Sprintf("%s/%s/distributed=%v/cap=%d", tc.mech, tc.neighbour, tc.distributed, tc.cap), func(t *testing.T) {
			y := fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out, distributed: {enabled: %v}}
events: {time_field: ts, user_field: user_id}
window: {size: 1h, start: 2026-01-01T00:00:00Z}
histograms:
  - {name: pages, field: page, bins: [a, b, c]}
contribution: {max_events_per_user: %d, max_tracked_users: %d}
privacy:
  mechanism: %s
  neighbour: %s
  budget: {epsilon: 10, delta: 1.0e-6, period: 24h}
state: {dir: %q, ledger: kafka, ledger_topic: g.ledger}
`, tc.distributed, m, tc.cap, tc.mech, tc.neighbour, t.TempDir())
			cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			p, err := plan.DerivePlan(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Count.Sensitivity; got != tc.want {
				t.Errorf("sensitivity %+v, want %+v", got, tc.want)
			}
		})
	}
}
