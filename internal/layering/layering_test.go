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
var below = []string{"config", "decode", "window", "aggregate", "plan", "budget", "mechanism", "release", "ledger", "partial"}

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
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	args := []string{"list", "-deps", "-json=ImportPath,Deps"}
	for _, p := range below {
		args = append(args, module+p)
	}
	cmd := exec.Command("go", args...)
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
