package ha

import (
	"testing"

	"github.com/worker-gateway/gateway/tests/faults"
)

// TestKillReplicasThroughPgBouncer is the kill -9 fault scenario of
// tests/faults (replicas killed with SIGKILL and crashing at commit
// failpoints under load, checked by the history checker) with every query
// through PgBouncer in transaction pooling mode: a replica killed in the
// middle of a transaction leaves PgBouncer to roll it back and hand its
// server connection to someone else, and that must lose nothing either.
func TestKillReplicasThroughPgBouncer(t *testing.T) {
	b := startBouncer(t, bouncerPoolSize)
	faults.KillReplicasUnderLoad(t, bouncedDatabase(t, b))
}
