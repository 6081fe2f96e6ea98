package workerprotocol

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// completeNext completes l with outcome succeeded and asks for up to n
// next leases in the same call, waiting up to wait seconds.
func completeNext(t *testing.T, w *harness.Worker, l apiclient.Lease, n, wait int) *apiclient.CompleteAttemptResponse {
	t.Helper()
	res, err := w.Client.CompleteAttemptWithResponse(context.Background(), l.AttemptId,
		&apiclient.CompleteAttemptParams{LeaseToken: l.LeaseToken},
		apiclient.CompleteRequest{Outcome: "succeeded", Next: &apiclient.NextLeases{MaxTasks: &n, WaitSeconds: &wait}})
	require.NoError(t, err)
	return res
}

// heartbeatStatus renews one lease and returns the HTTP status.
func heartbeatStatus(t *testing.T, w *harness.Worker, l apiclient.Lease) int {
	t.Helper()
	res, err := w.Client.HeartbeatAttemptWithResponse(context.Background(), l.AttemptId, &apiclient.HeartbeatAttemptParams{LeaseToken: l.LeaseToken})
	require.NoError(t, err)
	return res.StatusCode()
}

// TestCompleteWithNextLeasesInTheSameCall runs a one-slot worker through a
// backlog with one request per task: each completion asks for the next
// lease. Repeating a completion (its answer lost) returns the same next
// lease under a fresh token, never a second one; the first token stops
// working; and with the backlog gone the call answers at once, empty.
func TestCompleteWithNextLeasesInTheSameCall(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	tasks := map[uuid.UUID]bool{}
	for range 3 {
		tasks[g.CreateTask(t, org, harness.TaskSpec{})] = true
	}
	first := lease(t, w, 1, 0)
	require.Len(t, first, 1)
	current := first[0]

	res := completeNext(t, w, current, 1, 0)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Equal(t, apiclient.TaskState("completed"), res.JSON200.TaskState)
	require.NotNil(t, res.JSON200.Leases)
	require.Len(t, *res.JSON200.Leases, 1, "the slot the completion freed is leased in the same call")
	next := (*res.JSON200.Leases)[0]
	require.NotEqual(t, current.Task.Id, next.Task.Id)

	// The answer was lost: the worker repeats the call.
	again := completeNext(t, w, current, 1, 0)
	require.Equal(t, http.StatusOK, again.StatusCode(), string(again.Body))
	require.Equal(t, res.JSON200.FinishedAt, again.JSON200.FinishedAt, "the completion is answered with the original")
	require.Len(t, *again.JSON200.Leases, 1)
	replayed := (*again.JSON200.Leases)[0]
	require.Equal(t, next.AttemptId, replayed.AttemptId, "the same lease, not a second one")
	require.NotEqual(t, next.LeaseToken, replayed.LeaseToken, "under a fresh token")
	require.Equal(t, http.StatusConflict, heartbeatStatus(t, w, next), "the lost answer's token stops working")
	require.Equal(t, http.StatusOK, heartbeatStatus(t, w, replayed))
	require.Equal(t, 2, countRows(t, g, "worker_task_attempts"), "two tasks leased, once each")

	current = replayed
	for range 2 {
		res := completeNext(t, w, current, 1, 0)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		if len(*res.JSON200.Leases) == 0 {
			break
		}
		current = (*res.JSON200.Leases)[0]
	}
	for id := range tasks {
		require.Equal(t, apiclient.TaskState("completed"), g.Task(t, id).State)
	}
	require.Equal(t, 3, countRows(t, g, "worker_task_attempts"), "each task ran once")
}

// TestCompleteWithNextWaitsForWork: a completion that asks for the next
// lease with a wait is written at once and then waits, as a long-poll does,
// for a task created meanwhile.
func TestCompleteWithNextWaitsForWork(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	done := g.CreateTask(t, org, harness.TaskSpec{})
	l := lease(t, w, 1, 0)
	require.Len(t, l, 1)

	answer := make(chan *apiclient.CompleteAttemptResponse, 1)
	go func() {
		res, err := w.Client.CompleteAttemptWithResponse(context.Background(), l[0].AttemptId,
			&apiclient.CompleteAttemptParams{LeaseToken: l[0].LeaseToken},
			apiclient.CompleteRequest{Outcome: "succeeded", Next: &apiclient.NextLeases{WaitSeconds: new(20)}})
		if err != nil {
			t.Error(err)
		}
		answer <- res
	}()
	harness.WaitFor(t, 20*time.Second, "the completion's next poll to wait in the hub", func() bool { return g.Server.Hub().Waiting() == 1 })
	require.Equal(t, apiclient.TaskState("completed"), g.Task(t, done).State, "the completion is written before the wait")
	created := g.CreateTask(t, org, harness.TaskSpec{})
	res := <-answer
	require.NotNil(t, res)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Len(t, *res.JSON200.Leases, 1)
	require.Equal(t, created, (*res.JSON200.Leases)[0].Task.Id)
}

// TestCompleteManyWithNext completes a batch and leases the freed slots in
// the same call; the repeated call replays the same leases, in any order of
// its completions, and a completion refused for its stale token frees no
// slot. A `next` the contract refuses leaves every completion unapplied.
func TestCompleteManyWithNext(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 3, org)
	for range 6 {
		g.CreateTask(t, org, harness.TaskSpec{})
	}
	held := lease(t, w, 3, 0)
	require.Len(t, held, 3)

	items := []apiclient.CompletionItem{
		{AttemptId: held[0].AttemptId, LeaseToken: held[0].LeaseToken, Outcome: "succeeded"},
		{AttemptId: held[1].AttemptId, LeaseToken: held[1].LeaseToken, Outcome: "succeeded"},
		{AttemptId: held[2].AttemptId, LeaseToken: "stale-token-0123456789", Outcome: "succeeded"},
	}
	send := func(body apiclient.CompleteManyRequest) *apiclient.CompleteAttemptsResponse {
		res, err := w.Client.CompleteAttemptsWithResponse(context.Background(), body)
		require.NoError(t, err)
		return res
	}

	refused := send(apiclient.CompleteManyRequest{Completions: items, Next: &apiclient.NextLeases{MaxTasks: new(0)}})
	require.Equal(t, http.StatusBadRequest, refused.StatusCode(), string(refused.Body))
	require.Equal(t, apiclient.TaskState("leased"), g.Task(t, held[0].Task.Id).State, "a refused call applies nothing")

	res := send(apiclient.CompleteManyRequest{Completions: items, Next: &apiclient.NextLeases{MaxTasks: new(3)}})
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	statuses := []int{}
	for _, a := range res.JSON200.Completions {
		statuses = append(statuses, a.Status)
	}
	require.Equal(t, []int{200, 200, 409}, statuses)
	require.NotNil(t, res.JSON200.Leases)
	granted := *res.JSON200.Leases
	require.Len(t, granted, 2, "two slots were freed; the stale completion freed none")

	// Repeated with the completions in another order: the same call.
	reordered := []apiclient.CompletionItem{items[2], items[0], items[1]}
	again := send(apiclient.CompleteManyRequest{Completions: reordered, Next: &apiclient.NextLeases{MaxTasks: new(3)}})
	require.Equal(t, http.StatusOK, again.StatusCode(), string(again.Body))
	replayed := *again.JSON200.Leases
	require.ElementsMatch(t, []uuid.UUID{granted[0].AttemptId, granted[1].AttemptId}, []uuid.UUID{replayed[0].AttemptId, replayed[1].AttemptId})
	require.Equal(t, 5, countRows(t, g, "worker_task_attempts"), "three first leases and two next ones, once each")

	// Without next, no leases field.
	plain := send(apiclient.CompleteManyRequest{Completions: []apiclient.CompletionItem{
		{AttemptId: replayed[0].AttemptId, LeaseToken: replayed[0].LeaseToken, Outcome: "succeeded"}}})
	require.Equal(t, http.StatusOK, plain.StatusCode(), string(plain.Body))
	require.Nil(t, plain.JSON200.Leases)
}

// TestRuntimeRunsABacklogWithOneCallPerTask: the Go runtime with one slot
// works through a backlog on a real gateway taking each next task with the
// completion of the last: it polls once at the start and once when the
// backlog is gone, not once per task.
func TestRuntimeRunsABacklogWithOneCallPerTask(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	const n = 10
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = g.CreateTask(t, org, harness.TaskSpec{})
	}
	w.Runtime(t, 1, func(context.Context, *workerclient.LeasedTask) error { return nil })
	for _, id := range ids {
		g.WaitTaskState(t, id, "completed")
	}
	m := harness.Scrape(t, g, g.AdminToken)
	require.Equal(t, float64(n), m[`gateway_http_requests_total{code="200",route="POST /v1/attempts/complete"}`], "a completion call per task")
	require.LessOrEqual(t, m[`gateway_http_requests_total{code="200",route="POST /v1/leases"}`], 2.0,
		"a poll at the start and one when the backlog ran out; the tasks between came with completions")
	require.Equal(t, n, countRows(t, g, "worker_task_attempts"), "each task ran once")
}
