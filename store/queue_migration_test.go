package store_test

import (
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store"
)

// taskQueueMigration is the migration that moved leasable tasks into
// worker_task_queue.
const taskQueueMigration = 12

// TestTaskQueueMigrationMovesLiveData migrates a database holding tasks in
// every state the queue cares about while leases are held: the queued
// tasks (due, retrying, scheduled for later) land in the queue and are
// leased afterwards in their order; the leases held across the upgrade
// still heartbeat and complete, and a failed one queues its task again.
func TestTaskQueueMigrationMovesLiveData(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, oldPool := beforeMigration(t, taskQueueMigration)
	old := store.New(oldPool) // only for tables the migration leaves alone
	org := createOldOrg(t, oldPool, "org-a")
	worker := createOldWorker(t, oldPool, 4)
	assign(t, old, org.ID, worker.ID)

	// As that schema's gateway left them: inserted, then moved by SQL.
	task := func(state, availableIn string, priority int) uuid.UUID {
		var id uuid.UUID
		require.NoError(t, oldPool.QueryRow(ctx, `INSERT INTO worker_tasks
			(task_type, organization_id, payload, state, available_at, priority, attempt_count, attempts_started)
			VALUES ('scanner_plugin', $1, '{"plugin": "echo"}', $2, now() + $3::interval, $4,
				CASE WHEN $2 = 'pending' THEN 0 ELSE 1 END, CASE WHEN $2 = 'pending' THEN 0 ELSE 1 END)
			RETURNING id`, org.ID, state, availableIn, priority).Scan(&id))
		return id
	}
	attempt := func(taskID uuid.UUID, status, token string) uuid.UUID {
		hash := sha256.Sum256([]byte(token))
		var id uuid.UUID
		require.NoError(t, oldPool.QueryRow(ctx, `INSERT INTO worker_task_attempts
			(task_id, worker_id, organization_id, attempt_number, lease_token_hash, status, lease_expires_at, deadline_at)
			VALUES ($1, $2, $3, 1, $4, $5, now() + interval '10 minutes', now() + interval '1 hour')
			RETURNING id`, taskID, worker.ID, org.ID, hash[:], status).Scan(&id))
		return id
	}
	due := task("pending", "-1 second", 0)
	urgent := task("pending", "-1 second", 5)
	retrying := task("retry_wait", "-1 second", 0)
	later := task("pending", "1 hour", 9)
	finished := task("completed", "-1 hour", 0)
	leasedTask, runningTask := task("leased", "-1 minute", 0), task("running", "-1 minute", 0)
	leasedToken, runningToken := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	leasedAttempt := attempt(leasedTask, "leased", leasedToken)
	runningAttempt := attempt(runningTask, "running", runningToken)
	oldPool.Close()

	require.NoError(t, migrations.Up(ctx, url))
	pool, err := store.OpenPool(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := store.New(pool)

	requireQueueFollowsTasks(t, pool)
	var queued []uuid.UUID
	rows, err := pool.Query(ctx, `SELECT task_id FROM worker_task_queue ORDER BY task_id`)
	require.NoError(t, err)
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		queued = append(queued, id)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, []uuid.UUID{due, urgent, retrying, later}, queued, "the queued tasks, and only those, were moved")
	require.NotContains(t, queued, finished)

	// The leases held across the upgrade still heartbeat and complete.
	leasedRef := store.AttemptRef{WorkerID: worker.ID, AttemptID: leasedAttempt, LeaseToken: leasedToken}
	runningRef := store.AttemptRef{WorkerID: worker.ID, AttemptID: runningAttempt, LeaseToken: runningToken}
	for _, ref := range []store.AttemptRef{leasedRef, runningRef} {
		st, err := s.HeartbeatAttempt(ctx, ref)
		require.NoError(t, err)
		require.Equal(t, store.LeaseActive, st.State)
	}
	res, err := s.CompleteAttempt(ctx, store.CompleteParams{AttemptRef: leasedRef, Outcome: store.AttemptSucceeded})
	require.NoError(t, err)
	require.Equal(t, store.TaskCompleted, res.TaskState)
	res, err = s.CompleteAttempt(ctx, store.CompleteParams{AttemptRef: runningRef, Outcome: store.AttemptFailed,
		ErrorCode: "boom", Retryable: true})
	require.NoError(t, err)
	require.Equal(t, store.TaskRetryWait, res.TaskState, "a failed lease from before the upgrade queues its task again")
	requireQueueFollowsTasks(t, pool)
	// Its backoff is full jitter, which may be near zero: put it an hour
	// out so that it is surely not due below.
	anHourOut := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	exec(t, pool, `UPDATE worker_tasks SET available_at = $2 WHERE id = $1`, runningTask, anHourOut)
	exec(t, pool, `UPDATE worker_task_queue SET available_at = $2 WHERE task_id = $1`, runningTask, anHourOut)

	// The moved tasks lease in their order: priority first; the one
	// scheduled for later and the fresh retry are not due.
	got, err := s.AcquireLeases(ctx, store.AcquireParams{WorkerID: worker.ID, MaxTasks: 4})
	require.NoError(t, err)
	var leased []uuid.UUID
	for _, l := range got.Leases {
		leased = append(leased, l.Task.ID)
	}
	require.Len(t, leased, 3)
	require.Equal(t, urgent, leased[0], "priority first")
	require.ElementsMatch(t, []uuid.UUID{urgent, due, retrying}, leased)
	requireQueueFollowsTasks(t, pool)
}

// requireQueueFollowsTasks checks the queue's rule (store/internal/core/queue.go).
func requireQueueFollowsTasks(t *testing.T, pool *pgxpool.Pool, where ...any) {
	t.Helper()
	var mismatches int
	require.NoError(t, pool.QueryRow(t.Context(), store.QueueMismatchSQL).Scan(&mismatches))
	require.Zero(t, mismatches, "%v: tasks whose queue row does not follow their state", where)
}
