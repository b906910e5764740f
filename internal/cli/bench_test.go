package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"bench", "--events", "0"}, &out, &errb); code != 2 {
		t.Errorf("--events 0: exit %d, want 2 (stderr %q)", code, errb.String())
	}
	errb.Reset()
	if code := Main([]string{"bench", "extra"}, &out, &errb); code != 2 {
		t.Errorf("stray argument: exit %d, want 2", code)
	}
}

// TestBenchJSON runs a tiny bench (ceiling and stage only) through the CLI
// and checks the JSON contract's main keys.
func TestBenchJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker and a stage")
	}
	var out, errb bytes.Buffer
	code := Main([]string{"bench", "--events", "3000", "--windows", "5", "--rounds", "1", "--json", "--quiet",
		"--skip-live", "--skip-memory", "--skip-release", "--skip-inprocess", "--skip-conn-batch"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	for _, k := range []string{"stage_vs_ceiling", "ceiling_events_per_sec", "stage_events_per_sec", "catchup_latency_p99_ms"} {
		if v, ok := m[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", k, m[k])
		}
	}
	if _, ok := m["bytes_per_active_user"]; ok {
		t.Error("bytes_per_active_user present although the memory phase was skipped")
	}
	if strings.TrimSpace(errb.String()) != "" {
		t.Errorf("--quiet printed %q", errb.String())
	}
}
