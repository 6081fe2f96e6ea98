package workerprotocol

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// finalBatch is a result batch as a completion carries it inline.
func finalBatch(t *testing.T, seq int, host string) *apiclient.ResultBatch {
	t.Helper()
	var b apiclient.ResultBatch
	require.NoError(t, json.Unmarshal([]byte(scannerBatch(seq, host)), &b))
	return &b
}

// TestCompleteManyAnswersEachCompletionOnItsOwn sends one batch completion
// holding a success with its final results inline, a retryable failure, a
// stale lease token, another worker's attempt and a give-back, then sends the
// same call again: each completion is answered as it would have been alone,
// and the final results are ingested once.
func TestCompleteManyAnswersEachCompletionOnItsOwn(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 4, org)
	other := g.NewWorker(t, "w2", 1, org)
	for range 5 {
		g.CreateTask(t, org, harness.TaskSpec{})
	}
	mine := lease(t, w, 4, 0)
	require.Len(t, mine, 4)
	theirs := lease(t, other, 1, 0)
	require.Len(t, theirs, 1)

	retryable := true
	body := apiclient.CompleteManyRequest{Completions: []apiclient.CompletionItem{
		{AttemptId: mine[0].AttemptId, LeaseToken: mine[0].LeaseToken, Outcome: "succeeded", FinalResults: finalBatch(t, 1, "final.example")},
		{AttemptId: mine[1].AttemptId, LeaseToken: mine[1].LeaseToken, Outcome: "failed",
			Error: &apiclient.AttemptError{Code: "flaky", Retryable: &retryable}},
		{AttemptId: mine[2].AttemptId, LeaseToken: "stale-token-0123456789", Outcome: "succeeded"},
		{AttemptId: theirs[0].AttemptId, LeaseToken: theirs[0].LeaseToken, Outcome: "succeeded"},
		{AttemptId: mine[3].AttemptId, LeaseToken: mine[3].LeaseToken, Outcome: "cancelled"},
	}}
	check := func(res *apiclient.CompleteAttemptsResponse) {
		t.Helper()
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		answers := res.JSON200.Completions
		require.Len(t, answers, 5)
		for i, a := range answers {
			require.Equal(t, body.Completions[i].AttemptId, a.AttemptId, "answers come in the order given")
		}
		require.Equal(t, 200, answers[0].Status)
		require.Equal(t, apiclient.TaskState("completed"), answers[0].Result.TaskState)
		require.Equal(t, 200, answers[1].Status)
		require.Equal(t, apiclient.TaskState("retry_wait"), answers[1].Result.TaskState)
		require.NotNil(t, answers[1].Result.RetryAt)
		require.Equal(t, 409, answers[2].Status)
		require.Equal(t, "lease-lost", answers[2].Problem.Code)
		require.Nil(t, answers[2].Result)
		require.Equal(t, 404, answers[3].Status, "another worker's attempt does not exist for this one")
		require.Equal(t, "not-found", answers[3].Problem.Code)
		require.Equal(t, 200, answers[4].Status)
		require.Equal(t, apiclient.TaskState("pending"), answers[4].Result.TaskState, "a give-back makes the task leasable again")
	}
	res, err := w.Client.CompleteAttemptsWithResponse(context.Background(), body)
	require.NoError(t, err)
	check(res)
	again, err := w.Client.CompleteAttemptsWithResponse(context.Background(), body)
	require.NoError(t, err)
	check(again)
	require.Equal(t, res.JSON200.Completions[0].Result.FinishedAt, again.JSON200.Completions[0].Result.FinishedAt, "a repeat is answered with the original")

	require.Equal(t, 1, countRows(t, g, "worker_result_batches"), "the inline final results are persisted once")
	require.Equal(t, 2, countRows(t, g, "assets"), "final.example and 127.0.0.1, once each")
	require.Equal(t, apiclient.TaskState("leased"), g.Task(t, mine[2].Task.Id).State, "a stale token changed nothing")
	require.Equal(t, apiclient.TaskState("leased"), g.Task(t, theirs[0].Task.Id).State)

	// The worker that holds it completes it normally.
	done, err := other.Client.CompleteAttemptWithResponse(context.Background(), theirs[0].AttemptId,
		&apiclient.CompleteAttemptParams{LeaseToken: theirs[0].LeaseToken}, apiclient.CompleteRequest{Outcome: "succeeded"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, done.StatusCode(), string(done.Body))
}

// TestCompleteWithFinalResultsInline completes an attempt with its last
// result batch in the same call, twice: the batch is ingested once, the
// task completes once, and a batch that conflicts with the stored one under
// the same sequence number is refused without ending the attempt.
func TestCompleteWithFinalResultsInline(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 2, org)
	g.CreateTask(t, org, harness.TaskSpec{})
	g.CreateTask(t, org, harness.TaskSpec{})
	ls := lease(t, w, 2, 0)
	require.Len(t, ls, 2)
	s := harness.ResultSender{T: t, W: w, Base: g.URL}

	complete := func(l apiclient.Lease, req apiclient.CompleteRequest) *apiclient.CompleteAttemptResponse {
		res, err := w.Client.CompleteAttemptWithResponse(context.Background(), l.AttemptId,
			&apiclient.CompleteAttemptParams{LeaseToken: l.LeaseToken}, req)
		require.NoError(t, err)
		return res
	}
	req := apiclient.CompleteRequest{Outcome: "succeeded", FinalResults: finalBatch(t, 2, "inline.example")}
	first := complete(ls[0], req)
	require.Equal(t, http.StatusOK, first.StatusCode(), string(first.Body))
	require.Equal(t, apiclient.TaskState("completed"), first.JSON200.TaskState)
	second := complete(ls[0], req)
	require.Equal(t, http.StatusOK, second.StatusCode(), string(second.Body))
	require.Equal(t, first.JSON200.FinishedAt, second.JSON200.FinishedAt)
	require.Equal(t, 1, countRows(t, g, "worker_result_batches"))

	// The runtime's key for batch 1 of the second attempt is taken by a
	// batch sent alone; an inline batch 1 with other records is refused.
	sent := s.Send(ls[1], ls[1].AttemptId.String()+":1", scannerBatch(1, "alone.example"))
	require.Equal(t, http.StatusOK, sent.Status, string(sent.Body))
	refused := complete(ls[1], apiclient.CompleteRequest{Outcome: "succeeded", FinalResults: finalBatch(t, 1, "different.example")})
	require.Equal(t, http.StatusUnprocessableEntity, refused.StatusCode(), string(refused.Body))
	require.Equal(t, "idempotency-key-reused", problemCode(t, refused.Body))
	require.Equal(t, apiclient.TaskState("leased"), g.Task(t, ls[1].Task.Id).State, "the attempt did not end")
	// The same batch inline is the one already stored: accepted once.
	same := complete(ls[1], apiclient.CompleteRequest{Outcome: "succeeded", FinalResults: finalBatch(t, 1, "alone.example")})
	require.Equal(t, http.StatusOK, same.StatusCode(), string(same.Body))
	require.Equal(t, 2, countRows(t, g, "worker_result_batches"))
}
