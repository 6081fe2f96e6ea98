// Package upgrade upgrades a database and a fleet of replicas from the
// previous release to this one while they serve (issue 31; FAULTS_LONG=1,
// `make faults`).
package upgrade

import (
	"testing"

	"github.com/worker-gateway/gateway/tests/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
