package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestSelectingBinsBound: a histogram that selects its groups takes at
// most MaxSelectingBins bins (aggregate's key ids beside the bin index);
// a listed one is not limited by it.
func TestSelectingBinsBound(t *testing.T) {
	bins := func(n int) string {
		b := make([]string, n)
		for i := range b {
			b[i] = fmt.Sprint("b", i)
		}
		return "[" + strings.Join(b, ", ") + "]"
	}
	for _, c := range []struct {
		name   string
		hist   string
		refuse bool
	}{
		{"selecting at the bound", "{name: h, field: f, bins: " + bins(MaxSelectingBins) + ", group_by: g}", false},
		{"selecting over it", "{name: h, field: f, bins: " + bins(MaxSelectingBins+1) + ", group_by: g}", true},
		{"listed over it", "{name: h, field: f, bins: " + bins(MaxSelectingBins+1) + ", group_by: g, groups: [a]}", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			y := `
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1h}
histograms:
  - ` + c.hist + `
privacy:
  budget: {epsilon: 1, delta: 1.0e-6, period: 24h}
`
			_, err := Parse([]byte(y), func(string) (string, bool) { return "", false })
			if got := err != nil && strings.Contains(err.Error(), "histograms[0].bins"); got != c.refuse {
				t.Errorf("refused %v (%v), want %v", got, err, c.refuse)
			}
		})
	}
}
