package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dpstage/stage/internal/lib/buildinfo"
)

// TestVersion: `stage version` and `stage --version` print the build's
// version, revision and Go version on stdout and exit 0; an argument is bad
// usage.
func TestVersion(t *testing.T) {
	want := buildinfo.Get().String() + "\n"
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"version"}, 0},
		{[]string{"--version"}, 0},
		{[]string{"-version"}, 0},
		{[]string{"version", "extra"}, 2},
	} {
		var out, errOut bytes.Buffer
		code := Main(tc.args, &out, &errOut)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, code, tc.code, errOut.String())
			continue
		}
		if code == 0 && out.String() != want {
			t.Errorf("%v: printed %q, want %q", tc.args, out.String(), want)
		}
		if code == 0 && !strings.Contains(out.String(), buildinfo.Get().GoVersion) {
			t.Errorf("%v: no Go version in %q", tc.args, out.String())
		}
	}
	var out bytes.Buffer
	Main([]string{"help"}, &out, &out)
	if !strings.Contains(out.String(), "stage version") {
		t.Error("usage does not list `stage version`")
	}
}
