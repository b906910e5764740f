package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateShowsViews (issue #23 item 2): a minute view under
// contribution.max_windows_per_user = 5, an hour view with its own bound 24
// and a day view with 1 are accepted together; validate composes 5 + 24 + 1
// per-window curves and says per histogram what its view costs of the
// period budget (its reservation's share and its ε alone). An hour view
// without its own bound is refused with the line of the key to set.
func TestValidateShowsViews(t *testing.T) {
	const cfg = `kafka:
  brokers: [localhost:9092]
histograms:
  - {name: pages, field: page, bins: [home, search, cart, other]}
  - {name: hourly, field: page, bins: [home, search, cart, other], window: 1h, max_windows_per_user: 24}
  - {name: daily, field: page, bins: [home, search, cart, other], window: 24h, max_windows_per_user: 1}
contribution: {max_windows_per_user: 5}
privacy:
  mechanism: gaussian
  budget: {epsilon: 1, period: 24h}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "stage.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := Validate([]string{"--config", path}, &out, &errb); code != 0 {
		t.Fatalf("validate: exit %d\n%s", code, errb.String())
	}
	for _, want := range []string{
		"composition  pages 5 of 1440 (1m0s) + hourly 24 of 24 (1h0m0s) + daily 1 of 1 (24h0m0s) = 30 per-window curves per period",
		"released every 1m0s; a user counts in at most 5 of its 1440 windows a period: reservation of 5 per-window curves = 16.7% of the count histograms' period budget",
		"released every 1h0m0s; a user counts in at most 24 of its 24 windows a period: reservation of 24 per-window curves = 80% of",
		"released every 24h0m0s; a user counts in at most 1 of its 1 windows a period: reservation of 1 per-window curves = 3.33% of",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("validate output lacks %q:\n%s", want, out.String())
		}
	}
	bad := strings.Replace(cfg, ", window: 1h, max_windows_per_user: 24}", ", window: 1h}", 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := Validate([]string{"--config", path}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "histograms[1].max_windows_per_user: line 5: required with contribution.max_windows_per_user for a histogram with its own window (1h, 24 per privacy.budget.period)") {
		t.Errorf("an hour view without its own bound: exit %d\n%s", code, errb.String())
	}
}
