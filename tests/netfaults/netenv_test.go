package netfaults

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
)

// netEnv is what the network fault tests share: an in-process gateway, one
// organization and the recorder of every worker call.
type netEnv struct {
	g   *harness.Gateway
	org uuid.UUID
	rec *recorder
}

func newNetEnv(t *testing.T) *netEnv {
	t.Helper()
	g := harness.Start(t)
	return &netEnv{g: g, org: g.NewOrganization(t, "netfaults"), rec: &recorder{}}
}

// rawClient creates a worker assigned to the organization and a raw client
// for it that reaches the gateway at url (directly or through a proxy).
func (e *netEnv) rawClient(t *testing.T, name string, capacity int, url string, caps map[string]any) (*harness.Worker, *rawClient) {
	t.Helper()
	w := e.g.NewWorker(t, name, capacity, e.org)
	return w, newRawClient(url, e.rec.client(w.HTTP.Transport, 30*time.Second), caps)
}

// leaseAll polls until c holds n leases.
func leaseAll(t *testing.T, c *rawClient, n int) []workerclient.Lease {
	t.Helper()
	var leases []workerclient.Lease
	harness.WaitFor(t, 30*time.Second, "raw worker holding its tasks", func() bool {
		got, a := c.poll(context.Background(), n-len(leases), 1, "")
		require.True(t, a.transient() || a.status == http.StatusOK, "poll answered %d %s", a.status, a.code)
		leases = append(leases, got...)
		return len(leases) == n
	})
	return leases
}

// requireRefused requires a late write to have been refused for its lost lease.
func requireRefused(t *testing.T, what string, a answer) {
	t.Helper()
	require.NoError(t, a.err, what)
	require.Equal(t, http.StatusConflict, a.status, "%s: %s", what, a.body)
	require.Equal(t, "lease-lost", a.code, what)
}

// activeAttempts counts a worker's leased or running attempts.
func (e *netEnv) activeAttempts(t *testing.T, worker uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, e.g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_task_attempts
		WHERE worker_id = $1 AND status IN ('leased', 'running')`, worker).Scan(&n))
	return n
}
