// Package buildinfo says which build of the stage is running: its version,
// the source revision and the Go toolchain, read from the build information
// the Go linker embeds (runtime/debug.ReadBuildInfo). `stage version`, the
// start log line and the dpstage_build_info metric all print this.
//
// A `go build` inside a git checkout records the commit (vcs.revision, with
// "-dirty" when the work tree had changes); `go install
// github.com/dpstage/stage/cmd/stage@vX` records the module version. A build
// without either (the Docker build, whose context leaves .git out) gets them
// from the linker flags the Dockerfile passes:
//
//	-ldflags "-X github.com/dpstage/stage/internal/lib/buildinfo.version=v1.2.3
//	          -X github.com/dpstage/stage/internal/lib/buildinfo.revision=abc123"
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Set by the linker (-X); empty otherwise.
var (
	version  string
	revision string
)

// Unknown stands for a field the build did not record.
const Unknown = "unknown"

// Info is one build's identity.
type Info struct {
	Version   string // the module version ("v1.2.3"), "(devel)" for a local build, or the -X value
	Revision  string // the VCS commit, "-dirty" appended for a modified work tree, or the -X value
	GoVersion string // the Go toolchain that built the binary ("go1.26.8")
}

// Get returns the running binary's Info; a field the build did not record
// is Unknown.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	return fromBuildInfo(bi, ok, version, revision)
}

// fromBuildInfo derives Info from the embedded build information (ok false:
// none) and the linker overrides, which win when set.
func fromBuildInfo(bi *debug.BuildInfo, ok bool, ldVersion, ldRevision string) Info {
	info := Info{Version: Unknown, Revision: Unknown, GoVersion: runtime.Version()}
	if ok && bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		if bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			info.Revision = rev
		}
	}
	if ldVersion != "" {
		info.Version = ldVersion
	}
	if ldRevision != "" {
		info.Revision = ldRevision
	}
	return info
}

// String is the one line `stage version` prints.
func (i Info) String() string {
	return "stage " + i.Version + " (revision " + i.Revision + ", " + i.GoVersion + ")"
}
