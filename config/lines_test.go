package config

import (
	"strings"
	"testing"
)

// TestValidationProblemLines checks that problems found by validation (not
// only by decoding) carry the line of the offending value in the file, or
// of its nearest enclosing key when the file left the value out.
func TestValidationProblemLines(t *testing.T) {
	for _, tc := range []struct {
		name, yml, path, frag string
		line                  int
	}{
		{"unknown mechanism", minimal + "  mechanism: laplacian\n", "privacy.mechanism", "must be one of", 9},
		{"epsilon zero", "histograms: [{name: p, field: f, bins: [a, b]}]\nprivacy:\n  budget:\n    delta: 1.0e-6\n    epsilon: 0\n", "privacy.budget.epsilon", "greater than 0", 5},
		{"epsilon absent: its enclosing key", "histograms: [{name: p, field: f, bins: [a, b]}]\nprivacy:\n  budget:\n    delta: 1.0e-6\n", "privacy.budget.epsilon", "required", 3},
		{"delta one half", minimal + "    delta: 0.5\n", "privacy.budget.delta", "above", 9},
		{"one bin, flow list", "histograms:\n  - name: p\n    field: f\n    bins: [a]\n", "histograms[0].bins", "at least 2 bins", 4},
		{"one bin, block list", "histograms:\n  - name: p\n    field: f\n    bins:\n      - a\n", "histograms[0].bins", "at least 2 bins", 4},
		{"duplicate bin, block list", "histograms:\n  - name: p\n    field: f\n    bins:\n      - a\n      - b\n      - a\n", "histograms[0].bins[2]", "duplicate bin", 7},
		{"duplicate bin, flow list", "histograms:\n  - name: p\n    field: f\n    bins: [a, b,\n      a]\n", "histograms[0].bins[2]", "duplicate bin", 5},
		{"value on the line after its key", "kafka:\n  output_topic:\n    events\n", "kafka.output_topic", "must differ from kafka.input_topic", 3},
		{"value from an alias: where the alias is", "x-t: &t events\nkafka:\n  input_topic: *t\n  output_topic: *t\n", "kafka.output_topic", "must differ", 4},
		{"value from a merge: where the merged key is", "x-k: &k\n  group_id: \"\"\nkafka:\n  <<: *k\n", "kafka.group_id", "must not be empty", 2},
		{"list item", "histograms:\n  - name: p\n    field: f\n    bins: [a, b]\n  - name: p\n    field: g\n    bins: [a, b]\n", "histograms[1].name", "duplicate histogram name", 5},
		{"env value keeps its line", "kafka:\n  brokers: ${BROKERS}\n", "kafka.brokers[1]", "is not host:port", 2},
		{"section absent: no line", "privacy:\n  budget:\n    epsilon: 1\n", "histograms", "at least one histogram", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yml), envOf(map[string]string{"BROKERS": "a:1,b"}))
			p, ok := findProblem(problems(t, err), tc.path, tc.frag)
			if !ok {
				t.Fatalf("want %s: ...%s..., got\n%v", tc.path, tc.frag, err)
			}
			if p.Line != tc.line {
				t.Errorf("%v: line %d, want %d", p, p.Line, tc.line)
			}
		})
	}
}

// TestValidateConfigBuiltInGo: a Config that did not come from a file has no
// lines to give.
func TestValidateConfigBuiltInGo(t *testing.T) {
	c := &Config{Histograms: []Histogram{{Name: "p", Field: "f", Bins: []string{"a"}}}}
	c.ApplyDefaults()
	probs := problems(t, c.Validate())
	for _, p := range probs {
		if p.Line != 0 {
			t.Errorf("problem of a Config built in Go has a line: %v", p)
		}
	}
	if len(probs) == 0 || strings.Contains(probs[0].String(), "line") {
		t.Errorf("problems %v", probs)
	}
}
