package store_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestWithdrawnGrantLeavesNoAssignment races an organization's admin
// assigning a granted worker (four goroutines, again and again) against its
// owner withdrawing the grant. Whatever the interleaving, once the
// withdrawal has returned the organization must hold no live assignment of
// the worker: an assignment decided on a read from before the withdrawal
// must not revive the row the withdrawal revoked. Each round restores the
// grant and the assignment, so every round races from the same start.
func TestWithdrawnGrantLeavesNoAssignment(t *testing.T) {
	t.Parallel()
	const rounds, assigners = 200, 4
	s, b := setupStore(t)
	owner, grantee := b.org, createOrg(t, s, "grantee")
	ownerTenant, granteeTenant := store.OneOrganization(owner.ID), store.OneOrganization(grantee.ID)
	worker, err := s.CreateWorker(t.Context(), ownerTenant, store.CreateWorkerParams{
		Name: uniqueName("shared"), WorkerType: "scanner", MaxConcurrentTasks: 1,
	}, onlineWindow)
	require.NoError(t, err)
	ctx := withTimeout(t, 2*time.Minute)

	for round := range rounds {
		_, err := s.GrantWorker(ctx, ownerTenant, worker.ID, grantee.ID)
		require.NoError(t, err)
		_, err = s.AssignWorker(ctx, granteeTenant, grantee.ID, worker.ID)
		require.NoError(t, err)

		var withdrawn atomic.Bool
		errs := make(chan error, assigners)
		var wg sync.WaitGroup
		for range assigners {
			wg.Go(func() {
				for !withdrawn.Load() {
					// After the withdrawal the organization no longer sees the
					// worker: ErrNotFound is the expected refusal.
					if _, err := s.AssignWorker(ctx, granteeTenant, grantee.ID, worker.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
						errs <- err
						return
					}
				}
			})
		}
		err = s.RevokeWorkerGrant(ctx, ownerTenant, worker.ID, grantee.ID, true)
		withdrawn.Store(true)
		wg.Wait()
		close(errs)
		require.NoError(t, err, "round %d: withdraw", round)
		for err := range errs {
			require.NoError(t, err, "round %d: assign", round)
		}

		var grants, live int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM worker_grants WHERE worker_id = $1 AND organization_id = $2),
			(SELECT count(*) FROM organization_workers WHERE worker_id = $1 AND organization_id = $2 AND revoked_at IS NULL)`,
			worker.ID, grantee.ID).Scan(&grants, &live))
		require.Zero(t, grants, "round %d: the withdrawn grant is back", round)
		require.Zero(t, live, "round %d: the organization is still assigned a worker whose grant was withdrawn", round)
	}
}
