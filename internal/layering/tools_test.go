package layering

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// tools are the folders of internal/ that sit above pipeline/: the stage
// command's parts and the test and bench harnesses. lib is the folder of
// the low-level helpers every layer may import.
var tools = []string{"internal/cli", "internal/bench", "internal/eval", "internal/httpapi", "internal/generator", "internal/e2e", "internal/composecheck", "internal/srtest"}

const lib = "internal/lib/"

// TestImportsPointDown: the helpers under internal/lib import no package of
// the stage outside internal/lib, and no package of the data flow (anything
// outside internal/ and cmd/) imports a tool — directly or not, in its
// non-test code. Tools on top, helpers at the bottom.
func TestImportsPointDown(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	cmd := exec.Command("go", "list", "-deps=false", "-json=ImportPath,Deps", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	seenLib, seenFlow := 0, 0
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(p.ImportPath, module)
		switch {
		case strings.HasPrefix(rel, lib):
			seenLib++
			for _, d := range p.Deps {
				if strings.HasPrefix(d, module) && !strings.HasPrefix(d, module+lib) {
					t.Errorf("helper %s depends on %s, above it", rel, strings.TrimPrefix(d, module))
				}
			}
		case strings.HasPrefix(rel, "internal/"), strings.HasPrefix(rel, "cmd/"):
		default:
			seenFlow++
			for _, d := range p.Deps {
				for _, tool := range tools {
					if d == module+tool || strings.HasPrefix(d, module+tool+"/") {
						t.Errorf("data-flow package %s depends on the tool %s", rel, tool)
					}
				}
			}
		}
	}
	if seenLib < 5 || seenFlow < 10 {
		t.Fatalf("listed %d helpers and %d data-flow packages: the layout moved, update this test", seenLib, seenFlow)
	}
}
