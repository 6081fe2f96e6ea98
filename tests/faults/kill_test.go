package faults

import (
	"testing"

	"github.com/worker-gateway/gateway/tests/harness"
)

// TestKillReplicasUnderLoad is the kill scenario (KillReplicasUnderLoad)
// with the replicas connected directly to PostgreSQL.
func TestKillReplicasUnderLoad(t *testing.T) {
	KillReplicasUnderLoad(t, harness.Database{})
}
