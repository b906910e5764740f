package release

import (
	"encoding/json"
	"testing"
)

// covered is a Covered count of in of n partitions.
type covered struct{ in, n int }

func (c covered) Included() (int, int) { return c.in, c.n }

// TestCoverageComplete: a release's coverage says complete only when every
// partition was counted under the releaser's config and the deployment
// gave no reason (issue 28 item 1: a window of a partition change said
// {"partitions": 6, "included": 6} and nothing else); the marker is in the
// JSON dashboards read.
func TestCoverageComplete(t *testing.T) {
	tests := []struct {
		name   string
		x      any
		reason string
		want   string
	}{
		{"single-process counts", struct{}{}, IncompletePartitionsChanged, "null"},
		{"all partitions", covered{6, 6}, "", `{"partitions":6,"included":6,"complete":true}`},
		{"a rolling config change", covered{5, 6}, "", `{"partitions":6,"included":5,"complete":false,"incomplete":["config_change"]}`},
		{"a partition change", covered{6, 6}, IncompletePartitionsChanged, `{"partitions":6,"included":6,"complete":false,"incomplete":["partitions_changed"]}`},
		{"both", covered{4, 6}, IncompletePartitionsChanged, `{"partitions":6,"included":4,"complete":false,"incomplete":["config_change","partitions_changed"]}`},
	}
	for _, tc := range tests {
		b, err := json.Marshal(coverage(tc.x, tc.reason))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, b, tc.want)
		}
	}
}
