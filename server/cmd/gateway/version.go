package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

func versionCommand(a *cli) *command {
	return &command{name: "version", short: "print the module version, VCS revision and Go version",
		setup: func(*flagSet) execFunc {
			return func(context.Context, []string) error {
				bi, ok := debug.ReadBuildInfo()
				if !ok {
					return fmt.Errorf("no build information in this binary")
				}
				writeVersion(a.stdout, bi)
				return nil
			}
		}}
}

// writeVersion prints what the build recorded: the module version
// ("(devel)" for a build from a work tree), the VCS revision and whether
// the tree had uncommitted changes, and the Go version.
func writeVersion(w io.Writer, bi *debug.BuildInfo) {
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	fmt.Fprintf(w, "gateway %s\n", orDash(bi.Main.Version))
	fmt.Fprintf(w, "module    %s\n", orDash(bi.Main.Path))
	revision := orDash(settings["vcs.revision"])
	if settings["vcs.modified"] == "true" {
		revision += " (modified)"
	}
	fmt.Fprintf(w, "revision  %s\n", revision)
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(w, "committed %s\n", t)
	}
	if tags := settings["-tags"]; tags != "" {
		fmt.Fprintf(w, "tags      %s\n", strings.ReplaceAll(tags, ",", " "))
	}
	fmt.Fprintf(w, "go        %s\n", bi.GoVersion)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
