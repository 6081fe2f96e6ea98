//go:build !failpoints

package server

// failpoint marks a place where fault tests can crash the process. Release
// builds compile it to nothing; see failpoint_on.go (build tag failpoints).
func failpoint(string) {}
