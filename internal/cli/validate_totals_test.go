package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestValidatePrintsTotals (issue 29): `stage validate` says at which level
// the releases' intervals are and how their totals are made — for
// dirichlet a charged discrete Gaussian with its σ, cost, half-width and
// share; for the additive mechanisms the noisy counts' sum, free; for an
// average histogram its kept users' count — and `stage plan` prints the
// same lines.
func TestValidatePrintsTotals(t *testing.T) {
	const base = `kafka:
  brokers: [localhost:9092]
histograms:
  - name: pages
    field: page
    bins: [home, search, other]
%sprivacy:
  mechanism: %s
  budget:
    epsilon: 1
output:
  interval_level: 0.9
`
	avg := "  - name: interests\n    kind: average\n    field: interests\n    bins: [a, b, c]\n    average: {users: 10000000, k: 100}\n"
	for _, tc := range []struct {
		name, extra, mech string
		want              []string
		absent            string
	}{
		{"dirichlet", "", "dirichlet", []string{"intervals 90% confidence intervals", "totals count histograms: each group's counted events + discrete Gaussian noise, σ=", "privacy.total_share=0.1 of the RDP budget at λ=2"}, "no charge"},
		{"gaussian", "", "gaussian", []string{"totals count histograms: the sum of the noisy counts already drawn (gaussian; no charge)"}, "discrete Gaussian noise"},
		{"gaussian and average", avg, "gaussian", []string{"(gaussian; no charge)", "totals average histograms: the kept users + discrete Gaussian noise, σ="}, "count histograms: each group's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "c.yaml")
			y := strings.Replace(strings.Replace(base, "%s", tc.extra, 1), "%s", tc.mech, 1)
			if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if code := Validate([]string{"--config", path}, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			got := spaces.ReplaceAllString(out.String(), " ") // whatever the columns' widths
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("validate lacks %q:\n%s", w, out.String())
				}
			}
			if strings.Contains(got, tc.absent) {
				t.Errorf("validate has %q:\n%s", tc.absent, out.String())
			}
			out.Reset()
			if code := Plan([]string{"--config", path, "--events", "100", "--reps", "100", "--out", filepath.Join(dir, "out")}, &out, &errb); code != 0 {
				t.Fatalf("plan: exit %d: %s", code, errb.String())
			}
			if !strings.Contains(spaces.ReplaceAllString(out.String(), " "), "\ntotals ") {
				t.Errorf("plan lacks the totals line:\n%s", out.String())
			}
		})
	}
}

var spaces = regexp.MustCompile(` +`)
