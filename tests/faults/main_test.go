package faults

import (
	"testing"

	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/tests/harness"
)

// TestMain gives this binary its own PostgreSQL cluster; each scenario
// clones a fresh database from it.
func TestMain(m *testing.M) {
	storetest.Main(withBinaries{m})
}

// withBinaries removes the gateway and worker binaries built for the
// scenarios once they ran (storetest.Main exits the process itself).
type withBinaries struct{ m *testing.M }

func (w withBinaries) Run() int {
	defer harness.CleanupBinaries()
	return w.m.Run()
}
