package store_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// scopePathFixture is an organization whose scope approves
// staying.example and leaving.example, with a worker assigned; leave
// removes leaving.example (a narrowing).
type scopePathFixture struct {
	s       *store.Store
	b       *testBundle
	leaving store.ScopeTarget
}

func newScopePathFixture(t *testing.T) *scopePathFixture {
	t.Helper()
	s, b := setupStore(t)
	f := &scopePathFixture{s: s, b: b}
	var err error
	f.leaving, _, err = s.AddScopeTarget(t.Context(), store.EveryOrganization(), b.org.ID,
		store.ScopeTargetParams{Kind: store.ScopeDomain, Value: "leaving.example"})
	require.NoError(t, err)
	_, _, err = s.AddScopeTarget(t.Context(), store.EveryOrganization(), b.org.ID,
		store.ScopeTargetParams{Kind: store.ScopeDomain, Value: "staying.example"})
	require.NoError(t, err)
	return f
}

func (f *scopePathFixture) leave(t *testing.T) {
	t.Helper()
	_, err := f.s.RemoveScopeTarget(t.Context(), store.EveryOrganization(), f.b.org.ID, f.leaving.ID)
	require.NoError(t, err)
}

// task creates a scanner task aimed at host.
func (f *scopePathFixture) task(t *testing.T, host string) store.Task {
	t.Helper()
	return createTask(t, f.s, f.b.org.ID, store.CreateTaskParams{
		Payload: json.RawMessage(`{"plugin": "tcp-connect", "input": {"addresses": ["` + host + `:22"]}}`)})
}

// TestEveryPathToALeasableTaskDecidesScope enumerates the ways a task
// becomes leasable — created (by the API, a scan, a scan's next job, a
// schedule's fire) and every edge of TaskTransitions into a leasable state
// — and shows each one refuses, or never reaches, a target outside the
// organization's scan scope. An edge added to TaskTransitions into a
// leasable state fails this test until it has a case here.
func TestEveryPathToALeasableTaskDecidesScope(t *testing.T) {
	t.Parallel()
	leasable := []store.TaskState{store.TaskPending, store.TaskRetryWait}
	edges := map[store.TaskEvent]func(t *testing.T){
		// An operator's redrive (single, or the console's bulk redrive,
		// which calls it per task) decides again.
		store.EventRedrive: func(t *testing.T) {
			f := newScopePathFixture(t)
			task := f.task(t, "leaving.example")
			_, err := f.s.CancelTask(t.Context(), store.EveryOrganization(), task.ID)
			require.NoError(t, err)
			f.leave(t)
			_, err = f.s.RetryTask(t.Context(), store.EveryOrganization(), task.ID)
			require.ErrorIs(t, err, store.ErrOutOfScope)
			require.Equal(t, store.TaskCancelled, taskState(t, f.s, task.ID))

			// A scan's job as well: its scan was cancelled by the
			// narrowing, and the redrive is refused for its targets first.
			f = newScopePathFixture(t)
			scan := createScan1(t, f.s, f.b.org.ID, []string{"leaving.example"}, "echo")
			l := acquireOne(t, f.s, f.b.worker.ID)
			complete(t, f.s, refOf(f.b.worker.ID, l), store.AttemptFailed, false)
			f.leave(t)
			_, err = f.s.RetryTask(t.Context(), store.EveryOrganization(), l.Task.ID)
			require.ErrorIs(t, err, store.ErrOutOfScope, "scan %s", scan.ID)
		},
		// A retry follows a leased or running attempt. A narrowing asks
		// such a task to stop (cancelling), so its failure ends it instead
		// of putting it back in the queue.
		store.EventRetry: func(t *testing.T) {
			f := newScopePathFixture(t)
			task := f.task(t, "leaving.example")
			l := acquireOne(t, f.s, f.b.worker.ID)
			f.leave(t)
			require.Equal(t, store.TaskCancelling, taskState(t, f.s, task.ID))
			complete(t, f.s, refOf(f.b.worker.ID, l), store.AttemptFailed, true)
			got := getTask(t, f.s, task.ID)
			require.Equal(t, store.TaskCancelled, got.State)
		},
		// A release (the worker gives the task back, is revoked or
		// unassigned) likewise starts from leased or running.
		store.EventRelease: func(t *testing.T) {
			f := newScopePathFixture(t)
			task := f.task(t, "leaving.example")
			l := acquireOne(t, f.s, f.b.worker.ID)
			f.leave(t)
			complete(t, f.s, refOf(f.b.worker.ID, l), store.AttemptCancelled, false)
			require.Equal(t, store.TaskCancelled, taskState(t, f.s, task.ID))
		},
	}
	for event, tr := range store.TaskTransitions {
		if !slices.Contains(leasable, tr.To) {
			continue
		}
		check, ok := edges[event]
		require.True(t, ok, "transition %s leads to %s: add how it is held to the scan scope", event, tr.To)
		t.Run(string(event), func(t *testing.T) {
			t.Parallel()
			check(t)
		})
	}

	creations := map[string]func(t *testing.T){
		"create task": func(t *testing.T) {
			f := newScopePathFixture(t)
			_, _, err := f.s.CreateTask(t.Context(), store.EveryOrganization(), store.CreateTaskParams{OrganizationID: f.b.org.ID,
				TaskType: "scanner_plugin", Payload: json.RawMessage(`{"plugin": "tcp-connect", "assets": [{"type": "ip", "value": "vm"}]}`)})
			require.ErrorIs(t, err, store.ErrOutOfScope)
		},
		"create scan": func(t *testing.T) {
			f := newScopePathFixture(t)
			_, _, err := f.s.CreateScan(t.Context(), store.EveryOrganization(), store.CreateScanParams{OrganizationID: f.b.org.ID,
				Targets: []string{"127.1"}, Plugins: []store.ScanPlugin{{Name: "echo"}}})
			require.ErrorIs(t, err, store.ErrOutOfScope)
		},
		// advance_scan creates a scan's next job in SQL, from what the scan
		// was approved for; a narrowing cancels a scan that left its scope,
		// so its next job is never created.
		"scan's next job": func(t *testing.T) {
			f := newScopePathFixture(t)
			scan := createScan1(t, f.s, f.b.org.ID, []string{"leaving.example"}, "echo", "echo")
			l := acquireOne(t, f.s, f.b.worker.ID)
			f.leave(t)
			complete(t, f.s, refOf(f.b.worker.ID, l), store.AttemptSucceeded, false)
			got, err := f.s.GetScan(t.Context(), store.EveryOrganization(), scan.ID)
			require.NoError(t, err)
			require.Equal(t, "cancelled", got.State)
			require.Empty(t, acquire(t, f.s, f.b.worker.ID, 1).Leases, "no next job")
		},
		"schedule fire": func(t *testing.T) {
			f := newScopePathFixture(t)
			t0 := scheduleOrigin()
			p := minutely(t0, store.OverlapAllow, store.CatchUpOnce)
			p.Definition = taskDefinition(`{"plugin": "tcp-connect", "input": {"host": "leaving.example"}}`)
			sched := createSchedule(t, f.s, f.b.org.ID, p)
			f.leave(t)
			fireAt(t, f.s, t0.Add(time.Second))
			var tasks int
			require.NoError(t, f.b.pool.QueryRow(t.Context(), `SELECT count(*) FROM worker_tasks WHERE trigger_schedule_id = $1`,
				sched.ID).Scan(&tasks))
			require.Zero(t, tasks)
		},
	}
	for name, check := range creations {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			check(t)
		})
	}
}

// TestNarrowingEndsQueuedWork: removing an entry cancels the queued tasks
// it approved, with target-out-of-scope, and leaves the others; moving an
// unrestricted organization to allow_list does the same.
func TestNarrowingEndsQueuedWork(t *testing.T) {
	t.Parallel()
	f := newScopePathFixture(t)
	leaving, staying := f.task(t, "leaving.example"), f.task(t, "staying.example")
	f.leave(t)
	got := getTask(t, f.s, leaving.ID)
	require.Equal(t, store.TaskCancelled, got.State)
	require.Equal(t, "target-out-of-scope", got.LastErrorCode)
	require.Equal(t, store.TaskPending, taskState(t, f.s, staying.ID))
	var mismatched int
	require.NoError(t, f.b.pool.QueryRow(t.Context(), store.QueueMismatchSQL).Scan(&mismatched))
	require.Zero(t, mismatched, "the cancelled task left the queue")

	s, b := setupStore(t) // unrestricted
	anywhere := createTask(t, s, b.org.ID, store.CreateTaskParams{
		Payload: json.RawMessage(`{"plugin": "tcp-connect", "input": {"addresses": ["anywhere.example:22"]}}`)})
	o, err := s.SetScopePolicy(t.Context(), store.EveryOrganization(), b.org.ID, store.ScopePolicyAllowList)
	require.NoError(t, err)
	require.Equal(t, store.ScopePolicyAllowList, o.ScopePolicy)
	require.Equal(t, store.TaskCancelled, taskState(t, s, anywhere.ID))

	_, err = s.SetScopePolicy(t.Context(), store.OneOrganization(b.org.ID), b.org.ID, store.ScopePolicyUnrestricted)
	require.ErrorIs(t, err, store.ErrForbidden, "an organization does not lift its own scope")
	_, err = s.SetScopePolicy(t.Context(), store.EveryOrganization(), uuid.New(), store.ScopePolicyUnrestricted)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestNarrowingWaitsForDecidersInFlight: a task decided under the old
// scope whose transaction has not committed when an entry is removed is
// not missed by the removal's re-check: the removal waits for the decider
// (the scope lock) and then cancels the task; with no wait it would read
// the live work before the task commits, and leave it queued.
func TestNarrowingWaitsForDecidersInFlight(t *testing.T) {
	t.Parallel()
	f := newScopePathFixture(t)
	ctx := withTimeout(t, time.Minute)

	// A creation mid-flight: it took the scope lock, read the scope (with
	// leaving.example) and inserted its task, but has not committed.
	decider, err := f.b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = decider.Rollback(ctx) }()
	_, err = decider.Exec(ctx, `SELECT `+store.ScopeReadLockSQL("$1::uuid"), f.b.org.ID)
	require.NoError(t, err)
	var taskID uuid.UUID
	require.NoError(t, decider.QueryRow(ctx, `WITH created AS (
			INSERT INTO worker_tasks (task_type, organization_id, payload)
			VALUES ('scanner_plugin', $1, '{"plugin": "tcp-connect", "input": {"addresses": ["leaving.example:22"]}}')
			RETURNING *
		), queued AS (`+store.EnqueueSQL("created")+`)
		SELECT id FROM created`, f.b.org.ID).Scan(&taskID))

	removed := make(chan error, 1)
	go func() {
		_, err := f.s.RemoveScopeTarget(ctx, store.EveryOrganization(), f.b.org.ID, f.leaving.ID)
		removed <- err
	}()
	// The removal waits on the scope lock the decider holds.
	for waiting := false; !waiting; {
		require.NoError(t, f.b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting))
	}
	require.NoError(t, decider.Commit(ctx))
	require.NoError(t, <-removed)
	got := getTask(t, f.s, taskID)
	require.Equal(t, store.TaskCancelled, got.State)
	require.Equal(t, "target-out-of-scope", got.LastErrorCode)
}
