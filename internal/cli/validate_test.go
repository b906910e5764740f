package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateReports: what `stage validate` prints for a file with syntax
// and value mistakes together (both, each with its line), for a δ that makes
// the guarantee meaningless (refused), and for a δ that is large for the
// configured number of users (a warning beside the plan).
func TestValidateReports(t *testing.T) {
	const good = `kafka:
  brokers: [localhost:9092]
histograms:
  - name: pages
    field: page
    bins: [home, other]
privacy:
  budget:
    epsilon: 1
`
	for _, tc := range []struct {
		name, yaml string
		code       int
		stdout     []string // fragments, in order
		stderr     []string
	}{
		{"syntax and value mistakes", `kafka:
  brokers: [localhost:9092]
histograms:
  - name: pages
    field: page
   bins: [home, other]
privacy:
  mechanism: laplacian
  budget:
    epsilon: 0
`, 2, nil, []string{
			"3 problem(s):",
			"  line 6: yaml syntax: did not find expected '-' indicator; lines 3-6 (histograms) were skipped and the rest of the file checked\n",
			`  privacy.mechanism: line 8: must be one of dirichlet, gaussian, laplace, laplace-posterior, got "laplacian"` + "\n",
			"  privacy.budget.epsilon: line 10: must be a finite number greater than 0\n",
		}},
		{"delta one half", good + "    delta: 0.5\n", 2, nil, []string{
			"1 problem(s):",
			"privacy.budget.delta: line 10: 0.5 is above 0.0001",
		}},
		{"delta against the users", good + "  expected_users: 50000\n", 0, []string{
			"config OK",
			"δ and users",
			"δ·users = 0.05 for privacy.expected_users = 50000 (keep it ≤ 0.01)",
			"warnings",
			"privacy.budget.delta: δ·expected_users = 0.05",
		}, nil},
		{"near-uniform releases", good, 0, []string{
			"expected error   pages: ℓ2 ≈ 0.405 at 1000 events per release (assumed: set privacy.expected_events_per_release to your traffic); \"uniform\" scores 0.408 (99%: near-uniform)",
			"warnings",
			"histograms[0]: line 4: releases will be near-uniform",
			"set contribution.max_windows_per_user (the budget is now split over all 1440 windows of the period)",
		}, nil},
		{"informative releases", strings.Replace(good, "epsilon: 1", "epsilon: 1\n  expected_events_per_release: 10000\ncontribution:\n  max_events_per_user: 1\nwindow:\n  size: 1h", 1), 0, []string{
			"expected error   pages: ℓ2 ≈ 0.0",
		}, nil},
		{"delta without users", good, 0, []string{
			"config OK",
			"δ·users ≤ 0.01 up to 10000 users per period (set privacy.expected_users to check yours; the total δ adds 2n·2⁻⁶⁴",
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if code := Validate([]string{"--config", path}, &out, &errb); code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out.String(), errb.String())
			}
			inOrder(t, "stdout", out.String(), tc.stdout)
			inOrder(t, "stderr", errb.String(), tc.stderr)
			if tc.name == "informative releases" && strings.Contains(out.String(), "near-uniform") {
				t.Errorf("unexpected near-uniform warning:\n%s", out.String())
			}
			if tc.name == "delta without users" && strings.Contains(out.String(), "privacy.budget.delta:") {
				t.Errorf("unexpected δ warning:\n%s", out.String())
			}
		})
	}
}

// inOrder checks that s holds every fragment, in order.
func inOrder(t *testing.T, what, s string, frags []string) {
	t.Helper()
	rest := s
	for _, f := range frags {
		i := strings.Index(rest, f)
		if i < 0 {
			t.Errorf("%s lacks %q (in order) in:\n%s", what, f, s)
			return
		}
		rest = rest[i+len(f):]
	}
}

// TestValidateSchemaFiles: `stage validate` compiles events.schema_files
// (a schema that does not parse is an error naming the entry and id).
func TestValidateSchemaFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.avsc")
	bad := filepath.Join(dir, "bad.avsc")
	os.WriteFile(good, []byte(`{"type":"record","name":"E","fields":[{"name":"user","type":{"type":"record","name":"U","fields":[{"name":"id","type":"string"}]}},{"name":"ts","type":"long"},{"name":"page","type":"string"}]}`), 0o600)
	os.WriteFile(bad, []byte(`{"type":"record","name":"E","fields":[{"name":"page","type":"nonsense"}]}`), 0o600)
	list := filepath.Join(dir, "list.avsc")
	os.WriteFile(list, []byte(`{"type":"record","name":"E","fields":[{"name":"user","type":{"type":"array","items":{"type":"record","name":"U","fields":[{"name":"id","type":"string"}]}}},{"name":"ts","type":"long"},{"name":"page","type":"string"}]}`), 0o600)
	lacks := filepath.Join(dir, "lacks.avsc")
	os.WriteFile(lacks, []byte(`{"type":"record","name":"E","fields":[{"name":"uid","type":"string"},{"name":"ts","type":"long"},{"name":"page","type":"string"}]}`), 0o600)
	for _, tc := range []struct {
		file string
		code int
		frag string
	}{{good, 0, "config OK"}, {bad, 2, "events.schema_files[0] (id 3)"},
		{list, 2, "events.schema_files[0] (id 3): user.id goes through a list"}, {lacks, 0, "schema id 3 has no field user.id"}} {
		cfg := filepath.Join(dir, "stage.yaml")
		os.WriteFile(cfg, []byte(`events:
  format: avro
  user_field: user.id
  schema_files:
    - id: 3
      file: `+tc.file+`
histograms:
  - name: pages
    field: page
    bins: [home, other]
privacy:
  budget:
    epsilon: 1
`), 0o600)
		var out, errb bytes.Buffer
		code := Validate([]string{"--config", cfg}, &out, &errb)
		if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.frag) {
			t.Errorf("%s: exit %d, want %d with %q\nstdout %s\nstderr %s", tc.file, code, tc.code, tc.frag, out.String(), errb.String())
		}
	}
}
