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

// quickstartConfig is examples/quickstart.yaml with 1 s windows, a slower
// generator, a free broker port, no HTTP listeners and state.dir dir.
func quickstartConfig(t *testing.T, dir string) *config.Config {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := string(raw)
	for old, repl := range map[string]string{
		"size: 5s ":                    "size: 1s ",
		"events_per_second: 4000":      "events_per_second: 300",
		"./stage-state/quickstart":     filepath.ToSlash(dir),
		"allowed_lateness: 500ms":      "allowed_lateness: 200ms",
		"users: 50000                ": "users: 2000                 ",
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
	cfg.HTTP.Address, cfg.HTTP.OperatorAddress = "", ""
	cfg.Kafka.EmbeddedPort = 0
	return cfg
}

// waitFor polls cond every 50 ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// TestDemoStandbyOnOneStateDir (issue 28 item 6): two copies of the demo
// on one state.dir. The second waits as a standby with no embedded broker
// of its own (it once started a second broker on the active one's data
// directory, which damaged the log: after the takeover every fetch failed),
// says so, and when the active copy stops it starts the broker on the same
// data and releases (its fetches work).
func TestDemoStandbyOnOneStateDir(t *testing.T) {
	defer func(p time.Duration) { embeddedStandbyPoll = p }(embeddedStandbyPoll)
	embeddedStandbyPoll = 100 * time.Millisecond
	dir := t.TempDir()
	const brokerLine = "embedded Kafka broker at"
	var logsA, outA, logsB, outB syncBuffer
	a := e2e.Go(t, "the active copy", func(ctx context.Context) error {
		return runStage(ctx, quickstartConfig(t, dir), e2e.ConsoleLog(&logsA), &outA, true)
	})
	if !waitFor(30*time.Second, func() bool { return strings.Contains(outA.String(), "pages") }) {
		t.Fatalf("the active copy released nothing within 30s:\n%s\n%s", outA.String(), logsA.String())
	}
	b := e2e.Go(t, "the standby copy", func(ctx context.Context) error {
		return runStage(ctx, quickstartConfig(t, dir), e2e.ConsoleLog(&logsB), &outB, true)
	})
	waitFor(3*time.Second, func() bool { return strings.Contains(outB.String(), brokerLine) })
	t.Logf("the standby, while the active copy runs: stdout %q; log:\n%s", outB.String(), logsB.String())
	if strings.Contains(outB.String(), brokerLine) {
		t.Fatalf("the standby started an embedded broker on the active copy's state.dir:\n%s\n%s", outB.String(), logsB.String())
	}
	if !strings.Contains(logsB.String(), "waiting as a standby, with no broker of its own") {
		t.Errorf("the standby does not say it waits:\n%s", logsB.String())
	}
	select {
	case err := <-b.Done():
		t.Fatalf("the standby returned while the active copy runs: %v\n%s", err, logsB.String())
	default:
	}
	a.Stop(t)
	if !waitFor(10*time.Second, func() bool { return strings.Contains(outB.String(), brokerLine) }) {
		t.Fatalf("the standby did not start the broker within 10s of the active copy's stop:\n%s", logsB.String())
	}
	_, after, _ := strings.Cut(outB.String(), brokerLine)
	if !waitFor(30*time.Second, func() bool {
		_, after, _ = strings.Cut(outB.String(), brokerLine)
		return strings.Contains(after, "pages")
	}) {
		t.Fatalf("the standby released nothing within 30s of taking over:\n%s\n%s", outB.String(), logsB.String())
	}
	for _, bad := range []string{"fetch limit", "partial record batch", "damaged"} {
		if strings.Contains(logsB.String(), bad) {
			t.Errorf("the standby's log says %q after the takeover:\n%s", bad, logsB.String())
		}
	}
	b.Stop(t)
}
