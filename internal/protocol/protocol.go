// Package protocol states the versions of the worker protocol, in one
// place: the version this release's worker runtime speaks, and the range
// of versions its gateway serves. A worker announces its version with each
// poll (protocol_version); the gateway refuses a version outside the range
// with 400 unsupported-protocol-version, naming the range.
//
// The upgrade contract (README) has release N+1's gateway serve release
// N's workers: Oldest moves up only when no supported release's runtime
// speaks the versions below it any more.
package protocol

import "strconv"

const (
	// Current is the version this release's worker runtime speaks.
	Current = "1"
	// Oldest is the oldest version this release's gateway serves.
	Oldest = "1"
)

// Supported reports whether this release's gateway serves a worker that
// announces version v: a decimal integer from Oldest to Current.
func Supported(v string) bool {
	n, err := strconv.Atoi(v)
	if err != nil || strconv.Itoa(n) != v {
		return false
	}
	return n >= number(Oldest) && n <= number(Current)
}

// Range names the versions served, for a refusal's detail: "1", or "1 to 2".
func Range() string {
	if Oldest == Current {
		return Oldest
	}
	return Oldest + " to " + Current
}

func number(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		panic("protocol: version " + v + " is not a decimal integer")
	}
	return n
}
