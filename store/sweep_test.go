package store_test

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// backoffSeconds reads the delay a retry put on a task: available_at was set
// to now() + delay in the statement that also set updated_at = now().
func backoffSeconds(t *testing.T, b *testBundle, task uuid.UUID) float64 {
	t.Helper()
	var d float64
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT extract(epoch FROM available_at - updated_at)::float8 FROM worker_tasks WHERE id = $1`, task).Scan(&d))
	return d
}

func TestRetries(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*store.Store, *testBundle) {
		t.Helper()
		return setupStore(t)
	}

	t.Run("ExhaustingMaxAttemptsDeadLetters", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{MaxAttempts: 3})

		var states []store.TaskState
		for n := 1; n <= 3; n++ {
			l := acquireOne(t, s, b.worker.ID)
			require.Equal(t, n, l.Task.AttemptNumber)
			res := complete(t, s, refOf(b.worker.ID, l), store.AttemptFailed, true)
			states = append(states, res.TaskState)
			makeDue(t, b.pool, task.ID)
		}
		require.Equal(t, []store.TaskState{store.TaskRetryWait, store.TaskRetryWait, store.TaskFailedTerminal}, states)

		got, attempts, err := s.GetTask(t.Context(), store.EveryOrganization(), task.ID, onlineWindow)
		require.NoError(t, err)
		require.Equal(t, store.TaskFailedTerminal, got.State)
		require.Equal(t, 3, got.AttemptCount)
		require.Equal(t, "boom", got.LastErrorCode)
		require.NotNil(t, got.CompletedAt)
		require.Len(t, attempts, 3, "the dead letter keeps every attempt")
		for _, a := range attempts {
			require.Equal(t, store.AttemptFailed, a.Status)
			require.Equal(t, "boom", a.ErrorCode)
		}
		require.Empty(t, acquire(t, s, b.worker.ID, 1).Leases, "a dead letter is never leased")

		// A redrive gives it a fresh budget; attempt numbers continue.
		_, err = s.RetryTask(t.Context(), store.EveryOrganization(), task.ID)
		require.NoError(t, err)
		l := acquireOne(t, s, b.worker.ID)
		require.Equal(t, 4, l.Task.AttemptNumber)
		require.Equal(t, 1, getTask(t, s, task.ID).AttemptCount)
	})

	t.Run("BackoffIsBoundedExponential", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{MaxAttempts: 6, RetryBaseSeconds: 2, RetryMaxSeconds: 5})

		for n := 1; n <= 5; n++ {
			l := acquireOne(t, s, b.worker.ID)
			res := complete(t, s, refOf(b.worker.ID, l), store.AttemptFailed, true)
			require.Equal(t, store.TaskRetryWait, res.TaskState)
			require.NotNil(t, res.RetryAt)
			require.WithinDuration(t, getTask(t, s, task.ID).AvailableAt, *res.RetryAt, 0)

			bound := math.Min(5, 2*math.Pow(2, float64(n-1)))
			d := backoffSeconds(t, b, task.ID)
			require.GreaterOrEqual(t, d, 0.0, "attempt %d", n)
			require.LessOrEqual(t, d, bound, "attempt %d: full jitter below min(max, base·2^(n-1))", n)

			tk := getTask(t, s, task.ID)
			// Only a backoff still running after the read (full jitter
			// may pick ~0, and a loaded machine may be slow to read), with
			// a second to spare for the lease call, says anything.
			if time.Until(tk.AvailableAt) > time.Second {
				require.Equal(t, "retry_backoff", tk.PendingReason)
				require.Empty(t, acquire(t, s, b.worker.ID, 1).Leases, "not leasable during its backoff")
			}
			makeDue(t, b.pool, task.ID)
		}
	})

	t.Run("SweptExpiryBacksOffToo", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{MaxAttempts: 4, RetryBaseSeconds: 3, RetryMaxSeconds: 7})
		for n := 1; n <= 3; n++ {
			l := acquireOne(t, s, b.worker.ID)
			expireLease(t, b.pool, l.AttemptID)
			sweep(t, s)
			require.Equal(t, store.TaskRetryWait, taskState(t, s, task.ID))
			d := backoffSeconds(t, b, task.ID)
			require.GreaterOrEqual(t, d, 0.0)
			require.LessOrEqual(t, d, math.Min(7, 3*math.Pow(2, float64(n-1))))
			makeDue(t, b.pool, task.ID)
		}
		l := acquireOne(t, s, b.worker.ID)
		expireLease(t, b.pool, l.AttemptID)
		sweep(t, s)
		require.Equal(t, store.TaskFailedTerminal, taskState(t, s, task.ID), "the last attempt's expiry dead-letters")
	})
}

func TestPolicyRelease(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*store.Store, *testBundle) {
		t.Helper()
		return setupStore(t)
	}

	t.Run("DoesNotUseUpMaxAttempts", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{MaxAttempts: 1})

		l := acquireOne(t, s, b.worker.ID)
		require.Equal(t, 1, getTask(t, s, task.ID).AttemptCount)
		a, err := s.UnassignWorker(t.Context(), store.EveryOrganization(), b.org.ID, b.worker.ID, true, "security")
		require.NoError(t, err)
		require.Equal(t, 1, a.CancelledAttempts)
		got := getTask(t, s, task.ID)
		require.Equal(t, store.TaskPending, got.State)
		require.Zero(t, got.AttemptCount, "an attempt ended by policy does not count")
		require.Equal(t, store.AttemptSuperseded, attemptStatus(t, b.pool, l.AttemptID))
		require.Nil(t, got.CompletedAt)

		assign(t, s, b.org.ID, b.worker.ID)
		l = acquireOne(t, s, b.worker.ID)
		require.Equal(t, 2, l.Task.AttemptNumber)
		_, err = s.UpdateWorker(t.Context(), store.EveryOrganization(), b.worker.ID, store.UpdateWorkerParams{Enabled: new(false), CancelActive: true}, onlineWindow)
		require.NoError(t, err)
		got = getTask(t, s, task.ID)
		require.Equal(t, store.TaskPending, got.State)
		require.Zero(t, got.AttemptCount)
		require.Equal(t, store.AttemptSuperseded, attemptStatus(t, b.pool, l.AttemptID))

		_, err = s.UpdateWorker(t.Context(), store.EveryOrganization(), b.worker.ID, store.UpdateWorkerParams{Enabled: new(true)}, onlineWindow)
		require.NoError(t, err)
		l = acquireOne(t, s, b.worker.ID)
		require.Equal(t, 3, l.Task.AttemptNumber)
		require.Equal(t, 1, l.Task.MaxAttempts)
		// The one real attempt is still available; failing it uses it up.
		res := complete(t, s, refOf(b.worker.ID, l), store.AttemptFailed, true)
		require.Equal(t, store.TaskFailedTerminal, res.TaskState)
	})

	t.Run("ReleasedTaskGoesToAnotherWorkerAtOnce", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{Delay: 0})
		other := createWorker(t, s, b.pool, workerOpts{Capacity: 1})
		assign(t, s, b.org.ID, other.ID)
		acquireOne(t, s, b.worker.ID)

		_, err := s.UnassignWorker(t.Context(), store.EveryOrganization(), b.org.ID, b.worker.ID, true, "moved")
		require.NoError(t, err)
		l := acquireOne(t, s, other.ID)
		require.Equal(t, task.ID, l.Task.ID)
	})

	t.Run("UnassignDrainLetsActiveAttemptsFinish", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createTasks(t, s, b.org.ID, 2, store.CreateTaskParams{})
		l := acquireOne(t, s, b.worker.ID)

		a, err := s.UnassignWorker(t.Context(), store.EveryOrganization(), b.org.ID, b.worker.ID, false, "routine")
		require.NoError(t, err)
		require.Zero(t, a.CancelledAttempts)
		require.NotNil(t, a.RevokedAt)
		require.Empty(t, acquire(t, s, b.worker.ID, 2).Leases, "no new leases after unassignment")
		st, err := s.HeartbeatAttempt(t.Context(), refOf(b.worker.ID, l))
		require.NoError(t, err)
		require.Equal(t, store.LeaseActive, st.State)
		res := complete(t, s, refOf(b.worker.ID, l), store.AttemptSucceeded, false)
		require.Equal(t, store.TaskCompleted, res.TaskState)
	})

	t.Run("DisableDrainLetsActiveAttemptsFinish", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createTasks(t, s, b.org.ID, 2, store.CreateTaskParams{})
		l := acquireOne(t, s, b.worker.ID)

		_, err := s.UpdateWorker(t.Context(), store.EveryOrganization(), b.worker.ID, store.UpdateWorkerParams{Enabled: new(false)}, onlineWindow)
		require.NoError(t, err)
		require.True(t, acquire(t, s, b.worker.ID, 2).Disabled)
		res := complete(t, s, refOf(b.worker.ID, l), store.AttemptSucceeded, false)
		require.Equal(t, store.TaskCompleted, res.TaskState)
	})

	t.Run("UnassignOnlyReleasesThatOrganization", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		orgB := createOrg(t, s, "org-b")
		assign(t, s, orgB.ID, b.worker.ID)
		createTask(t, s, b.org.ID, store.CreateTaskParams{})
		createTask(t, s, orgB.ID, store.CreateTaskParams{})
		leases := acquire(t, s, b.worker.ID, 2).Leases
		require.Len(t, leases, 2)

		a, err := s.UnassignWorker(t.Context(), store.EveryOrganization(), orgB.ID, b.worker.ID, true, "security")
		require.NoError(t, err)
		require.Equal(t, 1, a.CancelledAttempts)
		for _, l := range leases {
			want := store.AttemptLeased
			if l.Task.OrganizationID == orgB.ID {
				want = store.AttemptSuperseded
			}
			require.Equal(t, want, attemptStatus(t, b.pool, l.AttemptID))
		}
	})
}

func TestSweepExpired(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*store.Store, *testBundle) {
		t.Helper()
		return setupStore(t)
	}

	t.Run("ExpiredLeaseRetries", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{})
		l := acquireOne(t, s, b.worker.ID)
		expireLease(t, b.pool, l.AttemptID)

		res := sweep(t, s)
		require.Equal(t, 1, res.ExpiredAttempts)
		require.False(t, res.More)
		got, attempts, err := s.GetTask(t.Context(), store.EveryOrganization(), task.ID, onlineWindow)
		require.NoError(t, err)
		require.Equal(t, store.TaskRetryWait, got.State)
		require.Equal(t, "lease_expired", got.LastErrorCode)
		require.Equal(t, 1, got.AttemptCount, "an expired lease uses up its attempt")
		require.Equal(t, store.AttemptExpired, attempts[0].Status)
		require.Equal(t, "lease_expired", attempts[0].ErrorCode)
		require.NotNil(t, attempts[0].FinishedAt)

		require.Zero(t, sweep(t, s).ExpiredAttempts, "a second sweep finds nothing")
	})

	t.Run("ExpiredLastAttemptDeadLetters", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{MaxAttempts: 1})
		l := acquireOne(t, s, b.worker.ID)
		expireLease(t, b.pool, l.AttemptID)
		sweep(t, s)
		require.Equal(t, store.TaskFailedTerminal, taskState(t, s, task.ID))
	})

	t.Run("CancellingBecomesCancelled", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{})
		l := acquireOne(t, s, b.worker.ID)
		_, err := s.CancelTask(t.Context(), store.EveryOrganization(), task.ID)
		require.NoError(t, err)
		expireLease(t, b.pool, l.AttemptID)
		sweep(t, s)
		require.Equal(t, store.TaskCancelled, taskState(t, s, task.ID))
		require.Equal(t, store.AttemptExpired, attemptStatus(t, b.pool, l.AttemptID))
	})

	t.Run("AttemptPastDeadlineTimesOut", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{AttemptTimeoutSeconds: new(60)})
		l := acquireOne(t, s, b.worker.ID)
		_, err := s.StartAttempt(t.Context(), refOf(b.worker.ID, l))
		require.NoError(t, err)
		exec(t, b.pool, `UPDATE worker_task_attempts SET deadline_at = now() - interval '1 second',
			lease_expires_at = now() - interval '1 second' WHERE id = $1`, l.AttemptID)

		require.Equal(t, 1, sweep(t, s).ExpiredAttempts)
		got, attempts, err := s.GetTask(t.Context(), store.EveryOrganization(), task.ID, onlineWindow)
		require.NoError(t, err)
		require.Equal(t, store.AttemptFailed, attempts[0].Status)
		require.Equal(t, "attempt_timeout", attempts[0].ErrorCode)
		require.Equal(t, store.TaskRetryWait, got.State)
		require.Equal(t, "attempt_timeout", got.LastErrorCode)
	})

	t.Run("QueuedPastExecutionDeadline", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		pending := createTask(t, s, b.org.ID, store.CreateTaskParams{ExecutionTimeout: time.Hour})
		fine := createTask(t, s, b.org.ID, store.CreateTaskParams{ExecutionTimeout: time.Hour})
		editTasks(t, b.pool, `UPDATE worker_tasks SET execution_deadline_at = now() - interval '1 second' WHERE id = $1`, pending.ID)

		res := sweep(t, s)
		require.Equal(t, 1, res.DeadlinedTasks)
		require.Equal(t, store.TaskFailedTerminal, taskState(t, s, pending.ID))
		require.Equal(t, store.TaskPending, taskState(t, s, fine.ID))
		require.NotNil(t, res.NextDueIn)
		require.InDelta(t, time.Hour.Seconds(), res.NextDueIn.Seconds(), 60)
	})

	t.Run("LeavesLiveLeasesAlone", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createTask(t, s, b.org.ID, store.CreateTaskParams{})
		l := acquireOne(t, s, b.worker.ID)
		before := snapshot(t, b.pool, l.AttemptID, l.Task.ID)

		res := sweep(t, s)
		require.Zero(t, res.ExpiredAttempts)
		require.Equal(t, before, snapshot(t, b.pool, l.AttemptID, l.Task.ID))
		require.NotNil(t, res.NextDueIn)
		require.InDelta(t, 30, res.NextDueIn.Seconds(), 5)
	})

	t.Run("NothingDue", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		res := sweep(t, s)
		require.Equal(t, store.SweepResult{}, res)
	})

	t.Run("BoundedPerPass", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createTasks(t, s, b.org.ID, 3, store.CreateTaskParams{})
		for _, l := range acquire(t, s, b.worker.ID, 3).Leases {
			expireLease(t, b.pool, l.AttemptID)
		}
		res, err := s.SweepExpired(t.Context(), 2)
		require.NoError(t, err)
		require.Equal(t, 2, res.ExpiredAttempts)
		require.True(t, res.More)
		res, err = s.SweepExpired(t.Context(), 2)
		require.NoError(t, err)
		require.Equal(t, 1, res.ExpiredAttempts)
		require.False(t, res.More)
	})

	t.Run("ConcurrentSweepersNeverDoubleExpire", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		exec(t, b.pool, `UPDATE workers SET max_concurrent_tasks = 40 WHERE id = $1`, b.worker.ID)
		createTasks(t, s, b.org.ID, 40, store.CreateTaskParams{})
		require.Len(t, acquire(t, s, b.worker.ID, 40).Leases, 40)
		exec(t, b.pool, `UPDATE worker_task_attempts SET lease_expires_at = now() - interval '1 second'`)

		var (
			mu    sync.Mutex
			total int
			errs  []error
			wg    sync.WaitGroup
		)
		for range 4 {
			wg.Go(func() {
				for {
					res, err := s.SweepExpired(t.Context(), 7)
					mu.Lock()
					total += res.ExpiredAttempts
					errs = append(errs, err)
					mu.Unlock()
					if err != nil || res.ExpiredAttempts == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, 40, total)
		require.Equal(t, 40, countAttempts(t, b.pool, `status = 'expired'`))
		var retrying int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM worker_tasks WHERE state = 'retry_wait'`).Scan(&retrying))
		require.Equal(t, 40, retrying)
	})
}
