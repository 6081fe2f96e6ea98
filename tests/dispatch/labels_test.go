package dispatch

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// The assignment scenarios again, with operator-set labels, label
// selectors and pins in play (issue 17).

// setLabels changes a worker's labels through the admin API: a value sets
// a label, nil removes it.
func setLabels(t *testing.T, g *harness.Gateway, worker uuid.UUID, change map[string]*string) apiclient.Worker {
	t.Helper()
	labels := apiclient.LabelChanges(change)
	res, err := g.Control.UpdateWorkerWithResponse(context.Background(), worker, &apiclient.UpdateWorkerParams{},
		apiclient.UpdateWorkerRequest{Labels: &labels})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return *res.JSON200
}

func matchLabels(labels map[string]string) *apiclient.LabelSelector {
	return &apiclient.LabelSelector{MatchLabels: &labels}
}

func pendingReason(t *testing.T, g *harness.Gateway, task uuid.UUID) string {
	t.Helper()
	d := g.Task(t, task)
	require.Contains(t, []apiclient.TaskState{"pending", "retry_wait"}, d.State)
	if d.PendingReason == nil {
		return ""
	}
	return string(*d.PendingReason)
}

func TestLabelScenarioOneOrganizationAssignedToOneWorker(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	only := g.NewWorker(t, "only", 1, org)
	stranger := g.NewWorker(t, "stranger", 5)
	setLabels(t, g, stranger.ID, map[string]*string{"zone": ptr("eu")})
	task := g.CreateTask(t, org, harness.TaskSpec{LabelSelector: matchLabels(map[string]string{"zone": "eu"})})

	require.Empty(t, lease(t, stranger, 5, 0), "an unassigned worker is never eligible, labels or not")
	require.Empty(t, lease(t, only, 1, 0), "the assigned worker needs the labels")
	require.Equal(t, "label_mismatch", pendingReason(t, g, task))
	// Labels are the operator's: a worker advertising them as capabilities
	// does not get the task.
	require.Empty(t, leaseWithCaps(t, only, 1, `{"zone": "eu", "labels": {"zone": "eu"}}`))

	w := setLabels(t, g, only.ID, map[string]*string{"zone": ptr("eu")})
	require.Equal(t, apiclient.Labels{"zone": "eu"}, w.Labels)
	leases := lease(t, only, 1, 0)
	require.Len(t, leases, 1)
	require.Equal(t, task, leases[0].Task.Id)
	g.CreateTask(t, org, harness.TaskSpec{LabelSelector: matchLabels(map[string]string{"zone": "eu"})})
	require.Empty(t, lease(t, only, 1, 0), "and the capacity")
}

func TestLabelScenarioOneOrganizationAssignedToMultipleWorkers(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	gpu, plain := g.NewWorker(t, "gpu", 2, org), g.NewWorker(t, "plain", 2, org)
	setLabels(t, g, gpu.ID, map[string]*string{"accelerator": ptr("a100")})
	needsGPU := g.CreateTask(t, org, harness.TaskSpec{LabelSelector: &apiclient.LabelSelector{
		MatchExpressions: &[]apiclient.LabelRequirement{{Key: "accelerator", Operator: apiclient.LabelIn, Values: &[]string{"a100", "h100"}}}}})
	noGPU := g.CreateTask(t, org, harness.TaskSpec{LabelSelector: &apiclient.LabelSelector{
		MatchExpressions: &[]apiclient.LabelRequirement{{Key: "accelerator", Operator: apiclient.LabelDoesNotExist}}}})

	got := lease(t, plain, 2, 0)
	require.Len(t, got, 1)
	require.Equal(t, noGPU, got[0].Task.Id)
	got = lease(t, gpu, 2, 0)
	require.Len(t, got, 1)
	require.Equal(t, needsGPU, got[0].Task.Id)
	detail := g.Task(t, needsGPU)
	require.NotNil(t, detail.LabelSelector)
	require.Equal(t, []string{"a100", "h100"}, *(*detail.LabelSelector.MatchExpressions)[0].Values)
}

func TestLabelScenarioOneWorkerAssignedToMultipleOrganizations(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	orgA, orgB := g.NewOrganization(t, "a"), g.NewOrganization(t, "b")
	w := g.NewWorker(t, "shared", 2, orgA, orgB)
	setLabels(t, g, w.ID, map[string]*string{"clearance": ptr("high")})
	high := matchLabels(map[string]string{"clearance": "high"})
	for range 3 {
		g.CreateTask(t, orgA, harness.TaskSpec{LabelSelector: high})
		g.CreateTask(t, orgB, harness.TaskSpec{LabelSelector: high})
	}
	leases := lease(t, w, 5, 0)
	require.Len(t, leases, 2, "up to its capacity")
	orgs := map[uuid.UUID]bool{leases[0].Task.OrganizationId: true, leases[1].Task.OrganizationId: true}
	require.Len(t, orgs, 2, "organizations take turns")
}

// TestLabelScenarioLabelRemovedDuringExecution mirrors
// TestScenarioCapabilityChanges: the operator takes a label away while a
// task that selects it runs; that attempt ends (lost), the other goes on,
// and the change is audited.
func TestLabelScenarioLabelRemovedDuringExecution(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w", 3, org)
	setLabels(t, g, w.ID, map[string]*string{"pci": ptr("yes"), "zone": ptr("eu")})
	selected := g.CreateTask(t, org, harness.TaskSpec{LabelSelector: matchLabels(map[string]string{"pci": "yes"}), Priority: 1})
	g.CreateTask(t, org, harness.TaskSpec{})
	leases := lease(t, w, 2, 0)
	require.Len(t, leases, 2)
	require.Equal(t, selected, leases[0].Task.Id, "priority first")

	require.Equal(t, apiclient.Labels{"zone": "eu"}, setLabels(t, g, w.ID, map[string]*string{"pci": nil}).Labels)
	require.Equal(t, "lost", heartbeatState(t, w, leases[0]), "the label its task selects is gone")
	require.Equal(t, "active", heartbeatState(t, w, leases[1]))
	detail := g.Task(t, selected)
	require.Equal(t, apiclient.TaskState("pending"), detail.State)
	require.Zero(t, detail.AttemptCount, "ended by policy, not counted")
	require.Equal(t, "label_mismatch", string(*detail.PendingReason))
	require.Equal(t, "label_lost", *detail.Attempts[0].ErrorCode)
	require.Empty(t, lease(t, w, 1, 0), "future leases use the new labels")

	events, err := g.Control.ListAuditEventsWithResponse(context.Background(), &apiclient.ListAuditEventsParams{
		TargetId: ptr(w.ID.String()), Action: ptr("worker.update")})
	require.NoError(t, err)
	require.NotEmpty(t, events.JSON200.Items)
	var details struct {
		Labels map[string]*string `json:"labels"`
	}
	require.NoError(t, json.Unmarshal(*events.JSON200.Items[0].Details, &details))
	require.Equal(t, map[string]*string{"pci": nil}, details.Labels, "the newest event is the removal")
}

// TestLabelBacklogDoesNotBlock: a big backlog of tasks that need a label no
// worker has — older and of higher priority — does not keep a worker from
// the tasks it can run.
func TestLabelBacklogDoesNotBlock(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w", 8, org)
	g.EditTasks(t, `INSERT INTO worker_tasks (task_type, organization_id, priority, payload, created_at, label_selector)
		SELECT 'scanner_plugin', $1, 100, '{"plugin": "echo"}', now() - interval '1 hour', '{"match_labels": {"zone": "mars"}}'::jsonb
		FROM generate_series(1, 20000)`, org)
	var want []uuid.UUID
	for range 4 {
		want = append(want, g.CreateTask(t, org, harness.TaskSpec{}))
	}
	got := lease(t, w, 8, 0)
	var ids []uuid.UUID
	for _, l := range got {
		ids = append(ids, l.Task.Id)
	}
	require.ElementsMatch(t, want, ids)
}

// TestPinScenario: a pinned task goes to its worker only; while that worker
// cannot lease, the task says pinned_worker_unavailable; a pin to a worker
// the organization cannot see is refused.
func TestPinScenario(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	pinned, other := g.NewWorker(t, "pinned", 2, org), g.NewWorker(t, "other", 2, org)
	task := g.CreateTask(t, org, harness.TaskSpec{PinnedWorkerID: &pinned.ID, Priority: 5})
	require.Equal(t, pinned.ID, *g.Task(t, task).PinnedWorkerId)
	require.Empty(t, lease(t, other, 2, 0), "another worker never takes it")
	require.Equal(t, "pinned_worker_unavailable", pendingReason(t, g, task), "its worker never polled")

	got := lease(t, pinned, 2, 0)
	require.Len(t, got, 1)
	require.Equal(t, task, got[0].Task.Id)
	completeAs(t, pinned, got[0], "succeeded", nil)

	// Offline: the task waits for its worker, even with another one online.
	offline := g.CreateTask(t, org, harness.TaskSpec{PinnedWorkerID: &pinned.ID})
	_, err := g.Pool.Exec(context.Background(), `UPDATE workers SET last_seen_at = now() - interval '1 hour' WHERE id = $1`, pinned.ID)
	require.NoError(t, err)
	require.Empty(t, lease(t, other, 2, 0))
	require.Equal(t, "pinned_worker_unavailable", pendingReason(t, g, offline))

	// Revoked: for good.
	res, err := g.Control.RevokeWorkerWithResponse(context.Background(), pinned.ID, apiclient.RevokeRequest{Reason: "stolen"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Equal(t, "pinned_worker_unavailable", pendingReason(t, g, offline))

	// A worker the organization cannot see: refused, without saying more.
	stranger := g.NewWorker(t, "stranger", 1)
	for _, id := range []uuid.UUID{stranger.ID, uuid.New()} {
		payload := apiclient.JSONObject(`{"plugin": "echo"}`)
		created, err := g.Control.CreateTaskWithResponse(context.Background(), nil, apiclient.CreateTaskRequest{
			OrganizationId: org, TaskType: "scanner_plugin", Payload: &payload, PinnedWorkerId: &id})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, created.StatusCode(), string(created.Body))
	}
}

// TestLabelValidation: bad label keys, values and selectors are problems
// (400) naming the field.
func TestLabelValidation(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w", 1, org)
	for _, change := range []map[string]*string{{"Bad": ptr("x")}, {"ok": ptr("not ok")}} {
		labels := apiclient.LabelChanges(change)
		res, err := g.Control.UpdateWorkerWithResponse(context.Background(), w.ID, &apiclient.UpdateWorkerParams{},
			apiclient.UpdateWorkerRequest{Labels: &labels})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, res.StatusCode(), string(res.Body))
		require.Contains(t, string(res.Body), "labels")
	}
	payload := apiclient.JSONObject(`{"plugin": "echo"}`)
	res, err := g.Control.CreateTaskWithResponse(context.Background(), nil, apiclient.CreateTaskRequest{
		OrganizationId: org, TaskType: "scanner_plugin", Payload: &payload, LabelSelector: &apiclient.LabelSelector{
			MatchExpressions: &[]apiclient.LabelRequirement{{Key: "zone", Operator: apiclient.LabelIn}}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, res.StatusCode(), string(res.Body))
	require.Contains(t, string(res.Body), "label_selector")
}

// TestScheduledTaskSelectorAndPin: a task schedule's selector and pin pass
// to the tasks it creates.
func TestScheduledTaskSelectorAndPin(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w", 1, org)
	setLabels(t, g, w.ID, map[string]*string{"zone": ptr("eu")})
	req := everySecondTask(org, "pinned")
	req.Timing.IntervalSeconds = ptr(3600)
	req.Definition.Task.LabelSelector = matchLabels(map[string]string{"zone": "eu"})
	req.Definition.Task.PinnedWorkerId = &w.ID
	sc := createSchedule(t, g, req)
	require.Equal(t, w.ID, *sc.Definition.Task.PinnedWorkerId)

	run, err := g.Control.RunScheduleWithResponse(ctx, sc.Id, &apiclient.RunScheduleParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, run.StatusCode(), string(run.Body))
	task := g.Task(t, *run.JSON201.TaskId)
	require.Equal(t, w.ID, *task.PinnedWorkerId)
	require.Equal(t, map[string]string{"zone": "eu"}, *task.LabelSelector.MatchLabels)
	got := lease(t, w, 1, 0)
	require.Len(t, got, 1)
	require.Equal(t, task.Id, got[0].Task.Id)
}
