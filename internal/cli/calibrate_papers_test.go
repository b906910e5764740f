package cli

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// The 003 §VII identity example through the CLI: the JSON carries our
// figures (pinned in mechanism.TestSimplexPaperExamples).
func TestCalibrateSimplexJSON(t *testing.T) {
	m := calJSON(t, "--mechanism", "simplex-dirichlet", "--k", "24", "--eta", "0.05", "--eta-bar", "0.05",
		"--bins", "3", "--w", "1,2", "--b", "0.4", "--target-delta", "0.05")
	if m["mechanism"] != "simplex-dirichlet" || m["guarantee"] != "approx-dp" {
		t.Errorf("mechanism/guarantee = %v/%v", m["mechanism"], m["guarantee"])
	}
	if e := num(t, m, "epsilon"); math.Abs(e-38.402464330204026) > 1e-9 {
		t.Errorf("epsilon = %v", e)
	}
	if d := num(t, m, "delta"); !(d <= 0.05) || d < 0.0499 {
		t.Errorf("delta = %v", d)
	}
	for _, k := range []string{"gamma", "epsilon_beta", "epsilon_gamma", "p_star", "b_prime", "delta_lower", "k", "eta", "eta_bar", "b", "average", "target_delta"} {
		num(t, m, k)
	}
	if _, ok := m["rdp"]; ok {
		t.Error("an (ε, δ)-DP mechanism must not print an rdp curve")
	}
}

func TestCalibratePosteriorKinds(t *testing.T) {
	lp := calJSON(t, "--mechanism", "laplace-posterior", "--prior", "1,1,1", "--epsilon", "1")
	if lp["guarantee"] != "pure-dp" || num(t, lp, "scale") != 2 || lp["variant"] != "hist" {
		t.Errorf("laplace-posterior: %v", lp)
	}
	rdp := rdpPoints(t, lp)
	for _, p := range rdp {
		if p.eps > 1 || p.eps > p.order/2 {
			t.Errorf("rdp point %v above min(ε, λε²/2)", p)
		}
	}
	ehd := calJSON(t, "--mechanism", "ehd", "--prior", "1,1", "--n", "50", "--epsilon", "1")
	if num(t, ehd, "candidates") != 51 || math.Abs(num(t, ehd, "hellinger_sensitivity")-math.Sqrt(1-math.Pi/4)) > 1e-3 {
		t.Errorf("ehd: %v", ehd)
	}
	ehds := calJSON(t, "--mechanism", "ehds", "--prior", "1,1", "--n", "50", "--epsilon", "1", "--delta", "1e-6", "--counts", "5,45")
	if ehds["guarantee"] != "approx-dp" || num(t, ehds, "delta") != 1e-6 || !(num(t, ehds, "smooth_sensitivity") > 0) || !(num(t, ehds, "smoothing") > 0) {
		t.Errorf("ehds: %v", ehds)
	}
	// Table output works too.
	code, out, _ := runCal("--mechanism", "ehds", "--prior", "1,1", "--n", "50", "--epsilon", "1", "--delta", "1e-6")
	if code != 0 || !strings.Contains(out, "smoothing") {
		t.Errorf("table: %d %q", code, out)
	}
}

func TestCalibratePapersBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--mechanism", "simplex-dirichlet", "--k", "24"},
		{"--mechanism", "simplex-dirichlet", "--k", "24", "--eta", "0.05", "--eta-bar", "0.05", "--bins", "3", "--w", "1,x", "--b", "0.4", "--target-delta", "0.05"},
		{"--mechanism", "simplex-dirichlet", "--k", "24", "--eta", "0.05", "--eta-bar", "0.05", "--bins", "3", "--w", "1,2", "--b", "0.4", "--target-delta", "0.05", "--gamma", "0.1"},
		{"--mechanism", "simplex-dirichlet", "--k", "24", "--eta", "0.6", "--eta-bar", "0.05", "--bins", "3", "--w", "1,2", "--b", "0.4", "--target-delta", "0.05"},
		{"--mechanism", "ehd", "--prior", "1,1", "--epsilon", "1"},
		{"--mechanism", "ehd", "--prior", "1,1", "--n", "5", "--epsilon", "1", "--order", "2"},
		{"--mechanism", "ehds", "--prior", "1,1", "--n", "5", "--epsilon", "1"},
		{"--mechanism", "ehds", "--prior", "1,1,1,1", "--n", "1000", "--epsilon", "1", "--delta", "1e-6", "--max-candidates", "100"},
		{"--mechanism", "laplace-posterior", "--prior", "0,1", "--epsilon", "1"},
		{"--mechanism", "laplace-posterior", "--prior", "1,1", "--epsilon", "1", "--variant", "foo"},
		{"--mechanism", "laplace-posterior", "--prior", "1,1", "--epsilon", "NaN"},
	} {
		code, _, errs := runCal(args...)
		if code != 2 || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, "--") && !strings.Contains(errs, "mechanism:") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
}

func TestCalibrateHelpListsPapersFlags(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--mechanism", "ehds", "-h"}} {
		code, out, _ := runCal(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		for _, want := range []string{"simplex-dirichlet", "--target-delta", "--eta-bar", "laplace-posterior", "--variant", "ehd ", "ehds", "--max-candidates", "--counts"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: help lacks %q", args, want)
			}
		}
	}
	var v papersOutput
	if err := json.Unmarshal([]byte(`{"mechanism":"ehd"}`), &v); err != nil {
		t.Fatal(err)
	}
}
