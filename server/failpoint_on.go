//go:build failpoints

package server

import (
	"os"
	"strings"
)

// failpoint kills the process at once (as kill -9 would, without deferred
// cleanup) when GATEWAY_FAILPOINTS names it. Only test builds
// (-tags failpoints) contain this.
func failpoint(name string) {
	for _, fp := range strings.Split(os.Getenv("GATEWAY_FAILPOINTS"), ",") {
		if fp == name {
			os.Exit(137)
		}
	}
}
