package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// verdictRank orders the verdict words: lower is better.
func verdictRank(v string) int {
	for i, w := range []string{"useful", "rough", "near-uniform"} {
		if strings.HasPrefix(v, w+" ") {
			return i
		}
	}
	return -1
}

// planVerdicts runs `stage plan` and returns the verdict of each
// (histogram, truth, N) row of its error tables.
func planVerdicts(t *testing.T, args ...string) (map[string]string, string) {
	t.Helper()
	code, out, errs := runMain(append([]string{"plan", "--reps", "100"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	verdicts := map[string]string{}
	hist := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "histogram ") {
			hist = strings.TrimSuffix(strings.Fields(line)[1], ":")
			continue
		}
		f := strings.Fields(line)
		if hist == "" || len(f) < 3 || (f[0] != "flat" && f[0] != "skewed") {
			continue
		}
		i := strings.Index(line, "  useful")
		if i < 0 {
			if i = strings.Index(line, "  rough"); i < 0 {
				i = strings.Index(line, "  near-uniform")
			}
		}
		if i < 0 {
			t.Fatalf("row without a verdict: %q", line)
		}
		verdicts[hist+" "+f[0]+" "+f[1]] = strings.TrimSpace(line[i:])
	}
	return verdicts, out
}

// TestPlanVerdict: the verdict column answers whether releases will be
// useful the way `stage validate` does, and never gets better as N falls.
// The old verdict (privacy error against sampling error) said "too small"
// for the shipped deploy/stage.yaml at its own planning figure while
// validate's expected error was 15% of "uniform", "too small" at N =
// 15,000 where ℓ2 is 0.02, and "marginal" at N = 100 but "too small" at
// 1,000 on the quickstart.
func TestPlanVerdict(t *testing.T) {
	t.Parallel()
	// The privacy settings deploy/stage.yaml shipped with when issue 23 was
	// filed.
	deploy := filepath.Join(t.TempDir(), "deploy.yaml")
	if err := os.WriteFile(deploy, []byte(`kafka: {brokers: [localhost:9092]}
window: {size: 1m}
histograms:
  - {name: pages, field: page, bins: [home, search, cart, checkout, other], overflow_bin: other, group_by: country, groups: [US, DE, FR]}
contribution: {max_events_per_user: 1, max_groups_per_user: 1, max_windows_per_user: 5}
privacy:
  mechanism: dirichlet
  calibration: optimal
  expected_events_per_release: 3000
  neighbour: replace
  order: 2
  expected_users: 24050000
  budget: {epsilon: 1.0, delta: 1.0e-10, period: 24h}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	v, out := planVerdicts(t, "--config", deploy, "--events", "3000,15000")
	for _, truth := range []string{"flat", "skewed"} {
		for _, n := range []string{"3000", "15000"} {
			if got := v[`"pages" `+truth+" "+n]; verdictRank(got) != 0 {
				t.Errorf("the shipped deploy settings, %s truth, N=%s: verdict %q, want useful", truth, n, got)
			}
		}
	}
	if !strings.Contains(out, "(15%: useful)") {
		t.Errorf("stage plan's expected-error line (the one stage validate prints) does not call N=3000 useful:\n%s", out)
	}
	v2, _ := planVerdicts(t, "--config", planConfig(t, "optimal"), "--events", "100,1000")
	for k, s := range v2 {
		v[k] = s
	}
	for _, hist := range []string{`"pages"`, `"countries"`} {
		for _, truth := range []string{"flat", "skewed"} {
			prev := -1
			for _, n := range []string{"100", "1000", "3000", "15000"} {
				got, ok := v[hist+" "+truth+" "+n]
				if !ok {
					continue
				}
				r := verdictRank(got)
				if r < 0 || (prev >= 0 && r > prev) {
					t.Errorf("%s %s: verdict %q at N=%s after a better one at a smaller N", hist, truth, got, n)
				}
				prev = r
			}
		}
	}
	if got := v2[`"pages" skewed 100`]; !strings.Contains(got, "useful from N ≈ ") {
		t.Errorf("quickstart at N=100: %q says nothing of what would make it useful", got)
	}
}

// TestPlanDefaults: without --events stage plan evaluates the config's
// privacy.expected_events_per_release, and without --out it writes no file
// (it used to create ./plan-out unasked).
func TestPlanDefaults(t *testing.T) {
	cfg := planConfig(t, "optimal")
	t.Chdir(t.TempDir())
	code, out, errs := runMain("plan", "--config", cfg, "--reps", "100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{"events per release: 1500 (privacy.expected_events_per_release", "N=1500", "no files written: --out DIR writes plan.csv and plan.png"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	rows := 0
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && (f[0] == "flat" || f[0] == "skewed") {
			rows++
			if f[1] != "1500" {
				t.Errorf("row at N=%s, want only the config's 1500: %q", f[1], l)
			}
		}
	}
	if rows != 4 { // 2 histograms × 2 truths
		t.Errorf("%d error rows, want 4:\n%s", rows, out)
	}
	if ents, err := os.ReadDir("."); err != nil || len(ents) != 0 {
		t.Errorf("stage plan without --out wrote %v (%v)", ents, err)
	}
}

// TestPlanActivity: with privacy.expected_windows_per_user stage plan
// prints the prediction through the period for the config and the best
// configuration per window size, recommends one, and with --out writes
// activity.csv (every window of each) and activity.png.
func TestPlanActivity(t *testing.T) {
	t.Parallel()
	y := `kafka: {brokers: [localhost:9092]}
window: {size: 1h}
histograms:
  - {name: pages, field: page, bins: [home, search, cart, checkout, other]}
contribution: {max_windows_per_user: 2}
privacy:
  mechanism: gaussian
  expected_events_per_release: 20000
  expected_windows_per_user: 12
  budget: {epsilon: 1, period: 24h}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runMain("plan", "--config", path, "--reps", "100", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	inOrder(t, "plan", out, []string{
		"activity (privacy.expected_windows_per_user = 12, the 90th percentile",
		"this config: pages (1h windows): a user at the 90th percentile is active in 12 of its 24 windows", "go blind",
		"configuration", "per-release ε", "mean ℓ2", "blind after", "verdict",
		"this config: pages (1h windows, K=2, gaussian)",
		"1h windows, K=", "3h windows, K=", "24h windows, K=1,",
		"views: pages (1h windows, K=", "views: pages_24h (24h windows, K=1,",
		"recommended: For this figure the finest useful single window size for every count histogram is",
		"views in one budget for returning users", "contribution:\n      max_windows_per_user: ",
		"  - name: pages_24h\n", "        window: 24h\n        max_windows_per_user: 1\n",
		"activity.csv", "activity.png",
	})
	csv, err := os.ReadFile(filepath.Join(dir, "activity.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
	this := 0
	for _, l := range lines[1:] {
		if strings.Contains(l, ",true,") {
			this++
		}
	}
	if this != 24 || len(lines) < 1+24+24+8+1+24+1 {
		t.Errorf("activity.csv: %d rows of this config (want 24), %d lines", this, len(lines))
	}
	if st, err := os.Stat(filepath.Join(dir, "activity.png")); err != nil || st.Size() == 0 {
		t.Errorf("activity.png: %v", err)
	}
}
