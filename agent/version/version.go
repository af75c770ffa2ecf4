// Package version holds the build identity of the podmpi binaries.
//
// Version and Commit are set at link time:
//
//	go build -ldflags "-X github.com/podmpi/podmpi/agent/version.Version=v0.1.0 -X github.com/podmpi/podmpi/agent/version.Commit=abc123"
//
// Without link-time values they fall back to what the Go toolchain stamped
// into the binary (module version and VCS revision), so a plain `go build`
// from a Git checkout still reports its commit.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release version, for example "v0.1.0"; "devel" when unset.
var Version = ""

// Commit is the VCS revision the binary was built from; "unknown" when unset.
var Commit = ""

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the build identity, filling gaps from runtime/debug build info.
func Get() Info {
	v, c := Version, Commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		if c == "" {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					c = s.Value
					if len(c) > 12 {
						c = c[:12]
					}
				}
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	if c == "" {
		c = "unknown"
	}
	return Info{Version: v, Commit: c, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
}

// String renders the identity on one line, as `version` subcommands print it.
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s, %s)", i.Version, i.Commit, i.GoVersion, i.Platform)
}
