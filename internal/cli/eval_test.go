package cli

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runMain(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestEvalQuick: `stage eval --quick` writes the CSVs and plots and prints
// the summary.
func TestEvalQuick(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runMain("eval", "--quick", "--out", dir, "--workers", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, f := range []string{"l2_vs_n.csv", "l2_vs_n.png", "renyi_vs_r.csv", "renyi_vs_r.png", "kl_vs_eps.csv", "kl_vs_eps.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, s := range []string{"2 workers", "(a)", "(b)", "(c)", "done in"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

func TestEvalBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"eval", "--reps", "-1"},
		{"eval", "--workers", "-2"},
		{"eval", "--nope"},
		{"eval", "extra"},
		{"eval", "--out", ""},
	} {
		if code, _, errs := runMain(args...); code != 2 || !strings.HasPrefix(errs, "stage eval: ") {
			t.Errorf("%v: exit %d, %q", args, code, errs)
		}
	}
	if code, out, _ := runMain("eval", "-h"); code != 0 || !strings.Contains(out, "usage: stage eval") {
		t.Errorf("-h: exit %d", code)
	}
}

// planConfig writes the quickstart config with the given calibration.
func planConfig(t *testing.T, calibration string) string {
	t.Helper()
	data, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "calibration: optimal", "calibration: "+calibration, 1)
	if !strings.Contains(s, "calibration: "+calibration) {
		t.Fatal("quickstart.yaml has no calibration: optimal line")
	}
	path := filepath.Join(t.TempDir(), "stage.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPlanExact: `stage plan` on the quickstart config with the exact
// calibration prints the calibration and an error table per histogram, and
// writes plan.csv and plan.png.
func TestPlanExact(t *testing.T) {
	cfg := planConfig(t, "exact")
	dir := t.TempDir()
	code, out, errs := runMain("plan", "--config", cfg, "--events", "1000,100", "--reps", "100", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{"dirichlet (exact)", "neighbour", "replace", "α=", `histogram "pages": 5 bins, 3 group(s)`,
		`histogram "countries": 4 bins`, "flat", "skewed", "sampling ℓ2", `"uniform" ℓ2`, "verdict",
		"calibrations compared at this budget", "dirichlet optimal", "gaussian", "N=1000"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	for _, f := range []string{"plan.csv", "plan.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	csv, _ := os.ReadFile(filepath.Join(dir, "plan.csv"))
	if n := strings.Count(string(csv), "\n"); n != 1+2*2*2 { // header + 2 histograms × 2 truths × 2 N
		t.Errorf("plan.csv has %d lines:\n%s", n, csv)
	}
}

func TestPlanBadFlags(t *testing.T) {
	cfg := planConfig(t, "concentrated")
	for _, args := range [][]string{
		{"plan", "--events", "100"},
		{"plan", "--config", cfg, "--events", "0"},
		{"plan", "--config", cfg, "--events", "10", "--out", ""},
		{"plan", "--config", cfg, "--events", "10,x"},
		{"plan", "--config", cfg, "--events", "10", "--reps", "5"},
		{"plan", "--config", filepath.Join(t.TempDir(), "missing.yaml"), "--events", "10"},
	} {
		if code, _, errs := runMain(args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d, %q", args, code, errs)
		}
	}
}

// TestCalibrateExact: --calibration exact with the replace relation gives
// the closed form α = (e+1)/(e−1) at λ = 2, ε = 1 (mechanism/exact.go);
// outside the covered cases it reports the fallback to concentrated.
func TestCalibrateExact(t *testing.T) {
	m := calJSON(t, append(workedExample, "--calibration", "exact", "--neighbour", "replace")...)
	if a, want := num(t, m, "alpha"), (math.E+1)/(math.E-1); math.Abs(a-want) > 1e-9 || m["neighbour"] != "replace" || m["exact_fallback"] != nil {
		t.Errorf("alpha %v (want %v), neighbour %v, fallback %v", a, want, m["neighbour"], m["exact_fallback"])
	}
	m = calJSON(t, "--calibration", "exact", "--order", "2", "--rdp-epsilon", "1", "--l2-sensitivity-sq", "8", "--linf-sensitivity", "2")
	c := calJSON(t, "--calibration", "concentrated", "--order", "2", "--rdp-epsilon", "1", "--l2-sensitivity-sq", "8", "--linf-sensitivity", "2")
	if m["exact_fallback"] == nil || num(t, m, "alpha") != num(t, c, "alpha") {
		t.Errorf("fallback %v, alpha %v vs concentrated %v", m["exact_fallback"], m["alpha"], c["alpha"])
	}
	code, out, _ := runCal(append(workedExample, "--calibration", "exact", "--neighbour", "replace")...)
	if code != 0 || !strings.Contains(out, "dirichlet (exact)") || !strings.Contains(out, "neighbour replace") {
		t.Errorf("table: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{
		append(workedExample, "--neighbour", "replace"),
		append(workedExample, "--calibration", "exact", "--neighbour", "swap"),
	} {
		if code, _, errs := runCal(args...); code != 2 || !strings.Contains(errs, "--neighbour") {
			t.Errorf("%v: exit %d, %q", args, code, errs)
		}
	}
}

// TestEvalSteady: `stage eval steady` on the shipped deploy config, over
// one hour instead of its day, prints the table and writes the files.
func TestEvalSteady(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, errs := runMain("eval", "steady", "--config", "../../deploy/stage.yaml", "--config", "../../examples/quickstart.yaml",
		"--users", "300", "--p", "0.5", "--period", "1h", "--window", "1m", "--out", dir, "--workers", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{"U = 300 users", "pages (1m, K=5)", "countries (1m, K=5)", "whole period", "0–5m", "20m–1h", "wrote steady.csv"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	for _, f := range []string{"steady.csv", "steady_summary.csv", "steady.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestEvalSteadyBadFlags(t *testing.T) {
	t.Parallel()
	cfg := "../../deploy/stage.yaml"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--config is required"},
		{[]string{"--config", cfg, "--p", "0"}, "--p must be a probability"},
		{[]string{"--config", cfg, "--p", "NaN"}, "--p must be a probability"},
		{[]string{"--config", cfg, "--p", "1.5"}, "--p must be a probability"},
		{[]string{"--config", cfg, "--users", "0"}, "--users must be"},
		{[]string{"--config", cfg, "--reps", "0"}, "--reps must be"},
		{[]string{"--config", cfg, "extra"}, "unexpected argument"},
		{[]string{"--config", cfg, "--period", "90s"}, "with --period/--window"},
		{[]string{"--config", "/nonexistent.yaml"}, "nonexistent.yaml"},
	} {
		code, _, errs := runMain(append([]string{"eval", "steady"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, %q (want 2 and %q)", tc.args, code, errs, tc.want)
		}
	}
	if code, out, _ := runMain("eval", "steady", "-h"); code != 0 || !strings.Contains(out, "usage: stage eval steady") {
		t.Errorf("-h: exit %d", code)
	}
}
