package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestShippedExamplesPassTheirOwnChecks (issue #21 item 7): the example
// configs the project ships validate with privacy.expected_users set to
// their own generators' populations, the total δ (with the user-hash
// collision term) fits them — no δ·users warning — and their releases are
// informative (no near-uniform warning).
func TestShippedExamplesPassTheirOwnChecks(t *testing.T) {
	for _, f := range []string{"examples/quickstart.yaml", "examples/quickstart-avro.yaml", "examples/quickstart-protobuf.yaml", "deploy/stage.yaml", "examples/returning-users.yaml"} {
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
