//go:build !failpoints

// Package failpoint marks places where fault tests crash the process: just
// before and just after a transaction commits, and between a commit and its
// answer. Release builds compile every Inject to nothing; test builds
// (-tags failpoints) read GATEWAY_FAILPOINTS (see failpoint_on.go).
//
// It also owns the gateway's wall clock, Now, so that fault tests can run a
// replica with a skewed clock (GATEWAY_CLOCK_SKEW in test builds).
package failpoint

import "time"

// Inject is a place a fault test may crash the process.
func Inject(string) {}

// Enabled reports whether this build contains failpoints.
const Enabled = false

// Now is the gateway's wall clock: time.Now in release builds.
func Now() time.Time { return time.Now() }
