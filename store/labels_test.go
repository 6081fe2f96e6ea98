package store_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store"
)

// label sets (value) or removes (nil) labels of a worker as an operator does.
func label(t *testing.T, s *store.Store, worker uuid.UUID, change map[string]*string) store.Worker {
	t.Helper()
	w, err := s.UpdateWorker(t.Context(), store.EveryOrganization(), worker, store.UpdateWorkerParams{Labels: change}, onlineWindow)
	require.NoError(t, err)
	return w
}

func sel(labels map[string]string, exprs ...store.LabelRequirement) *store.LabelSelector {
	return &store.LabelSelector{MatchLabels: labels, MatchExpressions: exprs}
}

func taskIDs(tasks ...store.Task) []uuid.UUID {
	ids := make([]uuid.UUID, len(tasks))
	for i, task := range tasks {
		ids[i] = task.ID
	}
	return ids
}

// TestWorkerLabelsMergeAndValidate: a change sets and removes labels and
// keeps the others; keys and values follow Kubernetes' rules.
func TestWorkerLabelsMergeAndValidate(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	w := label(t, s, b.worker.ID, map[string]*string{"zone": new("eu-west"), "tier": new("gpu"), "example.com/team": new("")})
	require.Equal(t, map[string]string{"zone": "eu-west", "tier": "gpu", "example.com/team": ""}, w.Labels)
	w = label(t, s, b.worker.ID, map[string]*string{"tier": nil, "zone": new("eu-north"), "absent": nil})
	require.Equal(t, map[string]string{"zone": "eu-north", "example.com/team": ""}, w.Labels)

	for _, change := range []map[string]*string{
		{"Zone": new("eu")},                // upper case key
		{"-zone": new("eu")},               // must start with a letter or digit
		{"zone-": new("eu")},               // nor end with anything else
		{"": new("eu")},                    // empty key
		{string(make([]byte, 64)): nil},    // too long (and not a key)
		{"zone": new("eu west")},           // space in value
		{"zone": new("-eu")},               // value must start with a letter or digit
		{"zone": new(string(longValue()))}, // value too long
	} {
		_, err := s.UpdateWorker(t.Context(), store.EveryOrganization(), b.worker.ID, store.UpdateWorkerParams{Labels: change}, onlineWindow)
		require.ErrorIs(t, err, store.ErrInvalid, "%v", change)
	}
	got, err := s.GetWorker(t.Context(), store.EveryOrganization(), b.worker.ID, onlineWindow)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"zone": "eu-north", "example.com/team": ""}, got.Labels, "refused changes change nothing")

	// An organization that sees the worker but does not own it may not label it.
	other := createOrg(t, s, "other")
	assign(t, s, other.ID, b.worker.ID)
	_, err = s.UpdateWorker(t.Context(), store.OneOrganization(other.ID), b.worker.ID,
		store.UpdateWorkerParams{Labels: map[string]*string{"zone": new("mine")}}, onlineWindow)
	require.ErrorIs(t, err, store.ErrForbidden)
}

func longValue() []byte {
	v := make([]byte, 64)
	for i := range v {
		v[i] = 'a'
	}
	return v
}

// TestLabelSelectorLeasing: each worker gets only the tasks whose selector
// its labels satisfy, for every operator; selectors spelled differently but
// meaning the same share a lease class.
func TestLabelSelectorLeasing(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	eu := createWorker(t, s, b.pool, workerOpts{Capacity: 20})
	us := createWorker(t, s, b.pool, workerOpts{Capacity: 20})
	for _, w := range []store.Worker{eu, us} {
		assign(t, s, b.org.ID, w.ID)
	}
	label(t, s, eu.ID, map[string]*string{"zone": new("eu"), "gpu": new("a100")})
	label(t, s, us.ID, map[string]*string{"zone": new("us"), "legacy": new("yes")})
	create := func(selector *store.LabelSelector) store.Task {
		return createTask(t, s, b.org.ID, store.CreateTaskParams{LabelSelector: selector})
	}
	euOnly := []store.Task{
		create(sel(map[string]string{"zone": "eu"})),
		create(sel(nil, store.LabelRequirement{Key: "gpu", Operator: store.LabelExists})),
		create(sel(nil, store.LabelRequirement{Key: "legacy", Operator: store.LabelDoesNotExist})),
		create(sel(nil, store.LabelRequirement{Key: "zone", Operator: store.LabelNotIn, Values: []string{"us", "ap"}})),
		create(sel(nil, store.LabelRequirement{Key: "gpu", Operator: store.LabelIn, Values: []string{"h100", "a100"}})),
	}
	usOnly := []store.Task{
		create(sel(map[string]string{"zone": "us", "legacy": "yes"})),
		// NotIn holds when the label is absent.
		create(sel(nil, store.LabelRequirement{Key: "gpu", Operator: store.LabelNotIn, Values: []string{"a100"}})),
	}
	both := []store.Task{
		create(nil),
		create(sel(map[string]string{})), // empty: every worker
		create(sel(nil, store.LabelRequirement{Key: "zone", Operator: store.LabelIn, Values: []string{"us", "eu"}})),
	}
	nobody := []store.Task{
		create(sel(map[string]string{"zone": "eu", "legacy": "yes"})),
		create(sel(nil, store.LabelRequirement{Key: "zone", Operator: store.LabelIn, Values: []string{"ap"}})),
	}

	euGot := leaseTaskIDs(acquire(t, s, eu.ID, 20).Leases)
	usGot := leaseTaskIDs(acquire(t, s, us.ID, 20).Leases)
	require.ElementsMatch(t, append(taskIDs(euOnly...), taskIDs(both...)...), euGot)
	require.ElementsMatch(t, taskIDs(usOnly...), usGot, "the tasks both may run went to the first poll")
	for _, task := range nobody {
		require.Equal(t, store.TaskPending, taskState(t, s, task.ID))
	}

	// The selector is stored canonical: expressions sorted, values sorted
	// and distinct; an empty selector is none at all.
	a := create(sel(nil,
		store.LabelRequirement{Key: "zone", Operator: store.LabelIn, Values: []string{"eu", "us", "eu"}},
		store.LabelRequirement{Key: "gpu", Operator: store.LabelExists}))
	c := create(sel(nil,
		store.LabelRequirement{Key: "gpu", Operator: store.LabelExists},
		store.LabelRequirement{Key: "zone", Operator: store.LabelIn, Values: []string{"us", "eu"}}))
	require.Equal(t, a.LabelSelector, c.LabelSelector)
	require.Equal(t, []string{"eu", "us"}, a.LabelSelector.MatchExpressions[1].Values)
	var classes int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(DISTINCT lease_class) FROM worker_tasks WHERE id = ANY($1)`,
		[]uuid.UUID{a.ID, c.ID}).Scan(&classes))
	require.Equal(t, 1, classes, "alike selectors share a lease class")
	require.Nil(t, both[1].LabelSelector)
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(DISTINCT lease_class) FROM worker_tasks WHERE id = ANY($1)`,
		taskIDs(both[0], both[1])).Scan(&classes))
	require.Equal(t, 1, classes, "an empty selector is no selector")

	for _, bad := range []*store.LabelSelector{
		sel(map[string]string{"Zone": "eu"}),
		sel(map[string]string{"zone": "e u"}),
		sel(nil, store.LabelRequirement{Key: "zone", Operator: store.LabelIn}),
		sel(nil, store.LabelRequirement{Key: "zone", Operator: store.LabelExists, Values: []string{"eu"}}),
		sel(nil, store.LabelRequirement{Key: "zone", Operator: "Gt", Values: []string{"1"}}),
	} {
		_, _, err := s.CreateTask(t.Context(), store.EveryOrganization(), store.CreateTaskParams{
			OrganizationID: b.org.ID, TaskType: "scanner_plugin", LabelSelector: bad})
		require.ErrorIs(t, err, store.ErrInvalid, "%+v", bad)
	}
}

// TestPinnedTasks: a pinned task goes to its worker only — alone or in a
// coalesced acquisition with like workers — and a pin to a worker the
// organization cannot see is refused.
func TestPinnedTasks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, b := setupStore(t)
	a := createWorker(t, s, b.pool, workerOpts{Capacity: 2})
	c := createWorker(t, s, b.pool, workerOpts{Capacity: 2})
	for _, w := range []store.Worker{a, c} {
		assign(t, s, b.org.ID, w.ID)
	}
	// Older and of higher priority than anything else: if pinned tasks
	// could take other workers' places, they would.
	pinnedToA := createTasks(t, s, b.org.ID, 6, store.CreateTaskParams{PinnedWorkerID: &a.ID, Priority: 5})
	require.Equal(t, &a.ID, pinnedToA[0].PinnedWorkerID)
	plain := createTasks(t, s, b.org.ID, 4, store.CreateTaskParams{})

	require.Empty(t, acquire(t, s, b.worker.ID, 0).Leases)
	out := s.AcquireLeasesMany(ctx, []store.AcquireParams{
		{WorkerID: a.ID, MaxTasks: 2},
		{WorkerID: c.ID, MaxTasks: 2},
		{WorkerID: b.worker.ID, MaxTasks: 2},
	})
	for i := range out {
		require.NoError(t, out[i].Err, "poll %d", i)
	}
	require.Subset(t, taskIDs(pinnedToA...), leaseTaskIDs(out[0].Result.Leases), "the pinned worker gets its own tasks first (priority)")
	require.Len(t, out[0].Result.Leases, 2)
	require.Len(t, out[1].Result.Leases, 2, "A's pinned backlog does not take the other workers' places")
	require.Len(t, out[2].Result.Leases, 2)
	require.ElementsMatch(t, taskIDs(plain...), append(leaseTaskIDs(out[1].Result.Leases), leaseTaskIDs(out[2].Result.Leases)...))

	// Alone, the other workers get nothing more: only A's tasks are left.
	require.Empty(t, acquire(t, s, b.worker.ID, 2).Leases)
	require.Len(t, acquire(t, s, a.ID, 0).Leases, 0)
	require.Equal(t, "capacity_full", getTask(t, s, pinnedToA[5].ID).PendingReason)

	// A pin must name a worker the organization sees.
	stranger := createWorker(t, s, b.pool, workerOpts{})
	for _, id := range []uuid.UUID{stranger.ID, uuid.New()} {
		_, _, err := s.CreateTask(ctx, store.EveryOrganization(), store.CreateTaskParams{
			OrganizationID: b.org.ID, TaskType: "scanner_plugin", PinnedWorkerID: &id})
		require.ErrorIs(t, err, store.ErrInvalid)
	}
}

// TestPinnedTaskInAGroupOfItsWorkersPolls: two polls of the pinned worker
// in one acquisition share its pinned tasks, up to its capacity.
func TestPinnedTaskInAGroupOfItsWorkersPolls(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t) // b.worker: capacity 4
	other := createWorker(t, s, b.pool, workerOpts{Capacity: 4})
	assign(t, s, b.org.ID, other.ID)
	pinned := createTasks(t, s, b.org.ID, 10, store.CreateTaskParams{PinnedWorkerID: &b.worker.ID})
	out := s.AcquireLeasesMany(t.Context(), []store.AcquireParams{
		{WorkerID: b.worker.ID, MaxTasks: 3},
		{WorkerID: other.ID, MaxTasks: 4},
		{WorkerID: b.worker.ID, MaxTasks: 3},
	})
	require.Len(t, out[0].Result.Leases, 3)
	require.Len(t, out[2].Result.Leases, 1, "the worker's capacity is 4")
	require.Empty(t, out[1].Result.Leases)
	require.Subset(t, taskIDs(pinned...), append(leaseTaskIDs(out[0].Result.Leases), leaseTaskIDs(out[2].Result.Leases)...))
	require.Equal(t, 4, countAttempts(t, b.pool, "worker_id = $1", b.worker.ID))
}

// TestLabelBacklogIndependence: a large backlog of tasks that need a label
// no worker has, or are pinned to another worker — older and of higher
// priority than everything else — neither blocks nor slows the tasks a
// worker can run: its walk reads as many pages with the backlog as without
// (the backlog is two classes, skipped with an index probe each).
func TestLabelBacklogIndependence(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	absent := createWorker(t, s, b.pool, workerOpts{Capacity: 1})
	assign(t, s, b.org.ID, absent.ID)
	label(t, s, b.worker.ID, map[string]*string{"zone": new("eu")})

	walkPages := func() int {
		t.Helper()
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback(t.Context())) }()
		_, err = tx.Exec(t.Context(), store.GenericPlanSQL)
		require.NoError(t, err)
		var plan []struct {
			Plan struct {
				Hit  int `json:"Shared Hit Blocks"`
				Read int `json:"Shared Read Blocks"`
			}
		}
		hashes := [][]byte{make([]byte, 32), make([]byte, 32)}
		require.NoError(t, tx.QueryRow(t.Context(), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+store.LeaseCandidatesSQL,
			b.worker.ID, 2, nil, hashes).Scan(&plan))
		return plan[0].Plan.Hit + plan[0].Plan.Read
	}

	mine := createTasks(t, s, b.org.ID, 3, store.CreateTaskParams{LabelSelector: sel(map[string]string{"zone": "eu"})})
	before := walkPages()

	editTasks(t, b.pool, `INSERT INTO worker_tasks (task_type, organization_id, priority, created_at, label_selector)
		SELECT 'scanner_plugin', $1, 10, now() - interval '1 hour', '{"match_labels": {"zone": "mars"}}'::jsonb
		FROM generate_series(1, 5000)`, b.org.ID)
	editTasks(t, b.pool, `INSERT INTO worker_tasks (task_type, organization_id, priority, created_at, pinned_worker_id)
		SELECT 'scanner_plugin', $1, 10, now() - interval '1 hour', $2
		FROM generate_series(1, 5000)`, b.org.ID, absent.ID)
	exec(t, b.pool, `ANALYZE worker_task_queue`)
	after := walkPages()
	t.Logf("pages read by the walk: %d without the backlog, %d with 10,000 tasks in it", before, after)
	require.LessOrEqual(t, after, before+12, "the walk's cost does not grow with a backlog the worker cannot run")

	require.ElementsMatch(t, taskIDs(mine...), leaseTaskIDs(acquire(t, s, b.worker.ID, 4).Leases))
	require.Equal(t, "label_mismatch", reasonOfOne(t, s, b, `label_selector IS NOT NULL AND state = 'pending'`))
}

// reasonOfOne is the pending reason of one task matching where.
func reasonOfOne(t *testing.T, s *store.Store, b *testBundle, where string) string {
	t.Helper()
	var id uuid.UUID
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT id FROM worker_tasks WHERE `+where+` LIMIT 1`).Scan(&id))
	return getTask(t, s, id).PendingReason
}

// TestPendingReasonLabelsAndPins: label_mismatch when no online, capable
// worker's labels match; pinned_worker_unavailable while the pinned worker
// cannot lease (offline, disabled, unassigned, revoked).
func TestPendingReasonLabelsAndPins(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	require.Empty(t, acquire(t, s, b.worker.ID, 0).Leases) // online
	label(t, s, b.worker.ID, map[string]*string{"zone": new("eu")})

	mismatch := createTask(t, s, b.org.ID, store.CreateTaskParams{LabelSelector: sel(map[string]string{"zone": "us"})})
	require.Equal(t, "label_mismatch", getTask(t, s, mismatch.ID).PendingReason)
	// Capabilities are explained first: a worker with the labels but not
	// the capabilities would not help.
	both := createTask(t, s, b.org.ID, store.CreateTaskParams{LabelSelector: sel(map[string]string{"zone": "us"}),
		RequiredCapabilities: json.RawMessage(`{"gpu": true}`)})
	require.Equal(t, "capability_mismatch", getTask(t, s, both.ID).PendingReason)

	pinned := createWorker(t, s, b.pool, workerOpts{Capacity: 1})
	assign(t, s, b.org.ID, pinned.ID)
	task := createTask(t, s, b.org.ID, store.CreateTaskParams{PinnedWorkerID: &pinned.ID})
	require.Equal(t, "pinned_worker_unavailable", getTask(t, s, task.ID).PendingReason,
		"never seen, although another worker is online")

	require.Empty(t, acquire(t, s, pinned.ID, 0).Leases) // online, no free slot asked for
	require.Empty(t, getTask(t, s, task.ID).PendingReason, "its worker can take it at its next poll")

	_, err := s.UpdateWorker(ctx, store.EveryOrganization(), pinned.ID, store.UpdateWorkerParams{Enabled: new(false)}, onlineWindow)
	require.NoError(t, err)
	require.Equal(t, "pinned_worker_unavailable", getTask(t, s, task.ID).PendingReason, "disabled")
	_, err = s.UpdateWorker(ctx, store.EveryOrganization(), pinned.ID, store.UpdateWorkerParams{Enabled: new(true)}, onlineWindow)
	require.NoError(t, err)

	_, err = s.RevokeWorker(ctx, store.EveryOrganization(), pinned.ID, "test", onlineWindow)
	require.NoError(t, err)
	require.Equal(t, "pinned_worker_unavailable", getTask(t, s, task.ID).PendingReason, "revoked")
	require.Len(t, acquire(t, s, b.worker.ID, 4).Leases, 0, "nobody else takes it")
}

// TestLabelRemovedWhileRunning: taking away a label an active attempt's
// task selects ends that attempt at once, as a critical capability the
// worker stops advertising does — superseded (label_lost), the task back
// in the queue, the lease lost — while attempts whose selectors still
// match, or that have none, go on.
func TestLabelRemovedWhileRunning(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, b := setupStore(t)
	label(t, s, b.worker.ID, map[string]*string{"zone": new("eu"), "gpu": new("a100")})
	needsGPU := createTask(t, s, b.org.ID, store.CreateTaskParams{LabelSelector: sel(map[string]string{"gpu": "a100"})})
	needsEU := createTask(t, s, b.org.ID, store.CreateTaskParams{LabelSelector: sel(nil,
		store.LabelRequirement{Key: "zone", Operator: store.LabelIn, Values: []string{"eu", "eu-west"}})})
	plain := createTask(t, s, b.org.ID, store.CreateTaskParams{})
	leases := map[uuid.UUID]store.Lease{}
	for _, l := range acquire(t, s, b.worker.ID, 3).Leases {
		leases[l.Task.ID] = l
	}
	require.Len(t, leases, 3)
	_, err := s.StartAttempt(ctx, refOf(b.worker.ID, leases[needsGPU.ID]))
	require.NoError(t, err)

	// zone changes to a value the selector still accepts; gpu goes.
	label(t, s, b.worker.ID, map[string]*string{"gpu": nil, "zone": new("eu-west")})

	require.Equal(t, store.AttemptSuperseded, attemptStatus(t, b.pool, leases[needsGPU.ID].AttemptID))
	var code string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT error_code FROM worker_task_attempts WHERE id = $1`,
		leases[needsGPU.ID].AttemptID).Scan(&code))
	require.Equal(t, "label_lost", code)
	task := getTask(t, s, needsGPU.ID)
	require.Equal(t, store.TaskPending, task.State)
	require.Zero(t, task.AttemptCount, "a policy ending does not use up the task's attempts")
	require.Equal(t, "label_mismatch", task.PendingReason)

	statuses, err := s.RenewLeases(ctx, store.RenewParams{WorkerID: b.worker.ID, Leases: []store.AttemptRef{
		refOf(b.worker.ID, leases[needsGPU.ID]), refOf(b.worker.ID, leases[needsEU.ID]), refOf(b.worker.ID, leases[plain.ID])}})
	require.NoError(t, err)
	require.Equal(t, store.LeaseLost, statuses[0].State, "the next heartbeat hears the lease is lost")
	require.Equal(t, store.LeaseActive, statuses[1].State)
	require.Equal(t, store.LeaseActive, statuses[2].State)

	// Setting labels that change nothing ends nothing.
	label(t, s, b.worker.ID, map[string]*string{"zone": new("eu-west")})
	require.Equal(t, 2, countAttempts(t, b.pool, "worker_id = $1 AND status IN ('leased', 'running')", b.worker.ID))

	// Given back, the label lets the worker lease the task again.
	label(t, s, b.worker.ID, map[string]*string{"gpu": new("a100")})
	require.Equal(t, []uuid.UUID{needsGPU.ID}, leaseTaskIDs(acquire(t, s, b.worker.ID, 2).Leases))
}

// TestScheduledTaskCarriesSelectorAndPin: a task schedule's selector
// (stored canonical) and pin pass to the tasks it creates; a pin to a
// worker the organization cannot see is refused.
func TestScheduledTaskCarriesSelectorAndPin(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, b := setupStore(t)
	def := store.ScheduleDefinition{Kind: store.ScheduleTask, Task: &store.ScheduledTask{
		TaskType: "scanner_plugin", Payload: json.RawMessage(`{"plugin": "echo"}`),
		LabelSelector:  sel(nil, store.LabelRequirement{Key: "zone", Operator: store.LabelIn, Values: []string{"us", "eu"}}),
		PinnedWorkerID: &b.worker.ID,
	}}
	interval := 60
	sc, err := s.CreateSchedule(ctx, store.EveryOrganization(), b.org.ID, store.ScheduleParams{Name: "pinned",
		Timing: store.ScheduleTiming{IntervalSeconds: interval}, Definition: def})
	require.NoError(t, err)
	require.Equal(t, []string{"eu", "us"}, sc.Definition.Task.LabelSelector.MatchExpressions[0].Values)

	run, _, err := s.RunScheduleNow(ctx, store.EveryOrganization(), sc.ID, store.RunScheduleParams{})
	require.NoError(t, err)
	require.NotNil(t, run.TaskID)
	task := getTask(t, s, *run.TaskID)
	require.Equal(t, &b.worker.ID, task.PinnedWorkerID)
	require.Equal(t, sc.Definition.Task.LabelSelector, task.LabelSelector)

	stranger := createWorker(t, s, b.pool, workerOpts{})
	def.Task.PinnedWorkerID = &stranger.ID
	_, err = s.CreateSchedule(ctx, store.EveryOrganization(), b.org.ID, store.ScheduleParams{Name: "stranger",
		Timing: store.ScheduleTiming{IntervalSeconds: interval}, Definition: def})
	require.ErrorIs(t, err, store.ErrInvalid)
}

// TestLabelsMigrationKeepsLeaseClasses: migration 000019 rebuilds the
// lease class with the selector and the pin in it; tasks queued before it
// keep the class they had (so their queue rows stay right), workers start
// without labels, and the queued tasks are leased afterwards.
func TestLabelsMigrationKeepsLeaseClasses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const labelsMigration = 19
	url, oldPool := beforeMigration(t, labelsMigration)
	old := store.New(oldPool) // only for tables the migration leaves alone
	org := createOldOrg(t, oldPool, "org-a")
	worker := createOldWorker(t, oldPool, 4)
	assign(t, old, org.ID, worker.ID)
	var queued []uuid.UUID
	for _, caps := range []string{`{}`, `{}`, `{"gpu": true}`} {
		var id uuid.UUID
		require.NoError(t, oldPool.QueryRow(ctx, `WITH t AS (
				INSERT INTO worker_tasks (task_type, organization_id, payload, required_capabilities)
				VALUES ('scanner_plugin', $1, '{"plugin": "echo"}', $2::jsonb) RETURNING *
			), q AS (
				INSERT INTO worker_task_queue (task_id, organization_id, lease_class, task_type, required_capabilities,
					priority, created_at, available_at, execution_deadline_at)
				SELECT id, organization_id, lease_class, task_type, required_capabilities, priority, created_at, available_at,
					execution_deadline_at FROM t
			) SELECT id FROM t`, org.ID, caps).Scan(&id))
		queued = append(queued, id)
	}
	classes := func(pool *pgxpool.Pool) map[uuid.UUID]string {
		rows, err := pool.Query(ctx, `SELECT id, lease_class FROM worker_tasks`)
		require.NoError(t, err)
		out := map[uuid.UUID]string{}
		for rows.Next() {
			var id uuid.UUID
			var class string
			require.NoError(t, rows.Scan(&id, &class))
			out[id] = class
		}
		require.NoError(t, rows.Err())
		return out
	}
	classesBefore := classes(oldPool)
	oldPool.Close()

	require.NoError(t, migrations.Up(ctx, url))
	pool, err := store.OpenPool(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := store.New(pool)
	require.Equal(t, classesBefore, classes(pool), "a task without selector or pin keeps its class")
	var mismatched int
	require.NoError(t, pool.QueryRow(ctx, store.QueueMismatchSQL).Scan(&mismatched))
	require.Zero(t, mismatched)
	w, err := s.GetWorker(ctx, store.EveryOrganization(), worker.ID, onlineWindow)
	require.NoError(t, err)
	require.Empty(t, w.Labels)

	res, err := s.AcquireLeases(ctx, store.AcquireParams{WorkerID: worker.ID, MaxTasks: 4})
	require.NoError(t, err)
	require.ElementsMatch(t, queued[:2], leaseTaskIDs(res.Leases), "the gpu task waits for a gpu worker, as before")
}
