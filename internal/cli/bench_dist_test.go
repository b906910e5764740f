package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestBenchInstancesFlag: --instances is parsed into bench.Config and
// checked (0 off, else at least 2), without running the bench.
func TestBenchInstancesFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
		code int
	}{
		{nil, 0, 0},
		{[]string{"--instances", "3"}, 3, 0},
		{[]string{"--instances=2", "--events", "1000"}, 2, 0},
		{[]string{"--instances", "1"}, 0, 2},
		{[]string{"--instances", "-3"}, 0, 2},
		{[]string{"--instances", "x"}, 0, 2},
	} {
		var stderr bytes.Buffer
		c, _, _, code := parseBench(tc.args, &stderr)
		if code != tc.code {
			t.Errorf("%v: exit code %d, want %d (%s)", tc.args, code, tc.code, stderr.String())
			continue
		}
		if code == 0 && c.Instances != tc.want {
			t.Errorf("%v: Instances %d, want %d", tc.args, c.Instances, tc.want)
		}
		if code == 2 && !strings.Contains(stderr.String(), "instances") {
			t.Errorf("%v: the error does not name --instances: %s", tc.args, stderr.String())
		}
	}
}
