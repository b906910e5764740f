package layering

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/dpstage/stage/"

// below are the packages below pipeline: the steps of the data flow that
// neither read nor write Kafka.
var below = []string{"config", "decode", "window", "aggregate", "plan", "budget", "mechanism", "interval", "selection", "release", "ledger", "partial"}

// kafka is what they must not depend on, directly or not: the Kafka
// clients (only source, sink, pipeline's wiring and internal tools use
// them) and the packages that use them.
var kafka = []string{
	"github.com/segmentio/kafka-go",
	"github.com/twmb/franz-go/pkg/kgo",
	"github.com/twmb/franz-go/pkg/kmsg",
	module + "source",
	module + "sink",
	module + "pipeline",
	// The release log on Kafka (kgo): like sink, a Kafka-facing package;
	// release and the rest reach it only through the ledger.Store
	// interface, which pipeline's wiring fills.
	module + "ledger/kafkalog",
	// The distributed mode's internal topics (kgo), likewise.
	module + "partial/kafkapartial",
}

// TestNoKafkaBelowPipeline: `go list -deps` of every package below pipeline
// (its non-test dependencies, transitively) holds no Kafka client and none
// of the packages that speak Kafka.
func TestNoKafkaBelowPipeline(t *testing.T) {
	pkgs := make([]string, 0, len(below))
	for _, p := range below {
		pkgs = append(pkgs, module+p)
	}
	deps := listDeps(t, pkgs...)
	for _, b := range below {
		d, ok := deps[module+b]
		if !ok {
			t.Errorf("package %s not listed", b)
			continue
		}
		for _, dep := range d {
			for _, k := range kafka {
				if dep == k || strings.HasPrefix(dep, k+"/") {
					t.Errorf("%s depends on %s", b, dep)
				}
			}
		}
	}
}

// listDeps is `go list -json` of pkgs: each package's non-test
// dependencies, transitively, by import path (the test skips without the
// go command).
func listDeps(t *testing.T, pkgs ...string) map[string][]string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Deps"}, pkgs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	deps := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		deps[p.ImportPath] = p.Deps
	}
	return deps
}

// TestIntervalIsALeaf: the interval package (the release intervals, a step
// below release/) imports no package of the stage but internal/lib — it
// computes from a release and public parameters only, so nothing of the
// data flow (counts, plans, the ledger) can reach it.
func TestIntervalIsALeaf(t *testing.T) {
	deps := listDeps(t, module+"interval")
	for _, d := range deps[module+"interval"] {
		if strings.HasPrefix(d, module) && !strings.HasPrefix(d, module+"internal/lib/") {
			t.Errorf("interval depends on %s", strings.TrimPrefix(d, module))
		}
	}
}
