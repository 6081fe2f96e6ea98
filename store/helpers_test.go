package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/store/storetest"
)

// onlineWindow is the "seen recently" window the tests pass to the store.
const onlineWindow = time.Minute

// testBundle is what most tests need besides the store: the pool for direct
// SQL (backdating rows, reading them back), and one organization with one
// assigned scanner worker.
type testBundle struct {
	pool   *pgxpool.Pool
	org    store.Organization
	worker store.Worker
}

// setupStore gives a store on a fresh database holding one organization and
// one scanner worker (capacity 4) assigned to it.
func setupStore(t *testing.T) (*store.Store, *testBundle) {
	t.Helper()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	org := createOrg(t, s, "org-a")
	w := createWorker(t, s, pool, workerOpts{Capacity: 4})
	assign(t, s, org.ID, w.ID)
	return s, &testBundle{pool: pool, org: org, worker: w}
}

var nameSeq atomic.Int64

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, nameSeq.Add(1))
}

func createOrg(t *testing.T, s *store.Store, name string) store.Organization {
	t.Helper()
	o, err := s.CreateOrganization(t.Context(), store.EveryOrganization(), uniqueName(name), store.ScopePolicyUnrestricted)
	require.NoError(t, err)
	return o
}

type workerOpts struct {
	Type         string // default "scanner"
	Capacity     int    // default 1
	Capabilities string // JSON object; default none
}

// createWorker creates a worker through the store. Capabilities are a
// worker's own advertisement (there is no admin verb for them), so they are
// written by SQL without touching last_seen_at: the worker stays "never seen".
func createWorker(t *testing.T, s *store.Store, pool *pgxpool.Pool, o workerOpts) store.Worker {
	t.Helper()
	if o.Type == "" {
		o.Type = "scanner"
	}
	w, err := s.CreateWorker(t.Context(), store.EveryOrganization(), store.CreateWorkerParams{
		Name: uniqueName("worker"), WorkerType: o.Type, MaxConcurrentTasks: o.Capacity,
	}, onlineWindow)
	require.NoError(t, err)
	if o.Capabilities != "" {
		_, err := pool.Exec(t.Context(), `UPDATE workers SET capabilities = $2::jsonb WHERE id = $1`, w.ID, o.Capabilities)
		require.NoError(t, err)
		w.Capabilities = json.RawMessage(o.Capabilities)
	}
	return w
}

// createOldOrg inserts an organization in a schema of an earlier
// migration, which CreateOrganization (written for the latest) may not fit.
func createOldOrg(t *testing.T, pool *pgxpool.Pool, name string) store.Organization {
	t.Helper()
	var o store.Organization
	require.NoError(t, pool.QueryRow(t.Context(), `INSERT INTO organizations (name) VALUES ($1) RETURNING id, name, created_at`,
		uniqueName(name)).Scan(&o.ID, &o.Name, &o.CreatedAt))
	return o
}

// beforeMigration is a new database migrated up to just before migration
// n, for a test that moves data across n: its URL and a pool on it, closed
// when the test ends if the test did not close it first.
func beforeMigration(t *testing.T, n uint) (url string, pool *pgxpool.Pool) {
	t.Helper()
	url = storetest.NewEmptyDatabase(t)
	before, err := migrations.Previous(n)
	require.NoError(t, err)
	require.NoError(t, migrations.UpTo(t.Context(), url, before))
	pool, err = store.OpenPool(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return url, pool
}

// createOldWorker creates a worker by SQL, for the migration tests that
// run on an older schema than the store's code reads (workers have had
// these columns from the start).
func createOldWorker(t *testing.T, pool *pgxpool.Pool, capacity int) store.Worker {
	t.Helper()
	var w store.Worker
	require.NoError(t, pool.QueryRow(t.Context(), `INSERT INTO workers (name, worker_type, max_concurrent_tasks)
		VALUES ($1, 'scanner', $2) RETURNING id`, uniqueName("worker"), capacity).Scan(&w.ID))
	w.MaxConcurrentTasks = capacity
	return w
}

func assign(t *testing.T, s *store.Store, org, worker uuid.UUID) {
	t.Helper()
	_, err := s.AssignWorker(t.Context(), store.EveryOrganization(), org, worker)
	require.NoError(t, err)
}

// createTask creates a scanner_plugin task of org unless p says otherwise.
func createTask(t *testing.T, s *store.Store, org uuid.UUID, p store.CreateTaskParams) store.Task {
	t.Helper()
	p.OrganizationID = org
	if p.TaskType == "" {
		p.TaskType = "scanner_plugin"
	}
	task, replayed, err := s.CreateTask(t.Context(), store.EveryOrganization(), p)
	require.NoError(t, err)
	require.False(t, replayed)
	return task
}

func createTasks(t *testing.T, s *store.Store, org uuid.UUID, n int, p store.CreateTaskParams) []store.Task {
	t.Helper()
	tasks := make([]store.Task, n)
	for i := range tasks {
		tasks[i] = createTask(t, s, org, p)
	}
	return tasks
}

func acquire(t *testing.T, s *store.Store, worker uuid.UUID, maxTasks int) store.AcquireResult {
	t.Helper()
	res, err := s.AcquireLeases(t.Context(), store.AcquireParams{WorkerID: worker, MaxTasks: maxTasks})
	require.NoError(t, err)
	return res
}

// acquireOne leases exactly one task.
func acquireOne(t *testing.T, s *store.Store, worker uuid.UUID) store.Lease {
	t.Helper()
	res := acquire(t, s, worker, 1)
	require.Len(t, res.Leases, 1)
	return res.Leases[0]
}

func refOf(worker uuid.UUID, l store.Lease) store.AttemptRef {
	return store.AttemptRef{WorkerID: worker, AttemptID: l.AttemptID, LeaseToken: l.LeaseToken}
}

func complete(t *testing.T, s *store.Store, ref store.AttemptRef, outcome store.AttemptStatus, retryable bool) store.CompleteResult {
	t.Helper()
	p := store.CompleteParams{AttemptRef: ref, Outcome: outcome, Retryable: retryable}
	if outcome == store.AttemptFailed {
		p.ErrorCode, p.ErrorMessage = "boom", "it broke"
	}
	res, err := s.CompleteAttempt(t.Context(), p)
	require.NoError(t, err)
	require.False(t, res.Replayed)
	return res
}

func getTask(t *testing.T, s *store.Store, id uuid.UUID) store.Task {
	t.Helper()
	task, _, err := s.GetTask(t.Context(), store.EveryOrganization(), id, onlineWindow)
	require.NoError(t, err)
	return task
}

func taskState(t *testing.T, s *store.Store, id uuid.UUID) store.TaskState {
	t.Helper()
	return getTask(t, s, id).State
}

func attemptStatus(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) store.AttemptStatus {
	t.Helper()
	var status string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT status FROM worker_task_attempts WHERE id = $1`, id).Scan(&status))
	return store.AttemptStatus(status)
}

// rowJSON reads a whole row as canonical JSON text, so a test can assert that
// a refused write left every column as it was.
func rowJSON(t *testing.T, pool *pgxpool.Pool, table string, id uuid.UUID) string {
	t.Helper()
	var row string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT to_jsonb(r)::text FROM `+table+` r WHERE r.id = $1`, id).Scan(&row))
	return row
}

// rowsSnapshot is an attempt's and its task's rows, read back whole.
type rowsSnapshot struct{ attempt, task string }

func snapshot(t *testing.T, pool *pgxpool.Pool, attemptID, taskID uuid.UUID) rowsSnapshot {
	t.Helper()
	return rowsSnapshot{attempt: rowJSON(t, pool, "worker_task_attempts", attemptID), task: rowJSON(t, pool, "worker_tasks", taskID)}
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
}

// editTasks is storetest.EditTasks.
func editTasks(t *testing.T, pool *pgxpool.Pool, update string, args ...any) []uuid.UUID {
	t.Helper()
	return storetest.EditTasks(t, pool, update, args...)
}

// expireLease simulates the lease running out: its expiry moves into the past.
func expireLease(t *testing.T, pool *pgxpool.Pool, attemptID uuid.UUID) {
	t.Helper()
	exec(t, pool, `UPDATE worker_task_attempts SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, attemptID)
}

// makeDue simulates a retry backoff or schedule running out.
func makeDue(t *testing.T, pool *pgxpool.Pool, taskID uuid.UUID) {
	t.Helper()
	editTasks(t, pool, `UPDATE worker_tasks SET available_at = now() - interval '1 second' WHERE id = $1`, taskID)
}

func sweep(t *testing.T, s *store.Store) store.SweepResult {
	t.Helper()
	res, err := s.SweepExpired(t.Context(), 100)
	require.NoError(t, err)
	return res
}

func countAttempts(t *testing.T, pool *pgxpool.Pool, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM worker_task_attempts WHERE `+where, args...).Scan(&n))
	return n
}

func leaseTaskIDs(leases []store.Lease) []uuid.UUID {
	ids := make([]uuid.UUID, len(leases))
	for i, l := range leases {
		ids[i] = l.Task.ID
	}
	return ids
}

func withTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
