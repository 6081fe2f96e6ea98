package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDevStackNotInProductionBinary: the PostgreSQL installer behind
// `gateway dev` is linked only with -tags devstack.
func TestDevStackNotInProductionBinary(t *testing.T) {
	t.Parallel()
	const pgcluster = "github.com/worker-gateway/gateway/internal/pgcluster"
	deps := func(tags ...string) []string {
		args := append([]string{"list", "-deps"}, tags...)
		cmd := exec.Command("go", append(args, "./server/cmd/gateway")...)
		cmd.Dir = "../../.." // the module root
		out, err := cmd.Output()
		require.NoError(t, err)
		return strings.Fields(string(out))
	}
	require.NotContains(t, deps(), pgcluster)
	require.Contains(t, deps("-tags", "devstack"), pgcluster)
}
