package main

import (
	"context"
	"fmt"
	"io"

	"github.com/worker-gateway/gateway/internal/buildinfo"
)

func versionCommand(a *cli) *command {
	return &command{name: "version", short: "print the release, VCS revision and Go version",
		setup: func(*flagSet) execFunc {
			return func(context.Context, []string) error {
				writeVersion(a.stdout, buildinfo.Read())
				return nil
			}
		}}
}

// isVersionFlag: `gateway -version` and `gateway --version` mean the
// version command, as operators type them out of habit.
func isVersionFlag(args []string) bool {
	return len(args) == 1 && (args[0] == "-version" || args[0] == "--version")
}

// writeVersion prints the release (stamped by the build, or the module
// version; "(devel)" for a build from a work tree), the VCS revision and
// whether the tree had uncommitted changes, and the Go version.
func writeVersion(w io.Writer, bi buildinfo.Info) {
	fmt.Fprintf(w, "gateway %s\n", orDash(bi.Version))
	fmt.Fprintf(w, "module    %s\n", orDash(bi.Module))
	revision := orDash(bi.Revision)
	if bi.Modified {
		revision += " (modified)"
	}
	fmt.Fprintf(w, "revision  %s\n", revision)
	if bi.Time != "" {
		fmt.Fprintf(w, "committed %s\n", bi.Time)
	}
	if bi.Tags != "" {
		fmt.Fprintf(w, "tags      %s\n", bi.Tags)
	}
	fmt.Fprintf(w, "go        %s\n", orDash(bi.GoVersion))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
