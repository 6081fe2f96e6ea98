// Package ha tests the gateway in the deployments of the README's
// "High availability" section: replicas behind PgBouncer in transaction
// pooling mode, and PostgreSQL under pg_auto_failover with a synchronous
// standby, every piece a real process. Short versions run with `make
// test`; FAULTS_LONG=1 (`make faults`) runs the long ones.
package ha

import (
	"os"
	"testing"

	"github.com/worker-gateway/gateway/tests/harness"
)

// TestMain gives this binary its own PostgreSQL cluster (behind PgBouncer
// in the PgBouncer tests); the failover tests start formations of their
// own.
func TestMain(m *testing.M) { harness.Main(m) }

// long reports whether the long versions run (FAULTS_LONG=1).
func long() bool { return os.Getenv("FAULTS_LONG") == "1" }
