package config

import (
	"strings"
	"testing"
)

func TestWarnings(t *testing.T) {
	base := "kafka: {brokers: [\"localhost:9092\"]}\nhistograms: [{name: p, field: page, bins: [a, b]}]\n"
	budget := "privacy: {budget: {epsilon: 1}}\n"
	distBase := "state: {ledger: kafka}\nhistograms: [{name: p, field: page, bins: [a, b]}]\n"
	tests := []struct {
		name, yaml string
		want       []string // substrings of the warnings, in order
	}{
		{"default arrival", base + budget, nil},
		{"explicit arrival", base + budget + "window: {watermark: arrival}\n", nil},
		{"event time flagged", base + budget + "window: {watermark: event}\n", []string{"window.watermark: event: windows close by the events' own time field"}},
		{"producer record times flagged", base + budget + "window: {record_times: producer}\n",
			[]string{"window.record_times: producer: record times set by producers (CreateTime) are accepted"}},
		{"broker record times", base + budget + "window: {record_times: broker}\n", nil},
		// issue 28 item 1: the partition change's grace, below the
		// producers' metadata max age.
		{"distributed default grace", distBase + budget + "kafka: {brokers: [\"localhost:9092\"], distributed: {enabled: true}}\n", nil},
		{"distributed short grace", distBase + budget + "kafka: {brokers: [\"localhost:9092\"], distributed: {enabled: true, partition_change_grace: 1m}}\n",
			[]string{"kafka.distributed.partition_change_grace: 1m0s, below the default (11m0s), which covers the common producer clients' default metadata refresh plus delivery timeout"}},
		{"producer record times under watermark event: no part", base + budget + "window: {watermark: event, record_times: producer}\n",
			[]string{"window.watermark: event"}},
		// δ = 1e-6 (the default) against privacy.expected_users.
		// 9999, not 10000: the total δ adds the user hashes' collision term
		// 2n·2⁻⁶⁴ (CollisionDelta), which takes δ·users = 0.01 just above.
		{"small delta for the users", base + "privacy: {expected_users: 9999, budget: {epsilon: 1}}\n", nil},
		{"delta large for the users", base + "privacy: {expected_users: 10001, budget: {epsilon: 1}}\n",
			[]string{"privacy.budget.delta: δ·expected_users = 0.01: a mechanism that publishes each user's events in the clear"}},
		{"delta far too large for the users", base + "privacy: {expected_users: 500000, budget: {epsilon: 1}}\n",
			[]string{"δ·expected_users = 0.5: a mechanism that publishes each user's events in the clear with probability δ meets this guarantee and would expose some user with a chance of 1−(1−δ)^users ≈ 39% per period; δ ≤ 2e-08"}},
		// issue #21 item 6: at 3·10⁸ users per period the collision term
		// 2n·2⁻⁶⁴ = 3.3·10⁻¹¹ is about as large as δ = 10⁻¹¹ and takes the
		// total past 0.01/users (δ alone: δ·users = 0.003, no warning before).
		{"collision term counted", base + "privacy: {expected_users: 300000000, budget: {epsilon: 1, delta: 1.0e-11}}\n",
			[]string{"privacy.budget.delta: total δ·expected_users = 0.0128 (δ = 1e-11 plus the 64-bit user-hash collision term 2n·2⁻⁶⁴ = 3.25e-11)"}},
		// At 10⁹ users the collision term alone is above 0.01/users.
		{"collision term alone too large", base + "privacy: {expected_users: 1000000000, budget: {epsilon: 1, delta: 1.0e-15}}\n",
			[]string{"no δ keeps it ≤ 0.01 at this population; shorten privacy.budget.period"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.yaml), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			ws := cfg.Warnings()
			if len(ws) != len(tc.want) {
				t.Fatalf("warnings %v, want %d", ws, len(tc.want))
			}
			for i, w := range ws {
				if !strings.Contains(w.String(), tc.want[i]) {
					t.Errorf("warning %q, want it to contain %q", w, tc.want[i])
				}
			}
		})
	}
	if _, err := Parse([]byte(base+budget+"window: {watermark: event, close_after: 1s}\n"), nil); err == nil || !strings.Contains(err.Error(), "cannot be combined with watermark: event") {
		t.Errorf("close_after with watermark event: %v, want refused", err)
	}
	if _, err := Parse([]byte(base+budget+"window: {watermark: wallclock}\n"), nil); err == nil || !strings.Contains(err.Error(), "must be one of arrival, event") {
		t.Errorf("unknown watermark: %v, want refused", err)
	}
}
