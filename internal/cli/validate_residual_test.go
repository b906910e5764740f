package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidatePrintsGridResidual (issue #21 item 1): `stage validate` and
// `stage plan` print the release grid's residual charged with every
// Dirichlet release (k = 2 under replace: 5.99999e-05 at λ = 2) and what the
// calibration composes to without it; the exact integer samplers get no
// such line. A period the residual alone cannot fit is refused with the
// reason.
func TestValidatePrintsGridResidual(t *testing.T) {
	const base = `kafka:
  brokers: [localhost:9092]
histograms:
  - name: pages
    field: page
    bins: [home, search, other]
  - name: countries
    field: country
    bins: [US, DE, other]
privacy:
  mechanism: %s
  budget:
    epsilon: 1
`
	for _, tc := range []struct {
		mech, window string
		code         int
		want, absent string
	}{
		{"dirichlet", "1m", 0, "grid residual        e(λ) = k·[λ·log(1+ρ) − (λ−1)·log(1−ρ)]/(λ−1), k=2 changed coordinates, ρ=1e-05: 5.99999e-05 per release at λ=2, charged with every release (included below; without it the same calibration composes to ε=0.8", ""},
		{"gaussian", "1m", 0, "period total", "grid residual"},
		// 2 × 17,280 windows a day: the residual alone composes to ε ≈ 1.39.
		{"dirichlet", "5s", 2, "the release grid's residual alone (34560 releases", ""},
	} {
		t.Run(tc.mech+" "+tc.window, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "c.yaml")
			y := strings.Replace(base, "%s", tc.mech, 1) + "window:\n  size: " + tc.window + "\n"
			if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := Validate([]string{"--config", path}, &out, &errb)
			all := out.String() + errb.String()
			if code != tc.code || !strings.Contains(all, tc.want) || (tc.absent != "" && strings.Contains(all, tc.absent)) {
				t.Fatalf("exit %d (want %d), want %q, not %q:\n%s", code, tc.code, tc.want, tc.absent, all)
			}
			if tc.code != 0 || tc.mech != "dirichlet" {
				return
			}
			out.Reset()
			if code := Plan([]string{"--config", path, "--events", "100", "--reps", "100", "--out", filepath.Join(dir, "out")}, &out, &errb); code != 0 {
				t.Fatalf("plan: exit %d: %s", code, errb.String())
			}
			if !strings.Contains(out.String(), "grid residual") || !strings.Contains(out.String(), "5.99999e-05 per release at λ=2") {
				t.Errorf("stage plan does not print the grid residual:\n%s", out.String())
			}
		})
	}
}
