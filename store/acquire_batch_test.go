package store_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestAcquireLeasesManyAnswersEachPollOnItsOwn runs, in one group, polls of
// two workers (one of them twice, past its capacity), a repeated poll with
// the same idempotency key, an unknown and a revoked worker's polls: each
// gets what it would have got alone, and no task is leased twice.
func TestAcquireLeasesManyAnswersEachPollOnItsOwn(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t) // b.worker: capacity 4
	ctx := t.Context()
	other := createWorker(t, s, b.pool, workerOpts{Capacity: 2})
	assign(t, s, b.org.ID, other.ID)
	revoked := createWorker(t, s, b.pool, workerOpts{Capacity: 2})
	assign(t, s, b.org.ID, revoked.ID)
	_, err := s.RevokeWorker(ctx, revoked.ID, "test", onlineWindow)
	require.NoError(t, err)
	createTasks(t, s, b.org.ID, 10, store.CreateTaskParams{})

	group := []store.AcquireParams{
		{WorkerID: b.worker.ID, MaxTasks: 3},
		{WorkerID: other.ID, MaxTasks: 2, IdempotencyKey: "poll-1"},
		{WorkerID: b.worker.ID, MaxTasks: 3}, // only one slot left after the first
		{WorkerID: other.ID, MaxTasks: 2, IdempotencyKey: "poll-1"},
		{WorkerID: uuid.New(), MaxTasks: 1},
		{WorkerID: revoked.ID, MaxTasks: 1},
	}
	out := s.AcquireLeasesMany(ctx, group)
	require.Len(t, out, len(group))

	for i := range 4 {
		require.NoError(t, out[i].Err, "poll %d", i)
	}
	require.Len(t, out[0].Result.Leases, 3)
	require.Len(t, out[2].Result.Leases, 1, "the worker's capacity counts its polls earlier in the group")
	require.Equal(t, 0, out[2].Result.FreeSlots)
	require.Len(t, out[1].Result.Leases, 2)
	require.True(t, out[3].Result.Replayed, "the same key is the same poll")
	require.ElementsMatch(t, leaseTaskIDs(out[1].Result.Leases), leaseTaskIDs(out[3].Result.Leases))
	require.ErrorIs(t, out[4].Err, store.ErrNotFound)
	require.ErrorIs(t, out[5].Err, store.ErrWorkerRevoked)

	seen := map[uuid.UUID]bool{}
	for _, o := range out[:3] {
		for _, id := range leaseTaskIDs(o.Result.Leases) {
			require.False(t, seen[id], "task %s leased twice", id)
			seen[id] = true
		}
	}
	require.Len(t, seen, 6)
	require.Equal(t, 6, countAttempts(t, b.pool, "status = 'leased'"))

	// A repeat within the same acquisition is the same poll: it is answered
	// with the same leases under the same tokens, and they hold the lease.
	for _, l := range out[3].Result.Leases {
		require.Equal(t, tokenOf(out[1].Result.Leases, l.AttemptID), l.LeaseToken)
		_, err := s.HeartbeatAttempt(ctx, refOf(other.ID, l))
		require.NoError(t, err)
	}
}
