// Package buildinfo names the release a binary was built from. A release
// build stamps it with the linker (an image's build context has no .git for
// the go command to read):
//
//	go build -ldflags "-X github.com/worker-gateway/gateway/internal/buildinfo.Version=v0.3.0 \
//	  -X github.com/worker-gateway/gateway/internal/buildinfo.Revision=$(git rev-parse HEAD)"
//
// `make build` and the Dockerfile do; without them the values fall back to
// what the go command recorded (debug.ReadBuildInfo).
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Set by -ldflags -X; empty when the build did not stamp them.
var (
	// Version is the release, from `git describe --tags --always --dirty`.
	Version string
	// Revision is the commit, from `git rev-parse HEAD`.
	Revision string
)

// Info is what a binary knows of its own build.
type Info struct {
	Version   string // the release ("(devel)" when unknown)
	Revision  string // the commit ("" when unknown)
	Modified  bool   // built from a tree with uncommitted changes
	Time      string // the commit's time, when the go command recorded it
	Module    string
	Tags      string // build tags, space-separated
	GoVersion string
}

// Read returns the stamped values, falling back to the build information
// the go command recorded.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuild(bi, Version, Revision)
}

// fromBuild merges the linker-stamped version and revision (preferred) with
// the recorded build information (bi may be nil).
func fromBuild(bi *debug.BuildInfo, version, revision string) Info {
	info := Info{Version: "(devel)"}
	if bi != nil {
		info.Module, info.GoVersion = bi.Main.Path, bi.GoVersion
		if bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			case "vcs.time":
				info.Time = s.Value
			case "-tags":
				info.Tags = strings.ReplaceAll(s.Value, ",", " ")
			}
		}
	}
	if version != "" {
		info.Version = version
		// git describe --dirty says so itself.
		info.Modified = strings.HasSuffix(version, "-dirty")
	}
	if revision != "" && revision != info.Revision {
		// A stamped revision overrides; the recorded time and state
		// belong to another commit (or none).
		info.Revision, info.Time = revision, ""
		if version == "" {
			info.Modified = false
		}
	}
	return info
}
