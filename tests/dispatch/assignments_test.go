package dispatch

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// One test per assignment scenario (the ten of the data-model spec): who may
// lease what as workers are assigned, disabled, unassigned and resized.

func leaseWithCaps(t *testing.T, w *harness.Worker, n int, caps string) []apiclient.Lease {
	t.Helper()
	c := apiclient.Capabilities(caps)
	res, err := w.Client.AcquireLeasesWithResponse(context.Background(), nil,
		apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: ptr(0), Capabilities: &c})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return res.JSON200.Leases
}

func heartbeatState(t *testing.T, w *harness.Worker, l apiclient.Lease) string {
	t.Helper()
	res, err := w.Client.HeartbeatWorkerWithResponse(context.Background(), apiclient.WorkerHeartbeatRequest{
		Leases: []apiclient.LeaseRef{{AttemptId: l.AttemptId, LeaseToken: l.LeaseToken}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return string(res.JSON200.Leases[0].State)
}

func TestScenarioOneOrganizationAssignedToOneWorker(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	only := g.NewWorker(t, "only", 1, org)
	stranger := g.NewWorker(t, "stranger", 5)
	task := g.CreateTask(t, org, harness.TaskSpec{RequiredCapabilities: map[string]any{"nmap": true}})
	require.Empty(t, leaseWithCaps(t, stranger, 5, `{"nmap": true}`), "an unassigned worker is never eligible")
	require.Empty(t, leaseWithCaps(t, only, 1, `{}`), "the assigned worker needs the capabilities")
	leases := leaseWithCaps(t, only, 1, `{"nmap": true}`)
	require.Len(t, leases, 1)
	require.Equal(t, task, leases[0].Task.Id)
	g.CreateTask(t, org, harness.TaskSpec{RequiredCapabilities: map[string]any{"nmap": true}})
	require.Empty(t, leaseWithCaps(t, only, 1, `{"nmap": true}`), "and the capacity")
}

func TestScenarioOneOrganizationAssignedToMultipleWorkers(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	a, b := g.NewWorker(t, "a", 1, org), g.NewWorker(t, "b", 1, org)
	for range 2 {
		g.CreateTask(t, org, harness.TaskSpec{})
	}
	require.Len(t, lease(t, a, 5, 0), 1)
	require.Len(t, lease(t, b, 5, 0), 1, "any eligible assigned worker may take the next one")
}

func TestScenarioOneWorkerAssignedToMultipleOrganizations(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	orgA, orgB := g.NewOrganization(t, "a"), g.NewOrganization(t, "b")
	w := g.NewWorker(t, "shared", 2, orgA, orgB)
	for range 3 {
		g.CreateTask(t, orgA, harness.TaskSpec{})
		g.CreateTask(t, orgB, harness.TaskSpec{})
	}
	leases := lease(t, w, 5, 0)
	require.Len(t, leases, 2, "up to its capacity")
	orgs := map[uuid.UUID]bool{leases[0].Task.OrganizationId: true, leases[1].Task.OrganizationId: true}
	require.Len(t, orgs, 2, "organizations take turns")
}

func TestScenarioWorkerWithNoAssignments(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	task := g.CreateTask(t, org, harness.TaskSpec{})
	w := g.NewWorker(t, "lonely", 5)
	require.Empty(t, lease(t, w, 5, 0))
	require.Equal(t, "no_assigned_worker", string(*g.Task(t, task).PendingReason))
}

func TestScenarioDisabledWorker(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	drained := g.NewWorker(t, "drained", 2, org)
	cancelled := g.NewWorker(t, "cancelled", 2, org)
	g.CreateTask(t, org, harness.TaskSpec{})
	g.CreateTask(t, org, harness.TaskSpec{})
	ld := lease(t, drained, 1, 0)[0]
	lc := lease(t, cancelled, 1, 0)[0]
	g.CreateTask(t, org, harness.TaskSpec{})

	disable := func(w *harness.Worker, active string) {
		params := &apiclient.UpdateWorkerParams{}
		if active != "" {
			params.Active = ptr(apiclient.UpdateWorkerParamsActive(active))
		}
		res, err := g.Control.UpdateWorkerWithResponse(context.Background(), w.ID, params, apiclient.UpdateWorkerRequest{Enabled: ptr(false)})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	}
	disable(drained, "")
	disable(cancelled, "cancel")
	require.Empty(t, lease(t, drained, 1, 0), "a disabled worker leases nothing new")
	require.Equal(t, "active", heartbeatState(t, drained, ld), "by default its active tasks drain")
	completeAs(t, drained, ld, "succeeded", nil)
	require.Equal(t, "lost", heartbeatState(t, cancelled, lc), "with active=cancel they end at once")
	detail := g.Task(t, lc.Task.Id)
	require.Equal(t, apiclient.TaskState("pending"), detail.State)
	require.Zero(t, detail.AttemptCount, "ended by policy, not counted")
}

func TestScenarioAssignmentRemovedDuringExecution(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	secure, routine := g.NewWorker(t, "secure", 2, org), g.NewWorker(t, "routine", 2, org)
	for range 4 {
		g.CreateTask(t, org, harness.TaskSpec{})
	}
	ls := lease(t, secure, 1, 0)[0]
	lr := lease(t, routine, 1, 0)[0]

	a := unassign(t, g, org, secure.ID, "")
	require.True(t, a.Revoked)
	require.Equal(t, 1, *a.CancelledAttempts, "cancel is the default: security revocation")
	require.Equal(t, "lost", heartbeatState(t, secure, ls))
	require.Empty(t, lease(t, secure, 2, 0), "new leases stop immediately")
	require.Equal(t, apiclient.TaskState("pending"), g.Task(t, ls.Task.Id).State)

	unassign(t, g, org, routine.ID, "drain")
	require.Empty(t, lease(t, routine, 2, 0))
	require.Equal(t, "active", heartbeatState(t, routine, lr), "drain lets routine reassignment finish")
	completeAs(t, routine, lr, "succeeded", nil)
}

func TestScenarioTemporarilyOfflineWorker(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "flaky", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{MaxAttempts: 3})
	require.Len(t, lease(t, w, 1, 0), 1)
	// It goes silent: its lease expires and the task becomes retryable.
	_, err := g.Pool.Exec(context.Background(), `UPDATE workers SET last_seen_at = now() - interval '1 hour' WHERE id = $1`, w.ID)
	require.NoError(t, err)
	g.ExpireLeases(t, task)
	g.WaitTaskState(t, task, "retry_wait")
	g.EditTasks(t, `UPDATE worker_tasks SET available_at = now() WHERE id = $1`, task)
	require.Equal(t, "no_online_worker", string(*g.Task(t, task).PendingReason))
}

func TestScenarioOrganizationWithNoEligibleOnlineWorkers(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "never-seen", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{})
	require.Equal(t, apiclient.TaskState("pending"), g.Task(t, task).State)
	require.Equal(t, "no_online_worker", string(*g.Task(t, task).PendingReason))
	res, err := g.Control.ListOrganizationWorkersWithResponse(context.Background(), org)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Len(t, res.JSON200.Items, 1)
	require.False(t, res.JSON200.Items[0].Eligible, "the UI can show no eligible worker")
	require.Equal(t, apiclient.OrganizationWorkerReason("offline"), res.JSON200.Items[0].Reason)
	require.Equal(t, w.ID, res.JSON200.Items[0].Worker.Id)
}

func TestScenarioCapabilityChanges(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w", 3, org)
	payload := apiclient.JSONObject(`{"plugin": "echo"}`)
	gpu := apiclient.Capabilities(`{"gpu": true}`)
	res, err := g.Control.CreateTaskWithResponse(context.Background(), nil, apiclient.CreateTaskRequest{
		OrganizationId: org, TaskType: "scanner_plugin", Payload: &payload, RequiredCapabilities: &gpu, CriticalCapabilities: &gpu})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	g.CreateTask(t, org, harness.TaskSpec{RequiredCapabilities: map[string]any{"fast": true}})

	critical := leaseWithCaps(t, w, 1, `{"gpu": true, "fast": true}`)
	require.Len(t, critical, 1, "the persisted advertisement is used")
	relaxed := leaseWithCaps(t, w, 1, `{"gpu": true, "fast": true}`)
	require.Len(t, relaxed, 1)
	require.NotEqual(t, critical[0].Task.Id, relaxed[0].Task.Id)

	// The worker stops advertising both: the critical one's attempt ends, the other continues.
	none := apiclient.Capabilities(`{}`)
	hb, err := w.Client.HeartbeatWorkerWithResponse(context.Background(), apiclient.WorkerHeartbeatRequest{
		Capabilities: &none,
		Leases: []apiclient.LeaseRef{
			{AttemptId: critical[0].AttemptId, LeaseToken: critical[0].LeaseToken},
			{AttemptId: relaxed[0].AttemptId, LeaseToken: relaxed[0].LeaseToken}}})
	require.NoError(t, err)
	require.Equal(t, apiclient.LeaseState("lost"), hb.JSON200.Leases[0].State, "critical capability lost")
	require.Equal(t, apiclient.LeaseState("active"), hb.JSON200.Leases[1].State)
	require.Equal(t, apiclient.TaskState("pending"), g.Task(t, critical[0].Task.Id).State)
	require.Empty(t, leaseWithCaps(t, w, 1, `{}`), "future leases use the new advertisement")
}

// TestScenarioConcurrentAssignmentChangeAndAcquisition races unassignment
// against acquisition many times: once the unassignment has committed, no
// attempt may exist for the pair that it did not end.
func TestScenarioConcurrentAssignmentChangeAndAcquisition(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	const rounds = 30
	for i := range rounds {
		w := g.NewWorker(t, "racer-"+uuid.NewString()[:8], 4, org)
		for range 2 {
			g.CreateTask(t, org, harness.TaskSpec{})
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			n, wait := 4, 0
			_, _ = w.Client.AcquireLeasesWithResponse(context.Background(), nil, apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait})
		})
		wg.Go(func() { unassign(t, g, org, w.ID, "cancel") })
		wg.Wait()
		var live int
		require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_task_attempts
			WHERE worker_id = $1 AND status IN ('leased', 'running')`, w.ID).Scan(&live))
		require.Zero(t, live, "round %d: an attempt survived the unassignment", i)
		g.EditTasks(t, `UPDATE worker_tasks SET state = 'cancelled' WHERE state IN ('pending', 'retry_wait')`)
	}
}
