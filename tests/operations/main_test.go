package operations

import (
	"testing"

	"github.com/worker-gateway/gateway/tests/harness"
)

// TestMain gives this binary its own PostgreSQL cluster; each test clones a
// fresh database from it.
func TestMain(m *testing.M) { harness.Main(m) }
