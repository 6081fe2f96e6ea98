package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestRenewLeasesManyAnswersEachWorkerOnItsOwn renews, in one group, a
// worker's live and stale leases, a revoked worker's and an unknown
// worker's: each gets what its heartbeat alone would have got.
func TestRenewLeasesManyAnswersEachWorkerOnItsOwn(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	revoked := createWorker(t, s, b.pool, workerOpts{Capacity: 1})
	assign(t, s, b.org.ID, revoked.ID)
	createTasks(t, s, b.org.ID, 3, store.CreateTaskParams{})
	mine := acquire(t, s, b.worker.ID, 2).Leases
	require.Len(t, mine, 2)
	theirs := acquireOne(t, s, revoked.ID)
	_, err := s.RevokeWorker(ctx, store.EveryOrganization(), revoked.ID, "test", onlineWindow)
	require.NoError(t, err)

	stale := refOf(b.worker.ID, mine[1])
	stale.LeaseToken = "not-the-token"
	group := []store.RenewParams{
		{WorkerID: b.worker.ID, Leases: []store.AttemptRef{refOf(b.worker.ID, mine[0]), stale}},
		{WorkerID: revoked.ID, Leases: []store.AttemptRef{refOf(revoked.ID, theirs)}},
		{WorkerID: uuid.New()},
		{WorkerID: b.worker.ID}, // the same worker twice in one group, no leases
	}
	out := s.RenewLeasesMany(ctx, group)
	require.Len(t, out, 4)

	require.NoError(t, out[0].Err)
	require.Len(t, out[0].Statuses, 2)
	require.Equal(t, mine[0].AttemptID, out[0].Statuses[0].AttemptID)
	require.Equal(t, store.LeaseActive, out[0].Statuses[0].State)
	require.Equal(t, store.LeaseLost, out[0].Statuses[1].State, "a stale token renews nothing")
	require.Equal(t, store.AttemptRunning, attemptStatus(t, b.pool, mine[0].AttemptID), "renewal starts the attempt")
	require.Equal(t, store.AttemptLeased, attemptStatus(t, b.pool, mine[1].AttemptID))

	require.ErrorIs(t, out[1].Err, store.ErrWorkerRevoked)
	require.ErrorIs(t, out[2].Err, store.ErrNotFound)
	require.NoError(t, out[3].Err)
	require.Empty(t, out[3].Statuses)
}

// TestHeartbeatBatcherGroupsConcurrentHeartbeats: many workers heartbeat at
// once through the group committer; each gets its own leases' statuses.
func TestHeartbeatBatcherGroupsConcurrentHeartbeats(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	const workers = 12
	type held struct {
		worker store.Worker
		lease  store.Lease
	}
	var all []held
	createTasks(t, s, b.org.ID, workers, store.CreateTaskParams{})
	for range workers {
		w := createWorker(t, s, b.pool, workerOpts{Capacity: 1})
		assign(t, s, b.org.ID, w.ID)
		all = append(all, held{w, acquireOne(t, s, w.ID)})
	}
	batcher := store.NewHeartbeatBatcher(s, 2, 4, time.Minute)
	defer batcher.Close()
	statuses := make([][]store.LeaseStatus, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i, h := range all {
		wg.Go(func() {
			statuses[i], errs[i] = batcher.Renew(ctx, store.RenewParams{WorkerID: h.worker.ID, Leases: []store.AttemptRef{refOf(h.worker.ID, h.lease)}})
		})
	}
	wg.Wait()
	for i, h := range all {
		require.NoError(t, errs[i])
		require.Len(t, statuses[i], 1)
		require.Equal(t, h.lease.AttemptID, statuses[i][0].AttemptID)
		require.Equal(t, store.LeaseActive, statuses[i][0].State)
	}
}
