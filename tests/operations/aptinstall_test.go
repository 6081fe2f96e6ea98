package operations

import (
	"testing"

	"github.com/worker-gateway/gateway/tests/harness"
)

// aptInstall and requireTools are harness.AptInstall and
// harness.RequireTools, shared with the other test packages.
func aptInstall(packages ...string) error { return harness.AptInstall(packages...) }

func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	harness.RequireTools(t, tools...)
}
