package operations

import (
	"testing"

	"github.com/worker-gateway/gateway/tests/harness"
)

// requireTools is harness.RequireTools, shared with the other test packages.
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	harness.RequireTools(t, tools...)
}
