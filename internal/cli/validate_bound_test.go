package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestValidateWindowBound: with contribution.max_windows_per_user `stage
// validate` and `stage plan` say what a period composes — min(K, W)
// windows' curves per histogram, one period reservation each — and the
// per-release calibration's larger curve under replace; without it the
// lines keep their format.
func TestValidateWindowBound(t *testing.T) {
	const cfg = `kafka:
  brokers: [localhost:9092]
window:
  size: 1m
histograms:
  - name: pages
    field: page
    bins: [home, search, cart, checkout, other]
privacy:
  mechanism: gaussian
  neighbour: replace
  budget:
    epsilon: 1
    period: 24h
`
	for _, tc := range []struct {
		name, yaml string
		validate   []string
		plan       []string
	}{
		{"bound", cfg + "contribution:\n  max_windows_per_user: 5\n", []string{
			"composition", "5 windows (max_windows_per_user=5 of 1440) × 1 count histograms = 5 per-window curves per period, charged as one period reservation per histogram",
			"per release", "(λ=2, ε=",
			")-RDP charged per window (max of the replace curve and twice the add_remove curve)",
			"period total", "ε=",
			"over 5 per-window curves",
		}, []string{
			"composition", "5 windows (max_windows_per_user=5 of 1440) × 1 histograms = 5 per-window curves per period, charged as one period reservation per histogram",
			"charged per window (max of the replace curve and twice the add_remove curve)",
		}},
		{"no bound", cfg, []string{
			"composition", "1440 windows × 1 count histograms = 1440 charges per period",
			"over 1440 charges",
		}, []string{
			"composition", "1440 windows × 1 histograms = 1440 charges per period",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "c.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if code := Validate([]string{"--config", path}, &out, &errb); code != 0 {
				t.Fatalf("validate: exit %d\n%s\n%s", code, out.String(), errb.String())
			}
			inOrder(t, "validate", out.String(), tc.validate)
			out.Reset()
			if code := Plan([]string{"--config", path, "--events", "1000", "--reps", "100", "--out", filepath.Join(dir, "out")}, &out, &errb); code != 0 {
				t.Fatalf("plan: exit %d\n%s\n%s", code, out.String(), errb.String())
			}
			inOrder(t, "plan", out.String(), tc.plan)
		})
	}
}
