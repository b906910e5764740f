package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// TestRunAverageOnly (issue #15, item 3): `stage run` on a config whose
// histograms are all of kind average — one that `stage validate` accepts —
// runs, logs its plan and releases, instead of panicking on the absent
// count part of the plan.
func TestRunAverageOnly(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := string(raw)
	i, j := strings.Index(y, "histograms:"), strings.Index(y, "contribution:")
	y = y[:i] + `histograms:
  - name: interests
    kind: average
    field: interests
    bins: [news, sport, music]
    average:
      users: 100000
      k: 100
` + y[j:]
	for old, repl := range map[string]string{
		"size: 5s ":                "size: 1s ",
		"epsilon: 1.0 ":            "epsilon: 1000.0 ",
		"period: 24h":              "period: 1m",
		"./stage-state/quickstart": filepath.ToSlash(t.TempDir()),
	} {
		if !strings.Contains(y, old) {
			t.Fatalf("quickstart.yaml no longer contains %q", old)
		}
		y = strings.Replace(y, old, repl, 1)
	}
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y)
	}
	path := filepath.Join(t.TempDir(), "average.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	var vout, verr syncBuffer
	if code := Main([]string{"validate", "--config", path}, &vout, &verr); code != 0 {
		t.Fatalf("stage validate refuses the config (exit %d): %s%s", code, vout.String(), verr.String())
	}
	cfg.HTTP.Address, cfg.HTTP.OperatorAddress = "", ""
	var logs, out syncBuffer
	log := e2e.ConsoleLog(&logs)
	run := e2e.Go(t, "the stage", func(ctx context.Context) error { return runStage(ctx, cfg, log, &out, true) })
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "interests") {
		select {
		case err := <-run.Done():
			t.Fatalf("runStage returned early: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Errorf("no release of the average histogram within 30s:\n%s", logs.String())
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	run.Stop(t)
	if !strings.Contains(logs.String(), "privacy plan") {
		t.Errorf("no privacy plan logged:\n%s", logs.String())
	}
}
