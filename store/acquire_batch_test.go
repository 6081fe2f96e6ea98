package store_test

import (
	"encoding/json"
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
	_, err := s.RevokeWorker(ctx, store.EveryOrganization(), revoked.ID, "test", onlineWindow)
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

// TestCoalescedAcquisitionKeepsEachPollToWhatItMayRun: polls of workers that
// serve different organizations or advertise different capabilities are
// served in one acquisition, each only with tasks its own worker may run;
// like polls share one walk, taking turns in its order.
func TestCoalescedAcquisitionKeepsEachPollToWhatItMayRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, b := setupStore(t)
	other := createOrg(t, s, "other")

	plain := createWorker(t, s, b.pool, workerOpts{Capacity: 4})
	twin := createWorker(t, s, b.pool, workerOpts{Capacity: 4})
	// Room for every task it may run, whichever walk comes first.
	gpu := createWorker(t, s, b.pool, workerOpts{Capacity: 8, Capabilities: `{"gpu": true}`})
	elsewhere := createWorker(t, s, b.pool, workerOpts{Capacity: 4})
	for _, w := range []store.Worker{plain, twin, gpu} {
		assign(t, s, b.org.ID, w.ID)
	}
	assign(t, s, other.ID, elsewhere.ID)

	plainTasks := createTasks(t, s, b.org.ID, 4, store.CreateTaskParams{})
	gpuTasks := createTasks(t, s, b.org.ID, 2, store.CreateTaskParams{RequiredCapabilities: json.RawMessage(`{"gpu": true}`)})
	otherTasks := createTasks(t, s, other.ID, 2, store.CreateTaskParams{})
	ids := func(tasks []store.Task) []uuid.UUID {
		out := make([]uuid.UUID, len(tasks))
		for i, task := range tasks {
			out[i] = task.ID
		}
		return out
	}

	out := s.AcquireLeasesMany(ctx, []store.AcquireParams{
		{WorkerID: plain.ID, MaxTasks: 4},
		{WorkerID: gpu.ID, MaxTasks: 8},
		{WorkerID: elsewhere.ID, MaxTasks: 4},
		{WorkerID: twin.ID, MaxTasks: 4},
	})
	for i := range out {
		require.NoError(t, out[i].Err, "poll %d", i)
	}
	// The gpu worker may run every task of its organization and is served by
	// its own walk; only it gets the gpu tasks.
	require.Subset(t, append(ids(plainTasks), ids(gpuTasks)...), leaseTaskIDs(out[1].Result.Leases))
	require.Subset(t, leaseTaskIDs(out[1].Result.Leases), ids(gpuTasks), "only it may run the gpu tasks")
	require.ElementsMatch(t, ids(otherTasks), leaseTaskIDs(out[2].Result.Leases), "the other organization's worker gets its tasks only")
	// The two like workers share one walk and take turns in it.
	shared := append(leaseTaskIDs(out[0].Result.Leases), leaseTaskIDs(out[3].Result.Leases)...)
	require.Subset(t, ids(plainTasks), shared, "no gpu or foreign task for the plain workers")
	require.InDelta(t, len(out[0].Result.Leases), len(out[3].Result.Leases), 1, "like polls take turns")
	seen := map[uuid.UUID]bool{}
	for _, o := range out {
		for _, id := range leaseTaskIDs(o.Result.Leases) {
			require.False(t, seen[id], "task %s leased twice", id)
			seen[id] = true
		}
	}
	for i, capacity := range []int{4, 8, 4, 4} {
		require.Equal(t, capacity-len(out[i].Result.Leases), out[i].Result.FreeSlots, "poll %d", i)
	}
	require.Len(t, seen, len(plainTasks)+len(gpuTasks)+len(otherTasks), "every task is leased once")
}
