package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name         string
		bi           *debug.BuildInfo
		ok           bool
		ldVer, ldRev string
		want         Info
	}{
		{"no build info", nil, false, "", "", Info{Unknown, Unknown, ""}},
		{"go install @version", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}, true, "", "",
			Info{"v1.2.3", Unknown, "go1.26.8"}},
		{"local build, clean tree", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", "abc123", "vcs.modified", "false")}, true, "", "",
			Info{"(devel)", "abc123", "go1.26.8"}},
		{"local build, dirty tree", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", "abc123", "vcs.modified", "true")}, true, "", "",
			Info{"(devel)", "abc123-dirty", "go1.26.8"}},
		{"linker flags win", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", "abc123")}, true, "v2.0.0", "def456",
			Info{"v2.0.0", "def456", "go1.26.8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromBuildInfo(tc.bi, tc.ok, tc.ldVer, tc.ldRev)
			if tc.want.GoVersion == "" {
				tc.want.GoVersion = got.GoVersion // runtime.Version()
				if !strings.HasPrefix(got.GoVersion, "go") {
					t.Errorf("GoVersion %q: want runtime.Version()", got.GoVersion)
				}
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestGet: the test binary has build information: a Go version, and no
// field left empty.
func TestGet(t *testing.T) {
	i := Get()
	if i.Version == "" || i.Revision == "" || !strings.HasPrefix(i.GoVersion, "go") {
		t.Fatalf("Get() = %+v", i)
	}
	if s := i.String(); !strings.HasPrefix(s, "stage ") || !strings.Contains(s, i.GoVersion) {
		t.Fatalf("String() = %q", s)
	}
}
