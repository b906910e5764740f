package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/plan"
)

// validateOut runs `stage validate` on the YAML y and returns its output.
func validateOut(t *testing.T, y string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stage.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := Validate([]string{"--config", path}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	return out.String()
}

// lineOf returns the plan line that starts with label ("" if none).
func lineOf(out, label string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), label) {
			return l
		}
	}
	return ""
}

// TestValidateGuaranteeStatesTheTotalDelta (issue 28 item 5): the
// guarantee line states the total δ — the budget's plus the user-hash
// collision term 2n·2⁻⁶⁴ — never below its value (3.2·10⁻¹¹ for the
// quickstart's 2.9·10⁸ users, whose budget δ is 10⁻¹²), and without
// privacy.expected_users the term as a formula in n.
func TestValidateGuaranteeStatesTheTotalDelta(t *testing.T) {
	const base = `histograms:
  - {name: pages, field: page, bins: [home, other]}
privacy:
  budget: {epsilon: 1, delta: 1.0e-12}
`
	const n = 288050000
	total := 1e-12 + 2*float64(n)*0x1p-64
	g := lineOf(validateOut(t, base+"  expected_users: 288050000\n"), "guarantee")
	i, j := strings.Index(g, "δ="), strings.Index(g, ")-DP")
	if i < 0 || j < i {
		t.Fatalf("guarantee line %q", g)
	}
	stated, err := strconv.ParseFloat(g[i+len("δ="):j], 64)
	if err != nil || stated < total || stated > total*1.001 {
		t.Errorf("guarantee line %q states δ=%v, want the total %v (δ + 2n·2⁻⁶⁴), not below it", g, stated, total)
	}
	if !strings.Contains(g, "δ = 1e-12 of the budget + 3.12305e-11 for user-hash collisions among privacy.expected_users = 288050000") {
		t.Errorf("guarantee line %q does not say what the total is made of", g)
	}
	g = lineOf(validateOut(t, base), "guarantee")
	if !strings.Contains(g, "(ε=1, δ=1e-12 + 2n·2⁻⁶⁴)-DP per user per 24h0m0s, n the users of a period") {
		t.Errorf("without expected_users the guarantee line %q does not state the collision term", g)
	}
}

// TestFmtUp: a stated δ is never below its value.
func TestFmtUp(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{1e-12, "1e-12"}, {3.22e-11, "3.22e-11"}, {3.2230498e-11, "3.22305e-11"}, {1.0261e-10, "1.03e-10"},
		{1.0000326e-10, "1.00004e-10"}, {0.5, "0.5"}, {0, "0"},
	} {
		got := fmtUp(tc.v)
		r, err := strconv.ParseFloat(got, 64)
		if got != tc.want || err != nil || r < tc.v {
			t.Errorf("fmtUp(%v) = %q, want %q (≥ the value)", tc.v, got, tc.want)
		}
	}
}

// TestValidatePerReleaseShowsTheCharge (issue 28 item 5): `stage validate`'s
// "per release" line, labelled charged, states what the budget book charges
// one release at the calibration order — the mechanism's value rounded up
// plus, for the Dirichlet mechanism, the release grid's residual — printed
// never below it; before, it printed the calibration's ideal ε (6·10⁻⁵
// short for the Dirichlet demos).
func TestValidatePerReleaseShowsTheCharge(t *testing.T) {
	const base = `histograms:
  - {name: pages, field: page, bins: [home, search, other]}
contribution: {max_windows_per_user: 5}
privacy:
  budget: {epsilon: 1, delta: 1.0e-10}
  expected_users: 1000000
  expected_events_per_release: 1500
`
	for _, mech := range []string{"dirichlet", "gaussian", "laplace"} {
		t.Run(mech, func(t *testing.T) {
			y := base + "  mechanism: " + mech + "\n"
			p := mustPlanOf(t, y)
			spec := p.Count.Mechanism.Spec()
			charged, ok := p.Count.Charge.At(spec.Order)
			if !ok {
				t.Fatal("the charge has no point at the calibration order")
			}
			line := lineOf(validateOut(t, y), "per release")
			i := strings.Index(line, "ε=")
			j := strings.Index(line, ")-RDP charged")
			if i < 0 || j < i {
				t.Fatalf("per release line %q", line)
			}
			stated, err := strconv.ParseFloat(line[i+len("ε="):j], 64)
			if err != nil || stated < charged || stated > charged*(1+1e-5) {
				t.Errorf("per release line %q states ε=%v, the book charges %.17g at λ=%g", line, stated, charged, spec.Order)
			}
			if mech == "dirichlet" && !(stated > spec.RDPEpsilon+5e-5) {
				t.Errorf("per release line %q: ε=%v lacks the grid residual (ideal %v)", line, stated, spec.RDPEpsilon)
			}
		})
	}
}

// mustPlanOf parses the YAML y and derives its plan.
func mustPlanOf(t *testing.T, y string) *plan.Plan {
	t.Helper()
	cfg, err := config.Parse([]byte(y), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.DerivePlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
