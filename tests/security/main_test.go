// Package security holds the checks that keep the red-team findings fixed:
// the permission matrix generated from openapi.yaml, the cost of refused
// requests, audit throttling, token lineage, integer bounds, enrollment
// limits, follow caps and response headers. Every check runs against a real
// gateway (TLS, HTTP, PostgreSQL).
package security

import (
	"testing"

	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/tests/harness"
)

func TestMain(m *testing.M) {
	storetest.Main(withBinaries{m})
}

// withBinaries removes the binaries built for process tests once the tests
// ran (storetest.Main exits the process itself).
type withBinaries struct{ m *testing.M }

func (w withBinaries) Run() int {
	defer harness.CleanupBinaries()
	return w.m.Run()
}
