package netfaults

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/faults"
	"github.com/worker-gateway/gateway/tests/harness"
)

// leaseSeconds is every task's lease (the faults workload's): short, so
// that faults of a few seconds outlast leases and force re-leases.
const leaseSeconds = 5

// startWorkload runs an in-process gateway and a faults workload on it,
// which records every worker call into its history.
func startWorkload(t *testing.T) (*harness.Gateway, *faults.Workload) {
	t.Helper()
	g := harness.Start(t)
	return g, faults.NewWorkload(t, g)
}

// at is a raw client's choice of where to send its calls: always url.
func at(url string) func() string { return func() string { return url } }

// via is a Go runtime's path to the gateway, or the proxy, at gatewayURL.
func via(t *testing.T, gatewayURL string) faults.DialFunc {
	t.Helper()
	u, err := url.Parse(gatewayURL)
	require.NoError(t, err)
	return faults.DialTo(u.Host)
}

// runtime is a Go runtime of these tests: calls bounded by a timeout short
// enough that one lost in a partition is retried soon.
func runtime(name string, slots int, dial faults.DialFunc, work time.Duration) faults.Runtime {
	return faults.Runtime{Name: name, Slots: slots, Dial: dial, Work: work, Timeout: 10 * time.Second}
}

// leaseAll polls until c holds n leases.
func leaseAll(t *testing.T, c *faults.RawClient, n int) []faults.RawLease {
	t.Helper()
	var leases []faults.RawLease
	harness.WaitFor(t, 30*time.Second, "raw worker holding its tasks", func() bool {
		leases = append(leases, c.Poll(context.Background())...)
		return len(leases) >= n
	})
	require.Len(t, leases, n)
	return leases
}

// activeAttempts counts a worker's leased or running attempts.
func activeAttempts(t *testing.T, g *harness.Gateway, worker uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_task_attempts
		WHERE worker_id = $1 AND status IN ('leased', 'running')`, worker).Scan(&n))
	return n
}

// waitCompleted waits until at least n tasks are completed. Queries fail
// while PostgreSQL is down or the pool holds connections it killed: the
// condition is then simply not met yet.
func waitCompleted(t *testing.T, g *harness.Gateway, n int) {
	t.Helper()
	harness.WaitFor(t, scaled(90*time.Second, 4*time.Minute), "tasks completed", func() bool {
		var done int
		err := g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_tasks WHERE state = 'completed'`).Scan(&done)
		return err == nil && done >= n
	})
}
