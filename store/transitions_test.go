package store_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// taskFixture is a task driven into some state; lease is set while an
// attempt holds it.
type taskFixture struct {
	task  uuid.UUID
	lease *store.Lease
}

func (f taskFixture) ref(worker uuid.UUID) store.AttemptRef { return refOf(worker, *f.lease) }

// driveInto creates a task and drives it into state through store verbs only.
func driveInto(t *testing.T, s *store.Store, b *testBundle, state store.TaskState) taskFixture {
	t.Helper()
	task := createTask(t, s, b.org.ID, store.CreateTaskParams{})
	f := taskFixture{task: task.ID}
	lease := func() {
		l := acquireOne(t, s, b.worker.ID)
		require.Equal(t, task.ID, l.Task.ID)
		f.lease = &l
	}
	switch state {
	case store.TaskPending:
	case store.TaskLeased:
		lease()
	case store.TaskRunning:
		lease()
		_, err := s.StartAttempt(t.Context(), f.ref(b.worker.ID))
		require.NoError(t, err)
	case store.TaskRetryWait:
		lease()
		complete(t, s, f.ref(b.worker.ID), store.AttemptFailed, true)
		f.lease = nil
	case store.TaskCancelling:
		lease()
		_, err := s.CancelTask(t.Context(), store.EveryOrganization(), task.ID)
		require.NoError(t, err)
	case store.TaskCancelled:
		_, err := s.CancelTask(t.Context(), store.EveryOrganization(), task.ID)
		require.NoError(t, err)
	case store.TaskFailedTerminal:
		lease()
		complete(t, s, f.ref(b.worker.ID), store.AttemptFailed, false)
		f.lease = nil
	case store.TaskCompleted:
		lease()
		complete(t, s, f.ref(b.worker.ID), store.AttemptSucceeded, false)
		f.lease = nil
	default:
		t.Fatalf("no way to reach %s", state)
	}
	require.Equal(t, state, taskState(t, s, task.ID))
	return f
}

// edgeDriver takes one edge of the task state machine through store verbs.
type edgeDriver struct {
	name string
	do   func(t *testing.T, s *store.Store, b *testBundle, f taskFixture)
	// wantAttempt is the status the held attempt ends with, if any.
	wantAttempt store.AttemptStatus
	wantCode    string
}

func completeDriver(name string, outcome store.AttemptStatus, retryable bool) edgeDriver {
	return edgeDriver{name: name, wantAttempt: outcome, do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
		complete(t, s, f.ref(b.worker.ID), outcome, retryable)
	}}
}

var (
	leaseDriver = edgeDriver{name: "acquire", do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
		makeDue(t, b.pool, f.task)
		require.Equal(t, f.task, acquireOne(t, s, b.worker.ID).Task.ID)
	}}
	startDrivers = []edgeDriver{
		{name: "start", wantAttempt: store.AttemptRunning, do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
			_, err := s.StartAttempt(t.Context(), f.ref(b.worker.ID))
			require.NoError(t, err)
		}},
		{name: "heartbeat", wantAttempt: store.AttemptRunning, do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
			_, err := s.HeartbeatAttempt(t.Context(), f.ref(b.worker.ID))
			require.NoError(t, err)
		}},
		{name: "renew_leases", wantAttempt: store.AttemptRunning, do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
			out, err := s.RenewLeases(t.Context(), store.RenewParams{WorkerID: b.worker.ID, Leases: []store.AttemptRef{f.ref(uuid.Nil)}})
			require.NoError(t, err)
			require.Equal(t, store.LeaseActive, out[0].State)
		}},
	}
	cancelDriver = edgeDriver{name: "cancel_task", do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
		_, err := s.CancelTask(t.Context(), store.EveryOrganization(), f.task)
		require.NoError(t, err)
	}}
	expireDriver = edgeDriver{name: "lease_expired_sweep", wantAttempt: store.AttemptExpired, wantCode: "lease_expired",
		do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
			expireLease(t, b.pool, f.lease.AttemptID)
			require.Equal(t, 1, sweep(t, s).ExpiredAttempts)
		}}
	timeoutDriver = edgeDriver{name: "attempt_timeout_sweep", wantAttempt: store.AttemptFailed, wantCode: "attempt_timeout",
		do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
			exec(t, b.pool, `UPDATE worker_task_attempts SET deadline_at = now() - interval '1 second',
				lease_expires_at = now() - interval '1 second' WHERE id = $1`, f.lease.AttemptID)
			require.Equal(t, 1, sweep(t, s).ExpiredAttempts)
		}}
	unassignDriver = edgeDriver{name: "unassign_cancel_active", wantAttempt: store.AttemptSuperseded, wantCode: "assignment_removed",
		do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
			a, err := s.UnassignWorker(t.Context(), store.EveryOrganization(), b.org.ID, b.worker.ID, true, "moved")
			require.NoError(t, err)
			require.Equal(t, 1, a.CancelledAttempts)
		}}
	disableDriver = edgeDriver{name: "disable_cancel_active", wantAttempt: store.AttemptSuperseded, wantCode: "worker_disabled",
		do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
			_, err := s.UpdateWorker(t.Context(), store.EveryOrganization(), b.worker.ID, store.UpdateWorkerParams{Enabled: new(false), CancelActive: true}, onlineWindow)
			require.NoError(t, err)
		}}
	redriveDriver = edgeDriver{name: "retry_task", do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
		task, err := s.RetryTask(t.Context(), store.EveryOrganization(), f.task)
		require.NoError(t, err)
		require.Zero(t, task.AttemptCount, "a redrive gives a fresh attempt budget")
		require.Nil(t, task.CompletedAt)
	}}
	deadlineQueuedDriver = edgeDriver{name: "execution_deadline_sweep", do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
		editTasks(t, b.pool, `UPDATE worker_tasks SET execution_deadline_at = now() - interval '1 second' WHERE id = $1`, f.task)
		require.Equal(t, 1, sweep(t, s).DeadlinedTasks)
		require.Equal(t, "execution_deadline_exceeded", getTask(t, s, f.task).LastErrorCode)
	}}
	deadlineActiveDriver = edgeDriver{name: "execution_deadline_sweep", wantAttempt: store.AttemptExpired,
		do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
			editTasks(t, b.pool, `UPDATE worker_tasks SET execution_deadline_at = now() - interval '1 second' WHERE id = $1`, f.task)
			expireLease(t, b.pool, f.lease.AttemptID)
			require.Equal(t, 1, sweep(t, s).ExpiredAttempts)
		}}
	exhaustedDriver = edgeDriver{name: "complete_failed_retryable_exhausted", wantAttempt: store.AttemptFailed,
		do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
			editTasks(t, b.pool, `UPDATE worker_tasks SET max_attempts = attempt_count WHERE id = $1`, f.task)
			complete(t, s, f.ref(b.worker.ID), store.AttemptFailed, true)
		}}
	expiredExhaustedDriver = edgeDriver{name: "lease_expired_sweep_exhausted", wantAttempt: store.AttemptExpired,
		do: func(t *testing.T, s *store.Store, b *testBundle, f taskFixture) {
			editTasks(t, b.pool, `UPDATE worker_tasks SET max_attempts = attempt_count WHERE id = $1`, f.task)
			expireLease(t, b.pool, f.lease.AttemptID)
			require.Equal(t, 1, sweep(t, s).ExpiredAttempts)
		}}
)

// edgeDrivers lists, per event and "from" state, every way the store takes
// that edge. TestTaskTransitions fails if the table gains an edge without one.
var edgeDrivers = map[store.TaskEvent]map[store.TaskState][]edgeDriver{
	store.EventLease: {
		store.TaskPending:   {leaseDriver},
		store.TaskRetryWait: {leaseDriver},
	},
	store.EventStart: {
		store.TaskLeased: startDrivers,
	},
	store.EventSucceed: {
		store.TaskLeased:     {completeDriver("complete_succeeded", store.AttemptSucceeded, false)},
		store.TaskRunning:    {completeDriver("complete_succeeded", store.AttemptSucceeded, false)},
		store.TaskCancelling: {completeDriver("complete_succeeded", store.AttemptSucceeded, false)},
	},
	store.EventRetry: {
		store.TaskLeased:  {completeDriver("complete_failed_retryable", store.AttemptFailed, true), expireDriver, timeoutDriver},
		store.TaskRunning: {completeDriver("complete_failed_retryable", store.AttemptFailed, true), expireDriver, timeoutDriver},
	},
	store.EventFailTerminal: {
		store.TaskPending:   {deadlineQueuedDriver},
		store.TaskRetryWait: {deadlineQueuedDriver},
		store.TaskLeased: {completeDriver("complete_failed_non_retryable", store.AttemptFailed, false),
			exhaustedDriver, expiredExhaustedDriver, deadlineActiveDriver},
		store.TaskRunning: {completeDriver("complete_failed_non_retryable", store.AttemptFailed, false),
			exhaustedDriver, expiredExhaustedDriver, deadlineActiveDriver},
	},
	store.EventCancelQueued: {
		store.TaskPending:   {cancelDriver},
		store.TaskRetryWait: {cancelDriver},
	},
	store.EventCancelActive: {
		store.TaskLeased:  {cancelDriver},
		store.TaskRunning: {cancelDriver},
	},
	store.EventCancelDone: {
		store.TaskCancelling: {
			completeDriver("complete_cancelled", store.AttemptCancelled, false),
			completeDriver("complete_failed", store.AttemptFailed, true),
			expireDriver, unassignDriver, disableDriver,
		},
	},
	store.EventRelease: {
		store.TaskLeased:  {unassignDriver, disableDriver, completeDriver("complete_cancelled_by_worker", store.AttemptCancelled, false)},
		store.TaskRunning: {unassignDriver, disableDriver, completeDriver("complete_cancelled_by_worker", store.AttemptCancelled, false)},
	},
	store.EventRedrive: {
		store.TaskFailedTerminal: {redriveDriver},
		store.TaskCancelled:      {redriveDriver},
	},
}

// TestTaskTransitions drives a task along every edge of store.TaskTransitions
// with the store's own verbs and checks where it lands.
func TestTaskTransitions(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*store.Store, *testBundle) {
		t.Helper()
		return setupStore(t)
	}

	events := make([]store.TaskEvent, 0, len(store.TaskTransitions))
	for e := range store.TaskTransitions {
		events = append(events, e)
	}
	slices.Sort(events)
	for _, event := range events {
		tr := store.TaskTransitions[event]
		for _, from := range tr.From {
			drivers := edgeDrivers[event][from]
			require.NotEmpty(t, drivers, "no driver for %s: %s → %s", event, from, tr.To)
			for _, d := range drivers {
				t.Run(string(event)+"/"+string(from)+"/"+d.name, func(t *testing.T) {
					t.Parallel()
					s, b := setup(t)
					f := driveInto(t, s, b, from)
					before := getTask(t, s, f.task)
					var attemptBefore store.AttemptStatus
					if f.lease != nil {
						attemptBefore = attemptStatus(t, b.pool, f.lease.AttemptID)
					}

					d.do(t, s, b, f)

					after := getTask(t, s, f.task)
					require.Equal(t, tr.To, after.State)
					require.True(t, store.TaskTransitionAllowed(from, after.State))
					require.Equal(t, after.State.IsFinal(), after.CompletedAt != nil, "completed_at is set exactly in final states")
					if f.lease != nil && d.wantAttempt != "" {
						require.Equal(t, d.wantAttempt, attemptStatus(t, b.pool, f.lease.AttemptID))
						require.True(t, store.AttemptTransitionAllowed(attemptBefore, d.wantAttempt))
					}
					if f.lease != nil && d.wantCode != "" {
						var code string
						require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT error_code FROM worker_task_attempts WHERE id = $1`, f.lease.AttemptID).Scan(&code))
						require.Equal(t, d.wantCode, code)
					}
					if event == store.EventRelease {
						require.Equal(t, before.AttemptCount-1, after.AttemptCount, "an attempt ended by policy does not count")
					}
					wantActive := 0
					if slices.Contains([]store.TaskState{store.TaskLeased, store.TaskRunning, store.TaskCancelling}, after.State) {
						wantActive = 1
					}
					require.Equal(t, wantActive, countAttempts(t, b.pool, `task_id = $1 AND status IN ('leased', 'running')`, f.task),
						"exactly the leased, running and cancelling tasks hold an active attempt")
				})
			}
		}
	}
	for event, byFrom := range edgeDrivers {
		for from := range byFrom {
			require.Contains(t, store.TaskTransitions[event].From, from, "driver for an edge the table does not have: %s from %s", event, from)
		}
	}
}

// TestRefusedTransitions checks that the verbs refuse the edges the table
// does not have, river-style: the error, a zero result, the row unchanged.
func TestRefusedTransitions(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*store.Store, *testBundle) {
		t.Helper()
		return setupStore(t)
	}

	for _, state := range []store.TaskState{store.TaskCompleted, store.TaskFailedTerminal} {
		t.Run("Cancel/"+string(state), func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			f := driveInto(t, s, b, state)
			before := rowJSON(t, b.pool, "worker_tasks", f.task)

			task, err := s.CancelTask(t.Context(), store.EveryOrganization(), f.task)
			require.ErrorIs(t, err, store.ErrTaskFinished)
			require.Equal(t, before, rowJSON(t, b.pool, "worker_tasks", f.task))
			require.Zero(t, task)
		})
	}

	for _, state := range []store.TaskState{store.TaskCancelling, store.TaskCancelled} {
		t.Run("CancelAgain/"+string(state), func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			f := driveInto(t, s, b, state)
			task, err := s.CancelTask(t.Context(), store.EveryOrganization(), f.task)
			require.NoError(t, err, "cancelling twice is harmless")
			require.Equal(t, state, task.State)
		})
	}

	for _, state := range []store.TaskState{store.TaskPending, store.TaskLeased, store.TaskRunning, store.TaskRetryWait,
		store.TaskCancelling, store.TaskCompleted} {
		t.Run("Retry/"+string(state), func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			f := driveInto(t, s, b, state)
			before := rowJSON(t, b.pool, "worker_tasks", f.task)

			task, err := s.RetryTask(t.Context(), store.EveryOrganization(), f.task)
			require.ErrorIs(t, err, store.ErrTaskNotRetryable)
			require.Equal(t, before, rowJSON(t, b.pool, "worker_tasks", f.task))
			require.Zero(t, task)
		})
	}

	t.Run("UnknownTask", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		task, err := s.CancelTask(t.Context(), store.EveryOrganization(), uuid.New())
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, task)
		task, err = s.RetryTask(t.Context(), store.EveryOrganization(), uuid.New())
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, task)
	})

	// Every pair of states the table does not connect is refused by
	// TaskTransitionAllowed itself.
	t.Run("TableRefusesOtherPairs", func(t *testing.T) {
		t.Parallel()
		all := []store.TaskState{store.TaskPending, store.TaskLeased, store.TaskRunning, store.TaskCancelling,
			store.TaskCancelled, store.TaskCompleted, store.TaskRetryWait, store.TaskFailedTerminal}
		allowed := map[[2]store.TaskState]bool{}
		for _, tr := range store.TaskTransitions {
			for _, from := range tr.From {
				allowed[[2]store.TaskState{from, tr.To}] = true
			}
		}
		for _, from := range all {
			for _, to := range all {
				require.Equal(t, allowed[[2]store.TaskState{from, to}], store.TaskTransitionAllowed(from, to), "%s → %s", from, to)
			}
			require.False(t, store.TaskTransitionAllowed(store.TaskCompleted, from), "completed is final for good")
		}
	})
}
