package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/dpstage/stage/internal/bench"
)

// TestMain runs this test binary as `stage` when `stage bench` started it
// as one of its child processes (the broker, a consumer): the harness
// re-executes its own executable with "bench child ROLE ...", which is this
// binary under `go test`.
func TestMain(m *testing.M) {
	if bench.IsChild() {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestBenchFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"bench", "--events", "0"}, 2},
		{[]string{"bench", "--rounds", "0"}, 2},
		{[]string{"bench", "--metrics-scrapes", "0"}, 2},
		{[]string{"bench", "--live-window-every", "2m"}, 2},
		{[]string{"bench", "--no-such-flag"}, 2},
		{[]string{"bench", "extra"}, 2},
		{[]string{"bench", "child"}, 2},             // no role
		{[]string{"bench", "child", "nonsense"}, 2}, // unknown role
	} {
		var out, errb bytes.Buffer
		if code := Main(c.args, &out, &errb); code != c.code {
			t.Errorf("%q: exit %d, want %d (stderr %q)", c.args, code, c.code, errb.String())
		}
	}
}

// TestBenchJSON runs a tiny bench (the three consumer kinds and /metrics,
// each consumer and the broker in a child process of this test binary)
// through the CLI and checks the JSON contract's main keys.
func TestBenchJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker process, consumer processes and a stage")
	}
	var out, errb bytes.Buffer
	code := Main([]string{"bench", "--events", "3000", "--windows", "5", "--rounds", "1", "--json", "--quiet", "--metrics-scrapes", "3",
		"--skip-live", "--skip-memory", "--skip-release", "--skip-inprocess"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	for _, k := range []string{"stage_vs_reader", "stage_vs_reader_cpu", "stage_vs_kgo", "stage_vs_kgo_cpu",
		"reader_events_per_sec", "kgo_events_per_sec", "stage_events_per_sec",
		"reader_cpu_us_per_record", "kgo_cpu_us_per_record", "stage_cpu_us_per_record",
		"broker_cpu_share_max", "catchup_latency_p99_ms"} {
		if v, ok := m[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", k, m[k])
		}
	}
	for _, k := range []string{"reader", "kgo", "stage", "metrics"} {
		if _, ok := m[k].(map[string]any); !ok {
			t.Errorf("%s = %v, want an object", k, m[k])
		}
	}
	if _, ok := m["bytes_per_active_user"]; ok {
		t.Error("bytes_per_active_user present although the memory phase was skipped")
	}
	if strings.TrimSpace(errb.String()) != "" {
		t.Errorf("--quiet printed %q", errb.String())
	}
}
