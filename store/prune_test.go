package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

const day = 24 * time.Hour

// pruneParams keeps tasks 30 days, uploads 7 days and audit events 90 days.
func pruneParams(batch int) store.PruneParams {
	return store.PruneParams{TaskRetention: 30 * day, UploadRetention: 7 * day, AuditRetention: 90 * day, Batch: batch}
}

func prune(t *testing.T, s *store.Store, p store.PruneParams) store.PruneResult {
	t.Helper()
	res, err := s.Prune(t.Context(), p)
	require.NoError(t, err)
	return res
}

// backdateTask moves a task's finish and last change age into the past.
func backdateTask(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, age time.Duration) {
	t.Helper()
	exec(t, pool, `UPDATE worker_tasks SET
		completed_at = CASE WHEN completed_at IS NULL THEN NULL ELSE now() - make_interval(secs => $2) END,
		updated_at = now() - make_interval(secs => $2), created_at = now() - make_interval(secs => $2)
		WHERE id = $1`, id, age.Seconds())
}

// finishedTask runs a task through one attempt to the given outcome.
func finishedTask(t *testing.T, s *store.Store, b *testBundle, outcome store.AttemptStatus) (store.Task, store.Lease) {
	t.Helper()
	task := createTask(t, s, b.org.ID, store.CreateTaskParams{MaxAttempts: 1})
	l := acquireOne(t, s, b.worker.ID)
	require.Equal(t, task.ID, l.Task.ID)
	complete(t, s, refOf(b.worker.ID, l), outcome, false)
	return task, l
}

// terminalTasks creates n queued tasks and moves them straight into state
// by SQL, finished age ago.
func terminalTasks(t *testing.T, s *store.Store, b *testBundle, n int, state store.TaskState, age time.Duration) []uuid.UUID {
	t.Helper()
	ids := leaseTaskIDsOf(createTasks(t, s, b.org.ID, n, store.CreateTaskParams{}))
	editTasks(t, b.pool, `UPDATE worker_tasks SET state = $2, completed_at = now() - make_interval(secs => $3),
		updated_at = now() - make_interval(secs => $3) WHERE id = ANY($1)`, ids, string(state), age.Seconds())
	return ids
}

func leaseTaskIDsOf(tasks []store.Task) []uuid.UUID {
	ids := make([]uuid.UUID, len(tasks))
	for i, task := range tasks {
		ids[i] = task.ID
	}
	return ids
}

func taskExists(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM worker_tasks WHERE id = $1)`, id).Scan(&ok))
	return ok
}

func countRows(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), query, args...).Scan(&n))
	return n
}

// createScan inserts a scan in state and attaches the tasks to it.
func createScan(t *testing.T, b *testBundle, state string, tasks ...uuid.UUID) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`INSERT INTO scans (organization_id, state) VALUES ($1, $2) RETURNING id`, b.org.ID, state).Scan(&id))
	exec(t, b.pool, `UPDATE worker_tasks SET scan_id = $2 WHERE id = ANY($1)`, tasks, id)
	return id
}

// insertUpload adds an upload session row of the attempt.
func insertUpload(t *testing.T, b *testBundle, taskID, attemptID uuid.UUID, status string, expiredAgo time.Duration) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	require.NoError(t, b.pool.QueryRow(t.Context(), `
		INSERT INTO worker_artifact_uploads (task_id, attempt_id, organization_id, object_key, original_name, status, expires_at)
		VALUES ($1, $2, $3, $4, 'a.txt', $5, now() - make_interval(secs => $6)) RETURNING id`,
		taskID, attemptID, b.org.ID, uuid.NewString(), status, expiredAgo.Seconds()).Scan(&id))
	return id
}

func TestPrune(t *testing.T) {
	t.Parallel()

	t.Run("OnlyOldTerminalTasks", func(t *testing.T) {
		t.Parallel()
		s, b := setupStore(t)
		old := 31 * day

		oldCompleted, _ := finishedTask(t, s, b, store.AttemptSucceeded)
		backdateTask(t, b.pool, oldCompleted.ID, old)
		oldFailed, _ := finishedTask(t, s, b, store.AttemptFailed)
		require.Equal(t, store.TaskFailedTerminal, taskState(t, s, oldFailed.ID))
		backdateTask(t, b.pool, oldFailed.ID, old)
		oldCancelled := createTask(t, s, b.org.ID, store.CreateTaskParams{})
		_, err := s.CancelTask(t.Context(), store.EveryOrganization(), oldCancelled.ID)
		require.NoError(t, err)
		backdateTask(t, b.pool, oldCancelled.ID, old)
		// A terminal task without completed_at ages by updated_at.
		noCompletedAt := terminalTasks(t, s, b, 1, store.TaskCompleted, old)[0]
		exec(t, b.pool, `UPDATE worker_tasks SET completed_at = NULL WHERE id = $1`, noCompletedAt)

		newCompleted, _ := finishedTask(t, s, b, store.AttemptSucceeded)
		backdateTask(t, b.pool, newCompleted.ID, 29*day)

		// Old tasks that are not terminal.
		oldRunning := createTask(t, s, b.org.ID, store.CreateTaskParams{})
		l := acquireOne(t, s, b.worker.ID)
		require.Equal(t, oldRunning.ID, l.Task.ID)
		backdateTask(t, b.pool, oldRunning.ID, old)
		oldRetry := createTask(t, s, b.org.ID, store.CreateTaskParams{MaxAttempts: 3})
		l = acquireOne(t, s, b.worker.ID)
		require.Equal(t, oldRetry.ID, l.Task.ID)
		complete(t, s, refOf(b.worker.ID, l), store.AttemptFailed, true)
		require.Equal(t, store.TaskRetryWait, taskState(t, s, oldRetry.ID))
		backdateTask(t, b.pool, oldRetry.ID, old)
		oldPending := createTask(t, s, b.org.ID, store.CreateTaskParams{Delay: time.Hour})
		backdateTask(t, b.pool, oldPending.ID, old)
		// Non-terminal states never carry completed_at, but even one that
		// did is kept.
		oldCancelling := terminalTasks(t, s, b, 1, store.TaskCancelling, old)[0]

		// Old completed tasks of scans: kept while the scan is pending or
		// running, pruned once it finished.
		ofRunning := terminalTasks(t, s, b, 1, store.TaskCompleted, old)[0]
		createScan(t, b, "running", ofRunning)
		ofPending := terminalTasks(t, s, b, 1, store.TaskCompleted, old)[0]
		createScan(t, b, "pending", ofPending)
		ofDone := terminalTasks(t, s, b, 1, store.TaskCompleted, old)[0]
		createScan(t, b, "completed", ofDone)

		res := prune(t, s, pruneParams(100))
		require.Equal(t, store.PruneResult{Tasks: 5, Attempts: 2}, res)

		for _, id := range []uuid.UUID{oldCompleted.ID, oldFailed.ID, oldCancelled.ID, noCompletedAt, ofDone} {
			require.False(t, taskExists(t, b.pool, id), "old terminal task %s is pruned", id)
		}
		for _, id := range []uuid.UUID{newCompleted.ID, oldRunning.ID, oldRetry.ID, oldPending.ID, oldCancelling, ofRunning, ofPending} {
			require.True(t, taskExists(t, b.pool, id), "task %s stays", id)
		}
		require.Equal(t, store.PruneResult{}, prune(t, s, pruneParams(100)), "nothing left to prune")

		// Zero retention keeps tasks forever.
		backdateTask(t, b.pool, newCompleted.ID, 365*day)
		require.Equal(t, store.PruneResult{}, prune(t, s, store.PruneParams{}))
		require.True(t, taskExists(t, b.pool, newCompleted.ID))
	})

	t.Run("CascadesButKeepsFiles", func(t *testing.T) {
		t.Parallel()
		s, b := setupStore(t)
		task, l := finishedTask(t, s, b, store.AttemptSucceeded)
		exec(t, b.pool, `INSERT INTO worker_result_batches (task_id, attempt_id, sequence_number, idempotency_key, payload_sha256)
			VALUES ($1, $2, 1, 'k1', 'x')`, task.ID, l.AttemptID)
		exec(t, b.pool, `INSERT INTO attempt_logs (attempt_id, byte_offset, data) VALUES ($1, 0, 'hello')`, l.AttemptID)
		insertUpload(t, b, task.ID, l.AttemptID, "committed", -time.Hour)
		insertUpload(t, b, task.ID, l.AttemptID, "expired", time.Hour)
		var fileID uuid.UUID
		require.NoError(t, b.pool.QueryRow(t.Context(), `
			INSERT INTO files (organization_id, name, size_bytes, sha256, object_key, task_id, attempt_id)
			VALUES ($1, 'a.txt', 5, 'x', $2, $3, $4) RETURNING id`, b.org.ID, uuid.NewString(), task.ID, l.AttemptID).Scan(&fileID))
		// A second, young task keeps all of its rows.
		young, yl := finishedTask(t, s, b, store.AttemptSucceeded)
		exec(t, b.pool, `INSERT INTO attempt_logs (attempt_id, byte_offset, data) VALUES ($1, 0, 'hi')`, yl.AttemptID)

		backdateTask(t, b.pool, task.ID, 31*day)
		res := prune(t, s, pruneParams(100))
		require.Equal(t, 1, res.Tasks)
		require.Equal(t, 1, res.Attempts)
		require.Zero(t, res.Uploads, "the task's young expired session went with it by cascade")

		require.Zero(t, countAttempts(t, b.pool, "task_id = $1", task.ID))
		require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM worker_result_batches WHERE attempt_id = $1`, l.AttemptID))
		require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM attempt_logs WHERE attempt_id = $1`, l.AttemptID))
		require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM worker_artifact_uploads WHERE attempt_id = $1`, l.AttemptID))
		var fileTask, fileAttempt *uuid.UUID
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT task_id, attempt_id FROM files WHERE id = $1`, fileID).Scan(&fileTask, &fileAttempt))
		require.Nil(t, fileTask, "the file stays, detached from its pruned task")
		require.Nil(t, fileAttempt)

		require.True(t, taskExists(t, b.pool, young.ID))
		require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM attempt_logs WHERE attempt_id = $1`, yl.AttemptID))
	})

	t.Run("OpenUploadHoldsTask", func(t *testing.T) {
		t.Parallel()
		s, b := setupStore(t)
		task, l := finishedTask(t, s, b, store.AttemptSucceeded)
		up := insertUpload(t, b, task.ID, l.AttemptID, "prepared", 31*day)
		backdateTask(t, b.pool, task.ID, 31*day)

		require.Zero(t, prune(t, s, pruneParams(100)).Tasks, "the upload sweeper must expire the session first")
		exec(t, b.pool, `UPDATE worker_artifact_uploads SET status = 'expired' WHERE id = $1`, up)
		res := prune(t, s, pruneParams(100))
		require.Equal(t, 1, res.Tasks)
		require.False(t, taskExists(t, b.pool, task.ID))
	})

	t.Run("UploadsAndAudit", func(t *testing.T) {
		t.Parallel()
		s, b := setupStore(t)
		createTask(t, s, b.org.ID, store.CreateTaskParams{})
		l := acquireOne(t, s, b.worker.ID)
		task := l.Task.ID
		oldExpired := insertUpload(t, b, task, l.AttemptID, "expired", 8*day)
		oldFailed := insertUpload(t, b, task, l.AttemptID, "failed", 8*day)
		newExpired := insertUpload(t, b, task, l.AttemptID, "expired", 6*day)
		oldPrepared := insertUpload(t, b, task, l.AttemptID, "prepared", 8*day)
		oldCommitted := insertUpload(t, b, task, l.AttemptID, "committed", 8*day)

		for range 3 {
			require.NoError(t, s.RecordAudit(t.Context(), store.AuditEvent{ActorType: "system", Action: "test.old"}))
		}
		require.NoError(t, s.RecordAudit(t.Context(), store.AuditEvent{ActorType: "system", Action: "test.new"}))
		exec(t, b.pool, `UPDATE audit_events SET occurred_at = now() - interval '91 days' WHERE action = 'test.old'`)

		// Audit retention 0 keeps every event.
		p := pruneParams(100)
		p.AuditRetention = 0
		res := prune(t, s, p)
		require.Equal(t, store.PruneResult{Uploads: 2}, res)
		require.Equal(t, 4, countRows(t, b.pool, `SELECT count(*) FROM audit_events`))
		uploads := countRows(t, b.pool, `SELECT count(*) FROM worker_artifact_uploads WHERE id = ANY($1)`,
			[]uuid.UUID{newExpired, oldPrepared, oldCommitted})
		require.Equal(t, 3, uploads, "young, open and committed sessions stay")
		require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM worker_artifact_uploads WHERE id = ANY($1)`,
			[]uuid.UUID{oldExpired, oldFailed}))

		res = prune(t, s, pruneParams(100))
		require.Equal(t, store.PruneResult{AuditEvents: 3}, res)
		require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM audit_events WHERE action = 'test.new'`))
		require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM audit_events`))
		require.True(t, taskExists(t, b.pool, task), "a running task is never pruned")
	})

	t.Run("BatchBound", func(t *testing.T) {
		t.Parallel()
		s, b := setupStore(t)
		ids := terminalTasks(t, s, b, 5, store.TaskCompleted, 31*day)
		for range 3 {
			require.NoError(t, s.RecordAudit(t.Context(), store.AuditEvent{ActorType: "system", Action: "test.old"}))
		}
		exec(t, b.pool, `UPDATE audit_events SET occurred_at = now() - interval '91 days'`)

		res := prune(t, s, pruneParams(2))
		require.Equal(t, store.PruneResult{Tasks: 2, AuditEvents: 2, More: true}, res)
		res = prune(t, s, pruneParams(2))
		require.Equal(t, store.PruneResult{Tasks: 2, AuditEvents: 1, More: true}, res)
		res = prune(t, s, pruneParams(2))
		require.Equal(t, store.PruneResult{Tasks: 1}, res)
		require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM worker_tasks WHERE id = ANY($1)`, ids))
		require.Equal(t, store.PruneResult{}, prune(t, s, pruneParams(2)))
	})

	t.Run("ConcurrentCallsShareTheWork", func(t *testing.T) {
		t.Parallel()
		s, b := setupStore(t)
		const nTasks = 60
		terminalTasks(t, s, b, nTasks/3, store.TaskCompleted, 31*day)
		terminalTasks(t, s, b, nTasks/3, store.TaskCancelled, 31*day)
		terminalTasks(t, s, b, nTasks/3, store.TaskFailedTerminal, 31*day)
		keep := terminalTasks(t, s, b, 5, store.TaskCompleted, day)
		_, l := finishedTask(t, s, b, store.AttemptSucceeded)
		backdateTask(t, b.pool, l.Task.ID, 31*day)
		const nEvents = 40
		for range nEvents {
			require.NoError(t, s.RecordAudit(t.Context(), store.AuditEvent{ActorType: "system", Action: "test.old"}))
		}
		exec(t, b.pool, `UPDATE audit_events SET occurred_at = now() - interval '91 days'`)

		const workers = 4
		var (
			mu    sync.Mutex
			total store.PruneResult
			wg    sync.WaitGroup
			errs  = make(chan error, workers)
		)
		for range workers {
			wg.Go(func() {
				for {
					res, err := s.Prune(t.Context(), pruneParams(7))
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					total.Tasks += res.Tasks
					total.Attempts += res.Attempts
					total.AuditEvents += res.AuditEvents
					mu.Unlock()
					if !res.More && res.Tasks == 0 && res.AuditEvents == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, store.PruneResult{Tasks: nTasks + 1, Attempts: 1, AuditEvents: nEvents}, total,
			"every row deleted once, none counted twice")
		require.Equal(t, store.PruneResult{}, prune(t, s, pruneParams(7)))
		require.Equal(t, len(keep), countRows(t, b.pool, `SELECT count(*) FROM worker_tasks`))
		require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM audit_events`))
	})
}
