package netfaults

import "os"

// long reports FAULTS_LONG=1: more tasks and more faults than the short
// default that `make test` runs.
func long() bool { return os.Getenv("FAULTS_LONG") == "1" }

// scaled picks the short or the long figure.
func scaled[T any](short, longer T) T {
	if long() {
		return longer
	}
	return short
}
