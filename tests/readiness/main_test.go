// Package readiness tests /readyz across a PostgreSQL outage. It stops the
// test binary's whole cluster, so it lives in a binary of its own and its
// tests never run in parallel.
package readiness

import (
	"testing"

	"github.com/worker-gateway/gateway/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }
