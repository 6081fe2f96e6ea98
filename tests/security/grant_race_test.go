package security

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestWithdrawnGrantWinsOverConcurrentAssignment: while four of A's admin
// requests assign B's worker to A again and again, B's admin withdraws its
// grant. Once the withdrawal has answered 204, A must hold no assignment of
// the worker and must not even see it (404) — else A's tasks, and their
// secrets, would keep going to a worker in B's network. Each round
// restores the grant and A's assignment, so every round races anew.
func TestWithdrawnGrantWinsOverConcurrentAssignment(t *testing.T) {
	t.Parallel()
	const rounds, assigners = 100, 4
	g := harness.Start(t)
	ctx := context.Background()
	a, b := g.NewOrganization(t, "a"), g.NewOrganization(t, "b")
	adminA := g.ControlClient(t, scopedToken(t, g, a, "admin"))
	adminB := g.ControlClient(t, scopedToken(t, g, b, "admin"))
	created, err := adminB.CreateWorkerWithResponse(ctx, apiclient.CreateWorkerRequest{Name: "b-owned", WorkerType: "scanner"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.StatusCode(), string(created.Body))
	worker := created.JSON201.Id

	for round := range rounds {
		grant, err := adminB.GrantWorkerWithResponse(ctx, worker, a)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, grant.StatusCode(), string(grant.Body))
		assign, err := adminA.AssignWorkerWithResponse(ctx, a, worker)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, assign.StatusCode(), string(assign.Body))

		var withdrawn atomic.Bool
		unexpected := make(chan string, assigners)
		var wg sync.WaitGroup
		for range assigners {
			wg.Go(func() {
				for !withdrawn.Load() {
					res, err := adminA.AssignWorkerWithResponse(ctx, a, worker)
					if err != nil {
						unexpected <- err.Error()
						return
					}
					// 404 once the grant is gone: A no longer sees the worker.
					if res.StatusCode() != http.StatusOK && res.StatusCode() != http.StatusNotFound {
						unexpected <- string(res.Body)
						return
					}
				}
			})
		}
		withdraw, err := adminB.RevokeWorkerGrantWithResponse(ctx, worker, a, nil)
		withdrawn.Store(true)
		wg.Wait()
		close(unexpected)
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, withdraw.StatusCode(), "round %d: %s", round, withdraw.Body)
		for body := range unexpected {
			require.Fail(t, "assignment answered neither 200 nor 404", "round %d: %s", round, body)
		}

		var live int
		require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM organization_workers ow
			WHERE ow.organization_id = $1 AND ow.worker_id = $2 AND ow.revoked_at IS NULL
				AND NOT EXISTS (SELECT 1 FROM worker_grants g WHERE g.worker_id = ow.worker_id AND g.organization_id = ow.organization_id)`,
			a, worker).Scan(&live))
		require.Zero(t, live, "round %d: A is still assigned B's worker after B withdrew the grant", round)
		seen, err := adminA.GetWorkerWithResponse(ctx, worker)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, seen.StatusCode(), "round %d: A still sees B's worker after the withdrawal: %s", round, seen.Body)
	}
}
