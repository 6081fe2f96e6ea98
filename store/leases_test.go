package store_test

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

func TestAcquireLeases(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*store.Store, *testBundle) {
		t.Helper()
		return setupStore(t)
	}

	t.Run("LeasesAPendingTask", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		task := createTask(t, s, bundle.org.ID, store.CreateTaskParams{
			Payload: json.RawMessage(`{"target":"example.com"}`), AttemptTimeoutSeconds: new(600),
		})

		res := acquire(t, s, bundle.worker.ID, 1)
		require.False(t, res.Replayed)
		require.False(t, res.Disabled)
		require.Equal(t, []uuid.UUID{bundle.org.ID}, res.OrganizationIDs)
		require.Equal(t, 3, res.FreeSlots)
		require.Len(t, res.Leases, 1)

		l := res.Leases[0]
		require.NotEqual(t, uuid.Nil, l.AttemptID)
		require.GreaterOrEqual(t, len(l.LeaseToken), 32, "at least 128 bits of hex")
		require.Equal(t, 30*time.Second, l.LeaseDuration)
		require.Equal(t, 30*time.Second, l.LeaseTTL, "now() is frozen in the transaction, so the TTL is the whole duration")
		require.WithinDuration(t, time.Now().Add(30*time.Second), l.LeaseExpiresAt, 10*time.Second)
		require.Equal(t, task.ID, l.Task.ID)
		require.Equal(t, "scanner_plugin", l.Task.Type)
		require.Equal(t, bundle.org.ID, l.Task.OrganizationID)
		require.JSONEq(t, `{"target":"example.com"}`, string(l.Task.Payload))
		require.Equal(t, 1, l.Task.AttemptNumber)
		require.Equal(t, 3, l.Task.MaxAttempts)
		require.Nil(t, l.Task.ExecutionDeadlineAt)
		require.NotNil(t, l.Task.AttemptDeadlineAt)
		require.Equal(t, 600*time.Second, *l.Task.AttemptDeadlineIn)

		got, attempts, err := s.GetTask(t.Context(), store.EveryOrganization(), task.ID, onlineWindow)
		require.NoError(t, err)
		require.Equal(t, store.TaskLeased, got.State)
		require.Equal(t, 1, got.AttemptCount)
		require.Empty(t, got.PendingReason)
		require.Len(t, attempts, 1)
		require.Equal(t, l.AttemptID, attempts[0].ID)
		require.Equal(t, store.AttemptLeased, attempts[0].Status)
		require.Equal(t, bundle.worker.ID, attempts[0].WorkerID)

		w, err := s.GetWorker(t.Context(), store.EveryOrganization(), bundle.worker.ID, onlineWindow)
		require.NoError(t, err)
		require.True(t, w.Online, "a poll touches last_seen_at")
		require.Equal(t, 1, w.ActiveAttempts)
	})

	t.Run("RespectsMaxTasksAndCapacity", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		createTasks(t, s, bundle.org.ID, 6, store.CreateTaskParams{})

		res := acquire(t, s, bundle.worker.ID, 3)
		require.Len(t, res.Leases, 3, "max_tasks caps the poll")
		require.Equal(t, 1, res.FreeSlots)
		leased := res.Leases

		res = acquire(t, s, bundle.worker.ID, 5)
		require.Len(t, res.Leases, 1, "capacity 4 caps the poll")
		require.Equal(t, 0, res.FreeSlots)
		leased = append(leased, res.Leases...)

		res = acquire(t, s, bundle.worker.ID, 5)
		require.Empty(t, res.Leases, "a full worker leases nothing")
		require.Equal(t, 4, countAttempts(t, bundle.pool, `worker_id = $1`, bundle.worker.ID))

		// Finishing one frees one slot.
		var first uuid.UUID
		require.NoError(t, bundle.pool.QueryRow(t.Context(),
			`SELECT id FROM worker_task_attempts WHERE worker_id = $1 ORDER BY created_at LIMIT 1`, bundle.worker.ID).Scan(&first))
		complete(t, s, store.AttemptRef{WorkerID: bundle.worker.ID, AttemptID: first, LeaseToken: tokenOf(leased, first)}, store.AttemptSucceeded, false)
		res = acquire(t, s, bundle.worker.ID, 5)
		require.Len(t, res.Leases, 1)
	})

	t.Run("OnlyAssignedOrganizations", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		orgB := createOrg(t, s, "org-b")
		taskB := createTask(t, s, orgB.ID, store.CreateTaskParams{})

		res := acquire(t, s, bundle.worker.ID, 4)
		require.Empty(t, res.Leases, "another organization's task is never leased")
		require.Equal(t, store.TaskPending, taskState(t, s, taskB.ID))

		taskA := createTask(t, s, bundle.org.ID, store.CreateTaskParams{})
		_, err := s.UnassignWorker(t.Context(), store.EveryOrganization(), bundle.org.ID, bundle.worker.ID, true, "moved")
		require.NoError(t, err)
		res = acquire(t, s, bundle.worker.ID, 4)
		require.Empty(t, res.Leases, "a revoked assignment leases nothing")
		require.Empty(t, res.OrganizationIDs)
		require.Equal(t, store.TaskPending, taskState(t, s, taskA.ID))

		assign(t, s, bundle.org.ID, bundle.worker.ID)
		res = acquire(t, s, bundle.worker.ID, 4)
		require.Equal(t, []uuid.UUID{taskA.ID}, leaseTaskIDs(res.Leases))
	})

	t.Run("WorkerTypeMatchesTaskType", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		aiTask := createTask(t, s, bundle.org.ID, store.CreateTaskParams{TaskType: "ai"})
		scanTask := createTask(t, s, bundle.org.ID, store.CreateTaskParams{TaskType: "scanner_plugin"})

		res := acquire(t, s, bundle.worker.ID, 4)
		require.Equal(t, []uuid.UUID{scanTask.ID}, leaseTaskIDs(res.Leases), "a scanner gets scanner_plugin tasks only")
		require.Equal(t, store.TaskPending, taskState(t, s, aiTask.ID))

		aiWorker := createWorker(t, s, bundle.pool, workerOpts{Type: "ai", Capacity: 4})
		assign(t, s, bundle.org.ID, aiWorker.ID)
		res = acquire(t, s, aiWorker.ID, 4)
		require.Equal(t, []uuid.UUID{aiTask.ID}, leaseTaskIDs(res.Leases))
	})

	t.Run("Capabilities", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		exec(t, bundle.pool, `UPDATE workers SET capabilities = '{"os":"linux"}' WHERE id = $1`, bundle.worker.ID)
		gpu := createTask(t, s, bundle.org.ID, store.CreateTaskParams{RequiredCapabilities: json.RawMessage(`{"os":"linux","gpu":true}`)})

		res := acquire(t, s, bundle.worker.ID, 4)
		require.Empty(t, res.Leases, "required capabilities must be contained in the worker's")

		res, err := s.AcquireLeases(t.Context(), store.AcquireParams{
			WorkerID: bundle.worker.ID, MaxTasks: 1,
			Capabilities: json.RawMessage(`{"os":"linux","gpu":true,"tools":["nmap"]}`),
		})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{gpu.ID}, leaseTaskIDs(res.Leases), "the advertisement is used at once")

		w, err := s.GetWorker(t.Context(), store.EveryOrganization(), bundle.worker.ID, onlineWindow)
		require.NoError(t, err)
		require.JSONEq(t, `{"os":"linux","gpu":true,"tools":["nmap"]}`, string(w.Capabilities), "and persisted")

		nmap := createTask(t, s, bundle.org.ID, store.CreateTaskParams{RequiredCapabilities: json.RawMessage(`{"tools":["nmap"]}`)})
		res = acquire(t, s, bundle.worker.ID, 4)
		require.Equal(t, []uuid.UUID{nmap.ID}, leaseTaskIDs(res.Leases), "a later poll uses the persisted advertisement")
	})

	t.Run("PriorityThenAge", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		low1 := createTask(t, s, bundle.org.ID, store.CreateTaskParams{Priority: 0})
		high1 := createTask(t, s, bundle.org.ID, store.CreateTaskParams{Priority: 5})
		low2 := createTask(t, s, bundle.org.ID, store.CreateTaskParams{Priority: 0})
		high2 := createTask(t, s, bundle.org.ID, store.CreateTaskParams{Priority: 5})
		mid := createTask(t, s, bundle.org.ID, store.CreateTaskParams{Priority: 1})

		var got []uuid.UUID
		for range 4 {
			got = append(got, acquireOne(t, s, bundle.worker.ID).Task.ID)
		}
		require.Equal(t, []uuid.UUID{high1.ID, high2.ID, mid.ID, low1.ID}, got)
		require.Equal(t, store.TaskPending, taskState(t, s, low2.ID))
	})

	t.Run("OrganizationsTakeTurns", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		orgB := createOrg(t, s, "org-b")
		assign(t, s, orgB.ID, bundle.worker.ID)
		exec(t, bundle.pool, `UPDATE workers SET max_concurrent_tasks = 10 WHERE id = $1`, bundle.worker.ID)
		// A's backlog is older than B's: age alone would serve all of A first.
		createTasks(t, s, bundle.org.ID, 50, store.CreateTaskParams{})
		createTasks(t, s, orgB.ID, 2, store.CreateTaskParams{})

		var orgs []uuid.UUID
		for range 4 {
			orgs = append(orgs, acquireOne(t, s, bundle.worker.ID).Task.OrganizationID)
		}
		require.Equal(t, []uuid.UUID{bundle.org.ID, orgB.ID, bundle.org.ID, orgB.ID}, orgs,
			"organizations of equal priority take turns")

		// B is exhausted: A's backlog continues.
		require.Equal(t, bundle.org.ID, acquireOne(t, s, bundle.worker.ID).Task.OrganizationID)
	})

	t.Run("TurnsWithinOnePoll", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		orgB := createOrg(t, s, "org-b")
		assign(t, s, orgB.ID, bundle.worker.ID)
		createTasks(t, s, bundle.org.ID, 10, store.CreateTaskParams{})
		createTasks(t, s, orgB.ID, 2, store.CreateTaskParams{})

		res := acquire(t, s, bundle.worker.ID, 4)
		count := map[uuid.UUID]int{}
		for _, l := range res.Leases {
			count[l.Task.OrganizationID]++
		}
		require.Equal(t, map[uuid.UUID]int{bundle.org.ID: 2, orgB.ID: 2}, count)
	})

	t.Run("DisabledWorker", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		task := createTask(t, s, bundle.org.ID, store.CreateTaskParams{})
		_, err := s.UpdateWorker(t.Context(), store.EveryOrganization(), bundle.worker.ID, store.UpdateWorkerParams{Enabled: new(false)}, onlineWindow)
		require.NoError(t, err)
		before := rowJSON(t, bundle.pool, "worker_tasks", task.ID)

		res, err := s.AcquireLeases(t.Context(), store.AcquireParams{WorkerID: bundle.worker.ID, MaxTasks: 1})
		require.NoError(t, err)
		require.Equal(t, store.AcquireResult{Disabled: true}, res)
		require.Equal(t, before, rowJSON(t, bundle.pool, "worker_tasks", task.ID))
		require.Zero(t, countAttempts(t, bundle.pool, `true`))
	})

	t.Run("RevokedWorker", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		task := createTask(t, s, bundle.org.ID, store.CreateTaskParams{})
		exec(t, bundle.pool, `UPDATE workers SET revoked_at = now(), revocation_reason = 'stolen' WHERE id = $1`, bundle.worker.ID)
		before := rowJSON(t, bundle.pool, "worker_tasks", task.ID)
		workerBefore := rowJSON(t, bundle.pool, "workers", bundle.worker.ID)

		res, err := s.AcquireLeases(t.Context(), store.AcquireParams{
			WorkerID: bundle.worker.ID, MaxTasks: 1, Capabilities: json.RawMessage(`{"sneaky":true}`),
		})
		require.ErrorIs(t, err, store.ErrWorkerRevoked)
		require.Zero(t, res)
		require.Equal(t, before, rowJSON(t, bundle.pool, "worker_tasks", task.ID))
		require.Equal(t, workerBefore, rowJSON(t, bundle.pool, "workers", bundle.worker.ID), "a revoked worker's advertisement is not persisted")
		require.Zero(t, countAttempts(t, bundle.pool, `true`))
	})

	t.Run("UnknownWorker", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		res, err := s.AcquireLeases(t.Context(), store.AcquireParams{WorkerID: uuid.New(), MaxTasks: 1})
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, res)
	})

	t.Run("IdempotencyKeyReplaysActiveLeases", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		createTasks(t, s, bundle.org.ID, 4, store.CreateTaskParams{})

		p := store.AcquireParams{WorkerID: bundle.worker.ID, MaxTasks: 2, IdempotencyKey: "poll-1"}
		first, err := s.AcquireLeases(t.Context(), p)
		require.NoError(t, err)
		require.Len(t, first.Leases, 2)
		require.False(t, first.Replayed)

		again, err := s.AcquireLeases(t.Context(), p)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.ElementsMatch(t, attemptIDs(first.Leases), attemptIDs(again.Leases))
		require.Equal(t, 2, countAttempts(t, bundle.pool, `true`), "a replay creates no attempts")
		// Only a hash of each token is stored, so a replay cannot answer the
		// old token: it issues a new one, and the old one stops working.
		for _, l := range again.Leases {
			old := tokenOf(first.Leases, l.AttemptID)
			require.NotEqual(t, old, l.LeaseToken, "a replay issues a fresh token")
			_, err := s.HeartbeatAttempt(t.Context(), store.AttemptRef{WorkerID: bundle.worker.ID, AttemptID: l.AttemptID, LeaseToken: old})
			require.ErrorIs(t, err, store.ErrLeaseLost, "the replaced token is refused")
			_, err = s.HeartbeatAttempt(t.Context(), refOf(bundle.worker.ID, l))
			require.NoError(t, err, "the new token holds the lease")
		}

		// Once one of them ends, the replay returns only the one still active.
		complete(t, s, refOf(bundle.worker.ID, again.Leases[0]), store.AttemptSucceeded, false)
		again, err = s.AcquireLeases(t.Context(), p)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, []uuid.UUID{first.Leases[1].AttemptID}, attemptIDs(again.Leases))

		// A repeat asking for fewer leases than the poll got replays that
		// many; the others keep their tokens.
		createTasks(t, s, bundle.org.ID, 3, store.CreateTaskParams{})
		three := store.AcquireParams{WorkerID: bundle.worker.ID, MaxTasks: 3, IdempotencyKey: "poll-3"}
		got, err := s.AcquireLeases(t.Context(), three)
		require.NoError(t, err)
		require.Len(t, got.Leases, 3)
		three.MaxTasks = 1
		fewer, err := s.AcquireLeases(t.Context(), three)
		require.NoError(t, err)
		require.True(t, fewer.Replayed)
		require.Len(t, fewer.Leases, 1)
		for _, l := range got.Leases {
			_, err := s.HeartbeatAttempt(t.Context(), refOf(bundle.worker.ID, l))
			if l.AttemptID == fewer.Leases[0].AttemptID {
				require.ErrorIs(t, err, store.ErrLeaseLost)
				l = fewer.Leases[0]
			} else {
				require.NoError(t, err, "not replayed, not replaced")
			}
			complete(t, s, refOf(bundle.worker.ID, l), store.AttemptSucceeded, false)
		}

		// Another key is another poll.
		other, err := s.AcquireLeases(t.Context(), store.AcquireParams{WorkerID: bundle.worker.ID, MaxTasks: 2, IdempotencyKey: "poll-2"})
		require.NoError(t, err)
		require.False(t, other.Replayed)
		require.Len(t, other.Leases, 2)
		require.Equal(t, 7, countAttempts(t, bundle.pool, `true`))

		// Expired leases are not replayed.
		for _, l := range other.Leases {
			expireLease(t, bundle.pool, l.AttemptID)
		}
		again, err = s.AcquireLeases(t.Context(), store.AcquireParams{WorkerID: bundle.worker.ID, MaxTasks: 2, IdempotencyKey: "poll-2"})
		require.NoError(t, err)
		require.False(t, again.Replayed)
	})

	t.Run("NotYetAvailableOrPastDeadline", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		later := createTask(t, s, bundle.org.ID, store.CreateTaskParams{Delay: time.Hour})
		late := createTask(t, s, bundle.org.ID, store.CreateTaskParams{ExecutionTimeout: time.Hour})
		editTasks(t, bundle.pool, `UPDATE worker_tasks SET execution_deadline_at = now() - interval '1 second' WHERE id = $1`, late.ID)

		res := acquire(t, s, bundle.worker.ID, 4)
		require.Empty(t, res.Leases)
		require.Equal(t, store.TaskPending, taskState(t, s, later.ID))

		makeDue(t, bundle.pool, later.ID)
		res = acquire(t, s, bundle.worker.ID, 4)
		require.Equal(t, []uuid.UUID{later.ID}, leaseTaskIDs(res.Leases))
	})

	t.Run("ConcurrentWorkersNeverShareATask", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		const nTasks, nWorkers = 30, 6
		createTasks(t, s, bundle.org.ID, nTasks, store.CreateTaskParams{})
		workers := make([]uuid.UUID, nWorkers)
		for i := range workers {
			w := createWorker(t, s, bundle.pool, workerOpts{Capacity: nTasks})
			assign(t, s, bundle.org.ID, w.ID)
			workers[i] = w.ID
		}

		var (
			mu     sync.Mutex
			leased []uuid.UUID
			errs   []error
			wg     sync.WaitGroup
		)
		for _, w := range workers {
			for range 3 {
				wg.Go(func() {
					res, err := s.AcquireLeases(t.Context(), store.AcquireParams{WorkerID: w, MaxTasks: 4})
					mu.Lock()
					defer mu.Unlock()
					errs = append(errs, err)
					leased = append(leased, leaseTaskIDs(res.Leases)...)
				})
			}
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		seen := map[uuid.UUID]bool{}
		for _, id := range leased {
			require.False(t, seen[id], "task %s leased twice", id)
			seen[id] = true
		}
		require.Equal(t, countAttempts(t, bundle.pool, `true`), len(leased))
	})

	t.Run("ConcurrentPollsOfOneWorkerRespectCapacity", func(t *testing.T) {
		t.Parallel()
		s, bundle := setup(t)
		createTasks(t, s, bundle.org.ID, 20, store.CreateTaskParams{})

		var (
			mu    sync.Mutex
			total int
			errs  []error
			wg    sync.WaitGroup
		)
		for range 10 {
			wg.Go(func() {
				res, err := s.AcquireLeases(t.Context(), store.AcquireParams{WorkerID: bundle.worker.ID, MaxTasks: 3})
				mu.Lock()
				defer mu.Unlock()
				errs = append(errs, err)
				total += len(res.Leases)
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, 4, total, "capacity 4 holds however many polls race")
		require.Equal(t, 4, countAttempts(t, bundle.pool, `status IN ('leased', 'running')`))
	})
}

func attemptIDs(leases []store.Lease) []uuid.UUID {
	ids := make([]uuid.UUID, len(leases))
	for i, l := range leases {
		ids[i] = l.AttemptID
	}
	return ids
}

func tokenOf(leases []store.Lease, attemptID uuid.UUID) string {
	for _, l := range leases {
		if l.AttemptID == attemptID {
			return l.LeaseToken
		}
	}
	return ""
}

// TestReleaseLeasesPutsUndeliveredLeasesBack: leases a poll never received
// go back to the queue at once, without using up an attempt; only the
// named worker's active leases are touched.
func TestReleaseLeasesPutsUndeliveredLeasesBack(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	other := createWorker(t, s, b.pool, workerOpts{Capacity: 1})
	assign(t, s, b.org.ID, other.ID)
	createTasks(t, s, b.org.ID, 4, store.CreateTaskParams{})
	leases := acquire(t, s, b.worker.ID, 3).Leases
	require.Len(t, leases, 3)
	otherLease := acquireOne(t, s, other.ID)
	finished := leases[2]
	complete(t, s, refOf(b.worker.ID, finished), store.AttemptSucceeded, false)

	// The other worker's lease and a finished one are named too: neither moves.
	n, err := s.ReleaseLeases(ctx, b.worker.ID, append(slices.Clone(leases), otherLease))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, l := range leases[:2] {
		require.Equal(t, store.AttemptSuperseded, attemptStatus(t, b.pool, l.AttemptID))
		task := getTask(t, s, l.Task.ID)
		require.Equal(t, store.TaskPending, task.State)
		require.Zero(t, task.AttemptCount, "an undelivered lease uses up no attempt")
		_, err := s.HeartbeatAttempt(ctx, refOf(b.worker.ID, l))
		require.ErrorIs(t, err, store.ErrLeaseLost)
	}
	require.Equal(t, store.AttemptSucceeded, attemptStatus(t, b.pool, finished.AttemptID))
	require.Equal(t, store.AttemptLeased, attemptStatus(t, b.pool, otherLease.AttemptID))
	requireQueueFollowsTasks(t, b.pool)

	again := acquire(t, s, b.worker.ID, 3).Leases
	require.Len(t, again, 2, "the released tasks are leasable again at once")
}
