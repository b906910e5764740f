package layering

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// roles are the packages that run the stage, top first: each may import
// only the ones after it (issue 22 item 4: pipeline is wiring, the roles
// have packages of their own, and every import points down).
var roles = []string{"pipeline", "single", "distributed", "consume", "node"}

// above says which roles a role must not import: every role listed before
// it, and its peer (single and distributed do not import each other).
func above(i int) []string {
	out := append([]string(nil), roles[:i]...)
	switch roles[i] {
	case "single":
		out = append(out, "distributed")
	case "distributed":
		out = append(out, "single")
	}
	return out
}

// TestRolesPointDown: `go list -deps` of each role package (non-test,
// transitively) holds no role above it or beside it.
func TestRolesPointDown(t *testing.T) {
	pkgs := make([]string, 0, len(roles))
	for _, r := range roles {
		pkgs = append(pkgs, module+r)
	}
	deps := listDeps(t, pkgs...)
	for i, r := range roles {
		d, ok := deps[module+r]
		if !ok {
			t.Errorf("package %s not listed", r)
			continue
		}
		for _, dep := range d {
			for _, a := range above(i) {
				if dep == module+a {
					t.Errorf("%s imports %s, which sits above or beside it", r, a)
				}
			}
		}
	}
}

// maxWiringLines bounds pipeline's code: it wires the roles and holds no
// step of its own (issue 22 item 4: at most 700 lines that are neither
// blank nor comments, outside tests).
const maxWiringLines = 700

// TestPipelineIsWiring counts pipeline's non-test lines that are neither
// blank nor comments.
func TestPipelineIsWiring(t *testing.T) {
	files, err := filepath.Glob("../../pipeline/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("pipeline's files: %v %v", files, err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		n += codeLines(t, f)
	}
	if n > maxWiringLines {
		t.Errorf("pipeline has %d lines of code outside tests, more than %d: move the step or role into its own package", n, maxWiringLines)
	}
}

// codeLines counts the lines of f that are neither blank nor comments
// (line comments; the stage uses no block comments).
func codeLines(t *testing.T, f string) int {
	t.Helper()
	fh, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	n := 0
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "//") {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
