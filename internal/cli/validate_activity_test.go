package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// activityConfig is a 1m, one-day config with K = k (line 12) and the
// activity figure m (line 16), Gaussian at ε per day and n events per
// release.
func activityConfig(k, m, eps, n string) string {
	return `kafka:
  brokers: [localhost:9092]
window:
  size: 1m
histograms:
  - name: pages
    field: page
    bins: [home, search, cart, checkout, other]
    group_by: country
    groups: [US, DE, FR]
contribution:
  max_windows_per_user: ` + k + `
privacy:
  mechanism: gaussian
  expected_events_per_release: ` + n + `
  expected_windows_per_user: ` + m + `
  budget:
    epsilon: ` + eps + `
    period: 24h
`
}

// viewsActivityConfig is activityConfig with an hourly view of pages
// (K_h = kh, line 17) and a daily one (K_h = 1, line 24).
func viewsActivityConfig(k, m, kh string) string {
	return strings.Replace(activityConfig(k, m, "1", "5000"), "contribution:", `  - name: pages_1h
    field: page
    bins: [home, search, cart, checkout, other]
    group_by: country
    groups: [US, DE, FR]
    window: 1h
    max_windows_per_user: `+kh+`
  - name: pages_24h
    field: page
    bins: [home, search, cart, checkout, other]
    group_by: country
    groups: [US, DE, FR]
    window: 24h
    max_windows_per_user: 1
contribution:`, 1)
}

// TestValidateActivity: with privacy.expected_windows_per_user `stage
// validate` prints the prediction through the period, warns with the line
// of max_windows_per_user when K is below the figure (and when the
// windows go blind), warns with the figure's line when no window size is
// useful, stays quiet when K covers the figure, and refuses bad figures
// with their line.
func TestValidateActivity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		yaml      string
		code      int
		want, not []string
	}{
		{"K below the figure: blind", activityConfig("5", "720", "1", "5000"), 0, []string{
			"activity", "pages (1m windows): a user at the 90th percentile is active in 720 of its 1440 windows", "go blind (fewer than 5%) after 16m of each 24h",
			"warnings",
			"contribution.max_windows_per_user: line 12: view pages (1m windows): K = 5 is below the windows a user at privacy.expected_windows_per_user = 720",
			"windows go blind after about 16m of each 24h period",
			"the finest useful single window size for every count histogram is",
		}, []string{"no window size reaches"}},
		{"K below the figure, not blind", activityConfig("110", "120", "1", "5000"), 0, []string{
			"contribution.max_windows_per_user: line 12: view pages (1m windows): K = 110 is below the windows a user at privacy.expected_windows_per_user = 120",
			"windows count fewer than half of their active users after about",
		}, []string{"go blind", "no window size reaches"}},
		{"K covers the figure", activityConfig("10", "3", "1", "5000"), 0, []string{
			"with K = 10 every window counts at least half of its active users",
		}, []string{"warnings", "is below the windows"}},
		// Views (issue 23): the minute view's K = 10 covers the figure 3
		// (p ≈ 0.002), the hourly view's K_h = 2 does not cover its
		// 24·(1 − (1 − p)^60) ≈ 2.8 active hours: the warning names the
		// hourly view at its own max_windows_per_user line (17), the
		// minute view is not warned about, and each view has its line.
		{"views: the hour view's K below its active hours", viewsActivityConfig("10", "3", "2"), 0, []string{
			"activity", "pages (1m windows): a user at the 90th percentile is active in 3 of its 1440 windows",
			"with K = 10 every window counts at least half of its active users",
			"pages_1h (1h windows): a user at the 90th percentile is active in 2.823 of its 24 windows of a period (p = 0.118 per window = 1 − (1 − 0.00208)^60",
			"pages_24h (24h windows): a user at the 90th percentile is active in 0.9504 of its 1 windows",
			"with K = 1 of its 1 windows every window counts every active user all 24h",
			"warnings",
			"histograms[1].max_windows_per_user: line 17: view pages_1h (1h windows): K = 2 is below the windows a user at privacy.expected_windows_per_user = 3",
		}, []string{"view pages (1m windows)", "view pages_24h"}},
		{"nothing useful", activityConfig("5", "720", "0.01", "20"), 0, []string{
			"privacy.expected_windows_per_user: line 16: at this budget no window size reaches a useful error",
			"raise privacy.budget.epsilon",
		}, nil},
		{"not a number", activityConfig("5", ".nan", "1", "5000"), 2, []string{"privacy.expected_windows_per_user: line 16: must be a finite number"}, nil},
		{"negative", activityConfig("5", "-1", "1", "5000"), 2, []string{"privacy.expected_windows_per_user: line 16: must be greater than 0"}, nil},
		{"more than the period's windows", activityConfig("5", "1441", "1", "5000"), 2, []string{"privacy.expected_windows_per_user: line 16: must be at most the 1440 windows"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if code := Validate([]string{"--config", path}, &out, &errb); code != tc.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, tc.code, out.String(), errb.String())
			}
			got := out.String() + errb.String()
			inOrder(t, "validate", got, tc.want)
			for _, s := range tc.not {
				if strings.Contains(got, s) {
					t.Errorf("validate says %q:\n%s", s, got)
				}
			}
		})
	}
}
