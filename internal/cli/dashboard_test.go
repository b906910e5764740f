package cli

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// TestDemoLogsDashboardFirst runs the quickstart demo (embedded broker and
// generator) and checks that the first log line is the dashboard's address,
// that the page is served there, and that it turns ready.
func TestDemoLogsDashboardFirst(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "..", "examples", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP.Address = "127.0.0.1:0"         // the demo's 8080 may be taken
	cfg.HTTP.OperatorAddress = "127.0.0.1:0" // and its 8081
	cfg.State.Dir = t.TempDir()
	var logs syncBuffer
	log := e2e.ConsoleLog(&logs)
	e2e.Go(t, "the demo", func(ctx context.Context) error { return runStage(ctx, cfg, log, io.Discard, false) })

	var url string
	deadline := time.Now().Add(10 * time.Second)
	for url == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no log line yet:\n%s", logs.String())
		}
		first, _, complete := strings.Cut(logs.String(), "\n")
		if complete {
			_, u, ok := strings.Cut(first, "dashboard: ")
			if !ok || !strings.HasPrefix(u, "http://127.0.0.1:") {
				t.Fatalf("first log line %q is not the dashboard address", first)
			}
			url = strings.TrimSpace(u)
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(page), "Private histograms") {
		t.Fatalf("GET %s: %d", url, res.StatusCode)
	}
	for {
		res, err := http.Get(url + "readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 10s:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
