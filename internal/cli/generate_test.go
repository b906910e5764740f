package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/internal/lib/embedded"
)

const generateYAML = `kafka:
  brokers: [%q]
  input_topic: %s
  output_topic: out
events: {time_field: ts, user_field: user_id}
histograms:
  - {name: pages, field: page, bins: [home, search, cart, checkout, other]}
privacy:
  budget: {epsilon: 5, delta: 1.0e-6, period: 1h}
state: {dir: %q}
http: {address: ""}
`

// TestGenerateMissingTopicFails (issue #16, item 4): `stage generate` into a
// topic the broker does not have exits 1 at once with an error naming the
// topic, instead of logging "generating synthetic events" and retrying
// silently forever. The control: with the topic present the check passes,
// events are written, and a stop exits 0.
func TestGenerateMissingTopicFails(t *testing.T) {
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"out": 1, "present": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dir := t.TempDir()
	write := func(topic string) string {
		p := filepath.Join(dir, topic+".yaml")
		y := fmt.Sprintf(generateYAML, b.Addr(), topic, filepath.Join(dir, "state"))
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const bound = 10 * time.Second

	t.Run("missing", func(t *testing.T) {
		var stdout, stderr syncBuffer
		code := make(chan int, 1)
		start := time.Now()
		go func() { code <- Generate([]string{"--config", write("missing")}, &stdout, &stderr) }()
		select {
		case c := <-code:
			if c != 1 {
				t.Errorf("exit code %d, want 1", c)
			}
			if want := `input topic \"missing\" does not exist`; !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr lacks %s:\n%s", want, stderr.String())
			}
			if strings.Contains(stderr.String(), "generating synthetic events") {
				t.Errorf("claims to be generating into a missing topic:\n%s", stderr.String())
			}
			t.Logf("missing topic: exit %d after %v", c, time.Since(start).Round(time.Millisecond))
		case <-time.After(bound):
			t.Fatalf("generate into a missing topic still running after %v:\n%s", bound, stderr.String())
		}
	})

	t.Run("present", func(t *testing.T) {
		cfg, code := loadConfig(write("present"), io.Discard)
		if cfg == nil {
			t.Fatalf("config: exit %d", code)
		}
		var stderr syncBuffer
		log, err := newLogger(cfg.Log, &stderr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		exit := make(chan int, 1)
		go func() { exit <- generate(ctx, cfg, log, &stderr) }()
		deadline := time.Now().Add(bound)
		for {
			if ps := b.Cluster().PartitionInfos("present"); len(ps) > 0 && ps[0].HighWatermark > 0 {
				break
			}
			select {
			case c := <-exit:
				t.Fatalf("generate into an existing topic exited %d:\n%s", c, stderr.String())
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("nothing written to the existing topic in %v:\n%s", bound, stderr.String())
			}
		}
		cancel()
		select {
		case c := <-exit:
			if c != 0 {
				t.Errorf("exit code %d after a stop, want 0:\n%s", c, stderr.String())
			}
		case <-time.After(bound):
			t.Fatalf("generate did not stop")
		}
	})
}
