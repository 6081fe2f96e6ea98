package dispatch

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Leases granted through the worker protocol vacuum the queue of leasable
// tasks once QueueVacuumEvery of them were granted, and not before: the
// vacuum shows in the replica's metrics and in PostgreSQL's own counters.
func TestQueueVacuumAfterSoManyLeases(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.QueueVacuumEvery = 3 }})
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 10, org)
	lease := func(n int) {
		t.Helper()
		for range n {
			g.CreateTask(t, org, harness.TaskSpec{})
		}
		wait := 0
		res, err := w.Client.AcquireLeasesWithResponse(context.Background(), nil, apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		require.Len(t, res.JSON200.Leases, n)
	}
	queueVacuums := func() int64 {
		var n int64
		require.NoError(t, g.Pool.QueryRow(context.Background(),
			`SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'worker_task_queue'`).Scan(&n))
		return n
	}

	lease(2)
	// Two leases wake nothing (the count is checked where leases are
	// answered, before any vacuum could start).
	require.Zero(t, scrape(t, g, g.AdminToken)["gateway_queue_vacuums_total"])

	lease(1)
	harness.WaitFor(t, 10*time.Second, "the queue vacuum", func() bool {
		return scrape(t, g, g.AdminToken)["gateway_queue_vacuums_total"] == 1
	})
	require.GreaterOrEqual(t, queueVacuums(), int64(1))
	require.Positive(t, scrape(t, g, g.AdminToken)["gateway_queue_vacuum_seconds_total"])
}
