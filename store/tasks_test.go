package store_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store"
)

func TestCreateTaskIdempotency(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*store.Store, *testBundle) {
		t.Helper()
		return setupStore(t)
	}

	params := func(org uuid.UUID, key, sum string) store.CreateTaskParams {
		return store.CreateTaskParams{
			OrganizationID: org, TaskType: "scanner_plugin", Payload: json.RawMessage(`{"n":1}`),
			IdempotencyKey: key, RequestSHA256: sum,
		}
	}
	countTasks := func(t *testing.T, b *testBundle) int {
		t.Helper()
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM worker_tasks`).Scan(&n))
		return n
	}

	t.Run("SameKeySameChecksumReplays", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		first, replayed, err := s.CreateTask(t.Context(), store.EveryOrganization(), params(b.org.ID, "k1", "sum-a"))
		require.NoError(t, err)
		require.False(t, replayed)

		again, replayed, err := s.CreateTask(t.Context(), store.EveryOrganization(), params(b.org.ID, "k1", "sum-a"))
		require.NoError(t, err)
		require.True(t, replayed)
		require.Equal(t, first.ID, again.ID)
		require.Equal(t, first.CreatedAt, again.CreatedAt)
		require.Equal(t, 1, countTasks(t, b))
	})

	t.Run("SameKeyOtherChecksumRefused", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		first, _, err := s.CreateTask(t.Context(), store.EveryOrganization(), params(b.org.ID, "k1", "sum-a"))
		require.NoError(t, err)
		before := rowJSON(t, b.pool, "worker_tasks", first.ID)

		task, replayed, err := s.CreateTask(t.Context(), store.EveryOrganization(), params(b.org.ID, "k1", "sum-b"))
		require.ErrorIs(t, err, store.ErrIdempotencyKeyReused)
		require.False(t, replayed)
		require.Zero(t, task)
		require.Equal(t, before, rowJSON(t, b.pool, "worker_tasks", first.ID))
		require.Equal(t, 1, countTasks(t, b))
	})

	t.Run("KeysArePerOrganization", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		orgB := createOrg(t, s, "org-b")
		a, _, err := s.CreateTask(t.Context(), store.EveryOrganization(), params(b.org.ID, "k1", "sum-a"))
		require.NoError(t, err)
		other, replayed, err := s.CreateTask(t.Context(), store.EveryOrganization(), params(orgB.ID, "k1", "sum-b"))
		require.NoError(t, err)
		require.False(t, replayed)
		require.NotEqual(t, a.ID, other.ID)
	})

	t.Run("UnknownOrganization", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		task, _, err := s.CreateTask(t.Context(), store.EveryOrganization(), params(uuid.New(), "", ""))
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, task)
	})

	t.Run("ConcurrentSameKeyCreatesOneTask", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		const n = 16
		type result struct {
			id       uuid.UUID
			replayed bool
			err      error
		}
		results := make([]result, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				task, replayed, err := s.CreateTask(t.Context(), store.EveryOrganization(), params(b.org.ID, "race", "sum-a"))
				results[i] = result{task.ID, replayed, err}
			})
		}
		wg.Wait()
		created := 0
		for _, r := range results {
			require.NoError(t, r.err)
			require.Equal(t, results[0].id, r.id)
			if !r.replayed {
				created++
			}
		}
		require.Equal(t, 1, created)
		require.Equal(t, 1, countTasks(t, b))
	})

	t.Run("ConcurrentSameKeyOtherChecksums", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, _, errs[i] = s.CreateTask(t.Context(), store.EveryOrganization(), params(b.org.ID, "race", fmt.Sprintf("sum-%d", i)))
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
				continue
			}
			require.ErrorIs(t, err, store.ErrIdempotencyKeyReused)
		}
		require.Equal(t, 1, ok)
		require.Equal(t, 1, countTasks(t, b))
	})
}

func TestListTasksPagination(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	orgB := createOrg(t, s, "org-b")
	var want []uuid.UUID // newest first
	for _, task := range createTasks(t, s, b.org.ID, 7, store.CreateTaskParams{}) {
		want = append([]uuid.UUID{task.ID}, want...)
	}
	createTasks(t, s, orgB.ID, 3, store.CreateTaskParams{})

	var (
		got   []uuid.UUID
		after *store.Cursor
		pages int
	)
	for {
		page, next, err := s.ListTasks(t.Context(), store.OneOrganization(b.org.ID), store.ListTasksParams{After: after, Limit: 3})
		require.NoError(t, err)
		pages++
		for _, task := range page {
			require.Equal(t, b.org.ID, task.OrganizationID)
			got = append(got, task.ID)
		}
		if next == nil {
			break
		}
		require.Len(t, page, 3)
		// The cursor travels as an opaque string.
		after, err = store.DecodeCursor(next.Encode())
		require.NoError(t, err)
	}
	require.Equal(t, 3, pages)
	require.Equal(t, want, got, "every task once, newest first, no gaps")

	all, _, err := s.ListTasks(t.Context(), store.EveryOrganization(), store.ListTasksParams{Limit: 100})
	require.NoError(t, err)
	require.Len(t, all, 10)

	cross, _, err := s.ListTasks(t.Context(), store.OneOrganization(b.org.ID), store.ListTasksParams{OrganizationID: &orgB.ID, Limit: 100})
	require.NoError(t, err)
	require.Empty(t, cross, "a filter cannot widen the scope")

	_, err = store.DecodeCursor("not a cursor!")
	require.ErrorIs(t, err, store.ErrInvalid)
}

func TestOrganizationScope(t *testing.T) {
	t.Parallel()

	type scopeBundle struct {
		*testBundle
		orgB    store.Organization
		workerB store.Worker
		taskA   store.Task
		taskB   store.Task
		tenantA store.Tenant
	}
	setup := func(t *testing.T) (*store.Store, *scopeBundle) {
		t.Helper()
		s, b := setupStore(t)
		orgB := createOrg(t, s, "org-b")
		workerB := createWorker(t, s, b.pool, workerOpts{})
		assign(t, s, orgB.ID, workerB.ID)
		return s, &scopeBundle{
			testBundle: b, orgB: orgB, workerB: workerB,
			taskA:   createTask(t, s, b.org.ID, store.CreateTaskParams{}),
			taskB:   createTask(t, s, orgB.ID, store.CreateTaskParams{}),
			tenantA: store.OneOrganization(b.org.ID),
		}
	}

	t.Run("Tasks", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		task, attempts, err := s.GetTask(t.Context(), b.tenantA, b.taskB.ID, onlineWindow)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, task)
		require.Nil(t, attempts)
		_, _, err = s.GetTask(t.Context(), b.tenantA, b.taskA.ID, onlineWindow)
		require.NoError(t, err)

		list, _, err := s.ListTasks(t.Context(), b.tenantA, store.ListTasksParams{Limit: 100})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, b.taskA.ID, list[0].ID)

		before := rowJSON(t, b.pool, "worker_tasks", b.taskB.ID)
		task, err = s.CancelTask(t.Context(), b.tenantA, b.taskB.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, task)
		task, err = s.RetryTask(t.Context(), b.tenantA, b.taskB.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, task)
		require.Equal(t, before, rowJSON(t, b.pool, "worker_tasks", b.taskB.ID))
	})

	t.Run("Workers", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		list, _, err := s.ListWorkers(t.Context(), b.tenantA, nil, 100, onlineWindow)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, b.worker.ID, list[0].ID)
		w, err := s.GetWorker(t.Context(), b.tenantA, b.workerB.ID, onlineWindow)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, w)

		all, _, err := s.ListWorkers(t.Context(), store.EveryOrganization(), nil, 100, onlineWindow)
		require.NoError(t, err)
		require.Len(t, all, 2)

		a, err := s.AssignWorker(t.Context(), b.tenantA, b.orgB.ID, b.worker.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, a)
		a, err = s.UnassignWorker(t.Context(), b.tenantA, b.orgB.ID, b.workerB.ID, true, "x")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, a)
	})

	t.Run("Organizations", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		list, next, err := s.ListOrganizations(t.Context(), b.tenantA, nil, 100)
		require.NoError(t, err)
		require.Nil(t, next)
		require.Len(t, list, 1)
		require.Equal(t, b.org.ID, list[0].ID)
		o, err := s.GetOrganization(t.Context(), b.tenantA, b.orgB.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Zero(t, o)
		o, err = s.GetOrganization(t.Context(), b.tenantA, b.org.ID)
		require.NoError(t, err)
		require.Equal(t, b.org.ID, o.ID)

		all, _, err := s.ListOrganizations(t.Context(), store.EveryOrganization(), nil, 100)
		require.NoError(t, err)
		require.Len(t, all, 2)
	})
}

func TestPendingReason(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*store.Store, *testBundle) {
		t.Helper()
		return setupStore(t)
	}
	reason := func(t *testing.T, s *store.Store, id uuid.UUID) string {
		t.Helper()
		task := getTask(t, s, id)
		require.Contains(t, []store.TaskState{store.TaskPending, store.TaskRetryWait}, task.State)
		return task.PendingReason
	}

	t.Run("NoAssignedWorker", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		orgC := createOrg(t, s, "org-c")
		require.Equal(t, "no_assigned_worker", reason(t, s, createTask(t, s, orgC.ID, store.CreateTaskParams{}).ID))
		// A worker of the wrong type does not count.
		require.Equal(t, "no_assigned_worker", reason(t, s, createTask(t, s, b.org.ID, store.CreateTaskParams{TaskType: "ai"}).ID))
		// Nor does a disabled one.
		_, err := s.UpdateWorker(t.Context(), store.EveryOrganization(), b.worker.ID, store.UpdateWorkerParams{Enabled: new(false)}, onlineWindow)
		require.NoError(t, err)
		require.Equal(t, "no_assigned_worker", reason(t, s, createTask(t, s, b.org.ID, store.CreateTaskParams{}).ID))
	})

	t.Run("NoOnlineWorker", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// The worker was created and assigned but never polled.
		require.Equal(t, "no_online_worker", reason(t, s, createTask(t, s, b.org.ID, store.CreateTaskParams{}).ID))

		// Seen, but longer ago than the online window.
		acquire(t, s, b.worker.ID, 1)
		exec(t, b.pool, `UPDATE workers SET last_seen_at = now() - interval '1 hour' WHERE id = $1`, b.worker.ID)
		require.Equal(t, "no_online_worker", reason(t, s, createTask(t, s, b.org.ID, store.CreateTaskParams{Priority: -1}).ID))
	})

	t.Run("CapabilityMismatch", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		require.Empty(t, acquire(t, s, b.worker.ID, 1).Leases) // the worker is now online
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{RequiredCapabilities: json.RawMessage(`{"gpu":true}`)})
		require.Equal(t, "capability_mismatch", reason(t, s, task.ID))
	})

	t.Run("CapacityFull", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createTasks(t, s, b.org.ID, 4, store.CreateTaskParams{})
		require.Len(t, acquire(t, s, b.worker.ID, 4).Leases, 4)
		require.Equal(t, "capacity_full", reason(t, s, createTask(t, s, b.org.ID, store.CreateTaskParams{}).ID))
	})

	t.Run("ScheduledLater", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		require.Equal(t, "scheduled_later", reason(t, s, createTask(t, s, b.org.ID, store.CreateTaskParams{Delay: time.Hour}).ID))
	})

	t.Run("RetryBackoff", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{RetryBaseSeconds: 3600, RetryMaxSeconds: 3600})
		l := acquireOne(t, s, b.worker.ID)
		complete(t, s, refOf(b.worker.ID, l), store.AttemptFailed, true)
		// Full jitter may draw a delay near zero; pin it in the future.
		editTasks(t, b.pool, `UPDATE worker_tasks SET available_at = now() + interval '1 hour' WHERE id = $1`, task.ID)
		require.Equal(t, "retry_backoff", reason(t, s, task.ID))
	})

	t.Run("PluginNotAdvertised", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		exec(t, b.pool, `UPDATE workers SET capabilities = '{"plugins": ["echo"]}' WHERE id = $1`, b.worker.ID)
		nmap := createTask(t, s, b.org.ID, store.CreateTaskParams{Payload: json.RawMessage(`{"plugin": "nmap"}`)})
		require.Equal(t, "plugin_not_advertised", reason(t, s, nmap.ID))
		// A worker of another organization that has it does not count.
		orgC := createOrg(t, s, "org-c")
		other := createWorker(t, s, b.pool, workerOpts{Capabilities: `{"plugins": ["nmap"]}`})
		assign(t, s, orgC.ID, other.ID)
		require.Equal(t, "plugin_not_advertised", reason(t, s, nmap.ID))
		// The advertised plugin is only waiting for the worker to come online.
		echo := createTask(t, s, b.org.ID, store.CreateTaskParams{Payload: json.RawMessage(`{"plugin": "echo"}`)})
		require.Equal(t, "no_online_worker", reason(t, s, echo.ID))
		// One assigned worker that has it is enough.
		assign(t, s, b.org.ID, other.ID)
		require.Equal(t, "no_online_worker", reason(t, s, nmap.ID))
	})

	t.Run("PluginOfAWorkerThatAdvertisesNone", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// No "plugins" capability says nothing either way (it has not polled).
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{Payload: json.RawMessage(`{"plugin": "nmap"}`)})
		require.Equal(t, "no_online_worker", reason(t, s, task.ID))
	})

	t.Run("NotWhileLeased", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		task := createTask(t, s, b.org.ID, store.CreateTaskParams{})
		acquireOne(t, s, b.worker.ID)
		require.Empty(t, getTask(t, s, task.ID).PendingReason)
	})
}

func TestNotifications(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := withTimeout(t, 30*time.Second)

	listener, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	t.Cleanup(func() { _ = listener.Close(ctx) })
	_, err = listener.Exec(ctx, `LISTEN `+store.NotifyChannel)
	require.NoError(t, err)

	next := func(t *testing.T) store.Wakeup {
		t.Helper()
		n, err := listener.WaitForNotification(ctx)
		require.NoError(t, err)
		require.Equal(t, store.NotifyChannel, n.Channel)
		w, err := store.ParseWakeup(n.Payload)
		require.NoError(t, err)
		return w
	}

	createTask(t, s, b.org.ID, store.CreateTaskParams{})
	require.Equal(t, store.Wakeup{Kind: store.WakeOrganization, Organization: b.org.ID, Count: 1}, next(t))

	// A transaction that rolls back notifies nobody. A deferred constraint
	// trigger makes CreateTask's commit fail after its NOTIFY was queued.
	orgB := createOrg(t, s, "org-b")
	exec(t, b.pool, `CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused at commit'; END $$`)
	exec(t, b.pool, fmt.Sprintf(`CREATE CONSTRAINT TRIGGER fail_org_b AFTER INSERT ON worker_tasks
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.organization_id = '%s')
		EXECUTE FUNCTION fail_at_commit()`, orgB.ID))
	_, _, err = s.CreateTask(t.Context(), store.EveryOrganization(), store.CreateTaskParams{OrganizationID: orgB.ID, TaskType: "scanner_plugin"})
	require.ErrorContains(t, err, "refused at commit")
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM worker_tasks WHERE organization_id = $1`, orgB.ID).Scan(&n))
	require.Zero(t, n)

	// Notifications arrive in commit order: the next one is this task's, so
	// the rolled-back one was never delivered.
	createTask(t, s, b.org.ID, store.CreateTaskParams{})
	require.Equal(t, store.Wakeup{Kind: store.WakeOrganization, Organization: b.org.ID, Count: 1}, next(t))

	// A delayed task announces its delay instead.
	createTask(t, s, b.org.ID, store.CreateTaskParams{Delay: 90 * time.Second})
	require.Equal(t, store.Wakeup{Kind: store.WakeOrganizationAt, Organization: b.org.ID, Delay: 90 * time.Second}, next(t))

	// An idempotent replay created nothing and wakes nobody.
	p := store.CreateTaskParams{OrganizationID: b.org.ID, TaskType: "scanner_plugin", IdempotencyKey: "k", RequestSHA256: "x"}
	_, _, err = s.CreateTask(t.Context(), store.EveryOrganization(), p)
	require.NoError(t, err)
	require.Equal(t, store.WakeOrganization, next(t).Kind)
	_, replayed, err := s.CreateTask(t.Context(), store.EveryOrganization(), p)
	require.NoError(t, err)
	require.True(t, replayed)
	// The next wake-up is another organization's: the replay sent none.
	orgC := createOrg(t, s, "org-c")
	createTask(t, s, orgC.ID, store.CreateTaskParams{})
	require.Equal(t, store.Wakeup{Kind: store.WakeOrganization, Organization: orgC.ID, Count: 1}, next(t))
}

// TestMissingOrganization: naming an organization that does not exist tells
// an unscoped caller which one; a scoped caller gets the plain not-found
// (creating) or its empty list (listing), exactly as for another tenant's.
func TestMissingOrganization(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	missing := uuid.New()
	unscoped, scoped := store.EveryOrganization(), store.OneOrganization(b.org.ID)
	orgC := createOrg(t, s, "org-c")
	wantText := problem.Text("organization " + missing.String() + " does not exist")

	_, _, err := s.CreateTask(ctx, unscoped, store.CreateTaskParams{OrganizationID: missing, TaskType: "scanner_plugin"})
	require.ErrorIs(t, err, store.ErrNotFound)
	text, ok := problem.PublicText(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, wantText, text)
	_, _, err = s.CreateScan(ctx, unscoped, store.CreateScanParams{OrganizationID: missing, Targets: []string{"example.com"},
		Plugins: []store.ScanPlugin{{Name: "echo"}}})
	require.ErrorIs(t, err, store.ErrNotFound)
	text, _ = problem.PublicText(err)
	require.Equal(t, wantText, text)

	_, _, err = s.ListTasks(ctx, unscoped, store.ListTasksParams{OrganizationID: &missing, Limit: 10})
	require.ErrorIs(t, err, store.ErrNotFound)
	text, _ = problem.PublicText(err)
	require.Equal(t, wantText, text)
	_, _, err = s.ListScans(ctx, unscoped, store.ListScansParams{OrganizationID: &missing, Limit: 10})
	require.ErrorIs(t, err, store.ErrNotFound)
	text, _ = problem.PublicText(err)
	require.Equal(t, wantText, text)

	// An organization that exists but has nothing yet is an empty list.
	tasks, _, err := s.ListTasks(ctx, unscoped, store.ListTasksParams{OrganizationID: &orgC.ID, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, tasks)
	scans, _, err := s.ListScans(ctx, unscoped, store.ListScansParams{OrganizationID: &orgC.ID, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, scans)

	// A scoped caller: a missing organization and another tenant's answer
	// alike, and name neither.
	for _, org := range []uuid.UUID{missing, orgC.ID} {
		_, _, err = s.CreateTask(ctx, scoped, store.CreateTaskParams{OrganizationID: org, TaskType: "scanner_plugin"})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, ok = problem.PublicText(err)
		require.False(t, ok, "a scoped caller learns nothing: %v", err)
		_, _, err = s.CreateScan(ctx, scoped, store.CreateScanParams{OrganizationID: org, Targets: []string{"example.com"},
			Plugins: []store.ScanPlugin{{Name: "echo"}}})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, ok = problem.PublicText(err)
		require.False(t, ok, "a scoped caller learns nothing: %v", err)
		tasks, _, err = s.ListTasks(ctx, scoped, store.ListTasksParams{OrganizationID: &org, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, tasks)
		scans, _, err = s.ListScans(ctx, scoped, store.ListScansParams{OrganizationID: &org, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, scans)
	}
}
