package workerprotocol

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

func TestLeaseHeartbeatCompleteThroughWorkerRuntime(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 2, org)
	task := g.CreateTask(t, org, harness.TaskSpec{Payload: `{"plugin": "echo", "input": {"n": 1}}`})

	var seen atomic.Value
	w.Runtime(t, 2, func(ctx context.Context, lt *workerclient.LeasedTask) error {
		seen.Store(string(lt.Payload))
		return nil
	})
	detail := g.WaitTaskState(t, task, "completed")
	require.JSONEq(t, `{"plugin": "echo", "input": {"n": 1}}`, seen.Load().(string))
	require.Len(t, detail.Attempts, 1)
	require.Equal(t, apiclient.AttemptStatus("succeeded"), detail.Attempts[0].Status)
	require.Equal(t, w.ID, detail.Attempts[0].WorkerId)
}

func TestRawProtocolLeaseHeartbeatComplete(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{})

	leases := lease(t, w, 1, 5)
	require.Len(t, leases, 1)
	l := leases[0]
	require.Equal(t, task, l.Task.Id)
	require.GreaterOrEqual(t, len(l.LeaseToken), 32, "lease tokens carry at least 128 random bits")
	require.Positive(t, l.LeaseTtlSeconds)
	require.Positive(t, l.HeartbeatIntervalSeconds)

	hb, err := w.Client.HeartbeatAttemptWithResponse(context.Background(), l.AttemptId, &apiclient.HeartbeatAttemptParams{LeaseToken: l.LeaseToken})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, hb.StatusCode(), string(hb.Body))
	require.Equal(t, apiclient.LeaseState("active"), hb.JSON200.State)
	require.Equal(t, "running", string(g.Task(t, task).State), "a heartbeat implies start")

	batch, err := w.Client.HeartbeatWorkerWithResponse(context.Background(), apiclient.WorkerHeartbeatRequest{
		Leases: []apiclient.LeaseRef{{AttemptId: l.AttemptId, LeaseToken: l.LeaseToken}, {AttemptId: uuid.New(), LeaseToken: "0123456789abcdef0123"}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, batch.StatusCode(), string(batch.Body))
	require.Equal(t, apiclient.LeaseState("active"), batch.JSON200.Leases[0].State)
	require.Equal(t, apiclient.LeaseState("lost"), batch.JSON200.Leases[1].State)

	complete := func(outcome string) *apiclient.CompleteAttemptResponse {
		res, err := w.Client.CompleteAttemptWithResponse(context.Background(), l.AttemptId,
			&apiclient.CompleteAttemptParams{LeaseToken: l.LeaseToken},
			apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcome(outcome)})
		require.NoError(t, err)
		return res
	}
	first := complete("succeeded")
	require.Equal(t, http.StatusOK, first.StatusCode(), string(first.Body))
	require.Equal(t, apiclient.TaskState("completed"), first.JSON200.TaskState)
	again := complete("succeeded")
	require.Equal(t, http.StatusOK, again.StatusCode(), "repeating a completion returns the original answer")
	require.Equal(t, first.JSON200, again.JSON200)
	other := complete("failed")
	require.Equal(t, http.StatusConflict, other.StatusCode())
	require.Equal(t, "attempt-finished", problemCode(t, other.Body))

	hb, err = w.Client.HeartbeatAttemptWithResponse(context.Background(), l.AttemptId, &apiclient.HeartbeatAttemptParams{LeaseToken: l.LeaseToken})
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, hb.StatusCode())
	require.Equal(t, "lease-lost", problemCode(t, hb.Body))
}

func TestExpiredLeaseIsRetriedByAnotherWorkerAndStaleWritesAreRefused(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	stale := g.NewWorker(t, "stale", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{MaxAttempts: 3})

	leases := lease(t, stale, 1, 5)
	require.Len(t, leases, 1)
	l := leases[0]
	g.ExpireLeases(t, task)
	g.WaitTaskState(t, task, "retry_wait")

	fresh := g.NewWorker(t, "fresh", 1, org)
	fresh.Runtime(t, 1, func(context.Context, *workerclient.LeasedTask) error { return nil })
	detail := g.WaitTaskState(t, task, "completed")
	require.Len(t, detail.Attempts, 2)
	require.Equal(t, apiclient.AttemptStatus("expired"), detail.Attempts[0].Status)
	require.Equal(t, fresh.ID, detail.Attempts[1].WorkerId)

	// The stale worker's late writes change nothing.
	hb, err := stale.Client.HeartbeatAttemptWithResponse(context.Background(), l.AttemptId, &apiclient.HeartbeatAttemptParams{LeaseToken: l.LeaseToken})
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, hb.StatusCode())
	res, err := stale.Client.CompleteAttemptWithResponse(context.Background(), l.AttemptId,
		&apiclient.CompleteAttemptParams{LeaseToken: l.LeaseToken}, apiclient.CompleteRequest{Outcome: "succeeded"})
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, res.StatusCode())
	require.Equal(t, "lease-lost", problemCode(t, res.Body))
	after := g.Task(t, task)
	require.Equal(t, apiclient.AttemptStatus("expired"), after.Attempts[0].Status)
	require.Equal(t, apiclient.TaskState("completed"), after.State)
}

func TestNonRetryableFailureDeadLetters(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{MaxAttempts: 5})
	w.Runtime(t, 1, func(context.Context, *workerclient.LeasedTask) error {
		return workerclient.Permanent("bad-input", "the target is malformed")
	})
	detail := g.WaitTaskState(t, task, "failed_terminal")
	require.Len(t, detail.Attempts, 1, "a non-retryable failure is not retried")
	require.Equal(t, "bad-input", *detail.LastErrorCode)
	require.Equal(t, "bad-input", *detail.Attempts[0].ErrorCode)

	// An operator redrives it; it runs again.
	res, err := g.Control.RetryTaskWithResponse(context.Background(), task)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Equal(t, apiclient.TaskState("pending"), res.JSON200.State)
}

func TestRetryableFailuresExhaustAttempts(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	retry := apiclient.RetryPolicy{BaseSeconds: ptr(0.0), MaxSeconds: ptr(0.0)}
	payload := apiclient.JSONObject(`{"plugin": "fail"}`)
	res, err := g.Control.CreateTaskWithResponse(context.Background(), nil, apiclient.CreateTaskRequest{
		OrganizationId: org, TaskType: "scanner_plugin", Payload: &payload, MaxAttempts: ptr(2), Retry: &retry})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	w.Runtime(t, 1, func(context.Context, *workerclient.LeasedTask) error {
		return workerclient.Retryable("flaky", "try again")
	})
	detail := g.WaitTaskState(t, res.JSON201.Id, "failed_terminal")
	require.Len(t, detail.Attempts, 2)
}

func TestCancelPendingAndRunningTasks(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")

	pending := g.CreateTask(t, org, harness.TaskSpec{})
	res, err := g.Control.CancelTaskWithResponse(context.Background(), pending)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Equal(t, apiclient.TaskState("cancelled"), res.JSON200.State)

	w := g.NewWorker(t, "w1", 1, org)
	running := g.CreateTask(t, org, harness.TaskSpec{LeaseDurationSeconds: 6})
	started := make(chan struct{})
	cancelled := make(chan error, 1)
	w.Runtime(t, 1, func(ctx context.Context, lt *workerclient.LeasedTask) error {
		close(started)
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return ctx.Err()
	})
	<-started
	g.WaitTaskState(t, running, "running")
	res, err = g.Control.CancelTaskWithResponse(context.Background(), running)
	require.NoError(t, err)
	require.Equal(t, apiclient.TaskState("cancelling"), res.JSON200.State)
	select {
	case cause := <-cancelled:
		require.ErrorIs(t, cause, workerclient.ErrCancelRequested)
	case <-time.After(30 * time.Second):
		t.Fatal("the worker's context was not cancelled")
	}
	detail := g.WaitTaskState(t, running, "cancelled")
	require.Equal(t, apiclient.AttemptStatus("cancelled"), detail.Attempts[0].Status)

	// Cancelling again is harmless; cancelling a finished task is refused.
	res, err = g.Control.CancelTaskWithResponse(context.Background(), running)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode())
}

func TestCapacityCapabilityAndAssignmentFiltering(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	other := g.NewOrganization(t, "other")

	w := g.NewWorker(t, "w1", 1, org)
	for range 3 {
		g.CreateTask(t, org, harness.TaskSpec{})
	}
	require.Len(t, lease(t, w, 5, 0), 1, "capacity 1 caps max_tasks 5")
	require.Empty(t, lease(t, w, 5, 0), "no free slot, no lease")

	// Capabilities: the task needs what the worker does not advertise.
	capable := g.NewWorker(t, "gpu", 2, org)
	needsGPU := g.CreateTask(t, org, harness.TaskSpec{RequiredCapabilities: map[string]any{"gpu": true}, Priority: 10})
	plain := g.NewWorker(t, "plain", 5, org)
	for _, l := range lease(t, plain, 5, 0) {
		require.NotEqual(t, needsGPU, l.Task.Id, "a worker without the capability never leases the task")
	}
	caps := apiclient.Capabilities(`{"gpu": true}`)
	res, err := capable.Client.AcquireLeasesWithResponse(context.Background(), nil,
		apiclient.LeaseRequest{MaxTasks: ptr(1), WaitSeconds: ptr(0), Capabilities: &caps})
	require.NoError(t, err)
	require.Len(t, res.JSON200.Leases, 1)
	require.Equal(t, needsGPU, res.JSON200.Leases[0].Task.Id, "the advertisement is persisted and used; priority first")

	// Assignment: a worker never leases an organization it does not serve.
	otherTask := g.CreateTask(t, other, harness.TaskSpec{})
	require.Empty(t, lease(t, g.NewWorker(t, "unassigned", 5), 5, 0))
	require.Equal(t, "no_assigned_worker", string(*g.Task(t, otherTask).PendingReason))
}

func TestCrossOrganizationAttemptsAreNotFound(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	orgA := g.NewOrganization(t, "a")
	orgB := g.NewOrganization(t, "b")
	workerA := g.NewWorker(t, "wa", 1, orgA)
	workerB := g.NewWorker(t, "wb", 1, orgB)
	g.CreateTask(t, orgB, harness.TaskSpec{})
	require.Empty(t, lease(t, workerA, 1, 0), "A's worker never leases B's task")
	leases := lease(t, workerB, 1, 0)
	require.Len(t, leases, 1)
	l := leases[0]

	params := &apiclient.HeartbeatAttemptParams{LeaseToken: l.LeaseToken}
	hb, err := workerA.Client.HeartbeatAttemptWithResponse(context.Background(), l.AttemptId, params)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, hb.StatusCode())
	st, err := workerA.Client.StartAttemptWithResponse(context.Background(), l.AttemptId, &apiclient.StartAttemptParams{LeaseToken: l.LeaseToken})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, st.StatusCode())
	done, err := workerA.Client.CompleteAttemptWithResponse(context.Background(), l.AttemptId,
		&apiclient.CompleteAttemptParams{LeaseToken: l.LeaseToken}, apiclient.CompleteRequest{Outcome: "succeeded"})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, done.StatusCode())
	require.NotContains(t, string(done.Body), l.Task.Id.String())
	require.Equal(t, apiclient.TaskState("leased"), g.Task(t, l.Task.Id).State, "nothing changed")

	// A token scoped to organization A cannot see B's task either.
	tokenA, _, err := g.Store.CreateAPIToken(context.Background(), store.EveryOrganization(), storeTokenParams(orgA))
	require.NoError(t, err)
	scoped := g.ControlClient(t, tokenA)
	got, err := scoped.GetTaskWithResponse(context.Background(), l.Task.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, got.StatusCode())
	list, err := scoped.ListTasksWithResponse(context.Background(), &apiclient.ListTasksParams{})
	require.NoError(t, err)
	require.Empty(t, list.JSON200.Items)
}
