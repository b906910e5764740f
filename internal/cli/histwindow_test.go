package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateHistogramWindows: `stage validate` and `stage plan` say how
// many windows each histogram composes per period and at which cadence it
// is released when histograms have windows of their own.
func TestValidateHistogramWindows(t *testing.T) {
	const y = `
kafka:
  brokers: [localhost:9092]
histograms:
  - name: pages
    field: page
    bins: [home, search, other]
  - name: daily
    field: page
    bins: [home, search, other]
    window: 1h
  - name: interests
    kind: average
    field: interests
    bins: [news, sport, music]
    window: 10m
    average: {users: 10000, k: 1000, eta: 0.01}
privacy:
  budget:
    epsilon: 100
    period: 1h
`
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := Validate([]string{"--config", path}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, w := range []string{"60 windows (pages, 1m) + 1 windows (daily, 1h) = 61 charges per period", "6 average releases",
		"histogram daily", "released every 1h0m0s", "released every 10m0s"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("validate output lacks %q:\n%s", w, out.String())
		}
	}
	out.Reset()
	if code := Plan([]string{"--config", path, "--events", "100", "--out", t.TempDir()}, &out, &errb); code != 0 {
		t.Fatalf("plan exit %d: %s", code, errb.String())
	}
	if w := "60 windows (pages, 1m) + 1 windows (daily, 1h) = 61 charges per period"; !strings.Contains(out.String(), w) {
		t.Errorf("plan output lacks %q:\n%s", w, out.String())
	}
}
