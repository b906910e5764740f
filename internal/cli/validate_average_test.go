package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateAverage: `stage validate` prints the average histograms'
// (ε, δ) per release and both shares of the budget, also when every
// histogram is an average one (no count mechanism is calibrated then), and
// `stage plan` refuses a config without count histograms with a pointer to
// validate.
func TestValidateAverage(t *testing.T) {
	const mixed = `
kafka:
  brokers: [localhost:9092]
histograms:
  - name: pages
    field: page
    bins: [home, search, other]
  - name: interests
    kind: average
    field: interests
    bins: [news, sport, music]
    average: {users: 10000, k: 1000, eta: 0.01}
privacy:
  budget:
    epsilon: 100
    period: 1h
`
	only := strings.Replace(mixed, `  - name: pages
    field: page
    bins: [home, search, other]
`, "", 1)
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"mixed", mixed, []string{"average interests", "(ε=1.15779, δ=8.33e-09)-DP per release", "grid residual included (ideal ε=1.15773", "average share", "ε=69.4676", "count share", "ε=30.5324", "60 windows × 1 count histograms"}},
		{"average only", only, []string{"average interests", "average share", "histogram interests"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if code := Validate([]string{"--config", path}, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if tc.name == "average only" {
				if strings.Contains(out.String(), "count share") {
					t.Errorf("count share printed without count histograms:\n%s", out.String())
				}
				errb.Reset()
				if code := Plan([]string{"--config", path, "--events", "100", "--out", t.TempDir()}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "only average histograms") {
					t.Errorf("plan: exit %d, stderr %q", code, errb.String())
				}
			}
		})
	}
}
