package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// shippedConfigs are the stage configs the project ships, relative to the
// repository's root: every examples/*.yaml and deploy/*.yaml (deploy's
// prometheus and grafana files are .yml and not stage configs). A glob, not
// a list, so that a config added later is checked too (issue 28 item 5:
// the list of issue #21 left examples/distributed-local.yaml and
// deploy/stage-distributed.yaml out, and both kept δ = 1e-6 for 2.9·10⁸ and
// 2.4·10⁷ user ids a day).
func shippedConfigs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{"examples/*.yaml", "deploy/*.yaml"} {
		m, err := filepath.Glob(filepath.Join("..", "..", pat))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, err := filepath.Rel(filepath.Join("..", ".."), f)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, filepath.ToSlash(rel))
		}
	}
	if len(out) < 7 {
		t.Fatalf("found %d shipped configs (%v), want the 7 of examples/ and deploy/ at least", len(out), out)
	}
	return out
}

// TestShippedExamplesPassTheirOwnChecks (issue #21 item 7, issue 28 item
// 5): every config the project ships validates with privacy.expected_users
// set to its own generator's population, the total δ (with the user-hash
// collision term) fits it — no δ·users warning — and its releases are
// informative (no near-uniform warning).
func TestShippedExamplesPassTheirOwnChecks(t *testing.T) {
	for _, f := range shippedConfigs(t) {
		t.Run(f, func(t *testing.T) {
			// From the repository's root, as the README runs them (the
			// demos' events.schema_files paths are relative to it).
			t.Chdir(filepath.Join("..", ".."))
			var out, errb bytes.Buffer
			if code := Validate([]string{"--config", f}, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			s := out.String()
			if !strings.Contains(s, "for privacy.expected_users = ") || !strings.Contains(s, "total δ = ") {
				t.Errorf("%s: privacy.expected_users not set, δ not checked against the population:\n%s", f, s)
			}
			for _, bad := range []string{"privacy.budget.delta:", "near-uniform", "WARNING"} {
				if strings.Contains(s, bad) {
					t.Errorf("%s: validate warns (%q):\n%s", f, bad, s)
				}
			}
		})
	}
}
