package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// HeartbeatAttempt renews one lease.
func (h *handlers) HeartbeatAttempt(ctx context.Context, req api.HeartbeatAttemptRequestObject) (api.HeartbeatAttemptResponseObject, error) {
	st, err := h.store.HeartbeatAttempt(ctx, store.AttemptRef{WorkerID: workerFrom(ctx), AttemptID: req.AttemptId, LeaseToken: req.Params.LeaseToken})
	if err != nil {
		return nil, err
	}
	h.metrics.heartbeats.Inc()
	return api.HeartbeatAttempt200JSONResponse(h.toLeaseStatus(st)), nil
}

// StartAttempt marks an attempt running.
func (h *handlers) StartAttempt(ctx context.Context, req api.StartAttemptRequestObject) (api.StartAttemptResponseObject, error) {
	st, err := h.store.StartAttempt(ctx, store.AttemptRef{WorkerID: workerFrom(ctx), AttemptID: req.AttemptId, LeaseToken: req.Params.LeaseToken})
	if err != nil {
		return nil, err
	}
	return api.StartAttempt200JSONResponse(h.toLeaseStatus(st)), nil
}

// CompleteAttempt ends an attempt; repeating the same outcome is answered
// with the original answer.
func (h *handlers) CompleteAttempt(ctx context.Context, req api.CompleteAttemptRequestObject) (api.CompleteAttemptResponseObject, error) {
	arrived := time.Now()
	b := req.Body
	p, err := h.prepareCompletion(ctx, completion{
		ref:     store.AttemptRef{WorkerID: workerFrom(ctx), AttemptID: req.AttemptId, LeaseToken: req.Params.LeaseToken},
		outcome: b.Outcome, error: b.Error, lastSequenceNumber: b.LastSequenceNumber, finalResults: b.FinalResults,
	})
	if err != nil {
		return nil, err
	}
	res, err := h.completions.Complete(ctx, p)
	if err != nil {
		return nil, err
	}
	h.follows.poke(req.AttemptId) // its log followers learn it ended
	leases, err := h.leasesAfterCompletion(ctx, b.Next, []uuid.UUID{req.AttemptId}, arrived)
	if err != nil {
		return nil, err
	}
	r := h.completeResponse(res)
	return api.CompleteAttempt200JSONResponse{
		AttemptId: r.AttemptId, TaskId: r.TaskId, AttemptStatus: r.AttemptStatus, TaskState: r.TaskState,
		FinishedAt: r.FinishedAt, RetryAt: r.RetryAt, Leases: leases,
	}, nil
}

// CompleteAttempts ends many attempts, answering each on its own.
func (h *handlers) CompleteAttempts(ctx context.Context, req api.CompleteAttemptsRequestObject) (api.CompleteAttemptsResponseObject, error) {
	arrived := time.Now()
	items := req.Body.Completions
	answers := make([]api.CompletionAnswer, len(items))
	params := make([]store.CompleteParams, 0, len(items))
	ready := make([]int, 0, len(items)) // indexes of items whose params are in params
	for i, it := range items {
		answers[i].AttemptId = it.AttemptId
		p, err := h.prepareCompletion(ctx, completion{
			ref:     store.AttemptRef{WorkerID: workerFrom(ctx), AttemptID: it.AttemptId, LeaseToken: it.LeaseToken},
			outcome: it.Outcome, error: it.Error, lastSequenceNumber: it.LastSequenceNumber, finalResults: it.FinalResults,
		})
		if err != nil {
			h.setCompletionProblem(ctx, &answers[i], err)
			continue
		}
		params = append(params, p)
		ready = append(ready, i)
	}
	for k, out := range h.completions.CompleteAll(ctx, params) {
		i := ready[k]
		if out.Err != nil {
			h.setCompletionProblem(ctx, &answers[i], out.Err)
			continue
		}
		answers[i].Status = http.StatusOK
		answers[i].Result = ptr(h.completeResponse(out.Result))
		h.follows.poke(answers[i].AttemptId)
	}
	// The next leases follow every listed completion, whatever each one's
	// answer: a refused completion frees no slot, and the worker's free
	// capacity caps what it gets.
	leases, err := h.leasesAfterCompletion(ctx, req.Body.Next, mapSlice(items, func(it api.CompletionItem) uuid.UUID { return it.AttemptId }), arrived)
	if err != nil {
		return nil, err
	}
	return api.CompleteAttempts200JSONResponse{Completions: answers, Leases: leases}, nil
}

// completion is one completion as either route receives it.
type completion struct {
	ref                store.AttemptRef
	outcome            api.AttemptOutcome
	error              *api.AttemptError
	lastSequenceNumber *int
	finalResults       *api.ResultBatch
}

// prepareCompletion turns a completion into the store's terms, first
// persisting its final result batch, if any: exactly once, under the key the
// worker runtime uses for its batches, and claimed by the completion so that
// the attempt cannot end without it.
func (h *handlers) prepareCompletion(ctx context.Context, c completion) (store.CompleteParams, error) {
	p := store.CompleteParams{AttemptRef: c.ref, Outcome: store.AttemptStatus(c.outcome), LastSequenceNumber: c.lastSequenceNumber}
	if e := c.error; e != nil {
		p.ErrorCode = e.Code
		if e.Message != nil {
			p.ErrorMessage = *e.Message
		}
		if e.Retryable != nil {
			p.Retryable = *e.Retryable
		}
	}
	if p.Outcome == store.AttemptFailed && p.ErrorCode == "" {
		p.ErrorCode = "failed"
	}
	if fr := c.finalResults; fr != nil {
		if c.lastSequenceNumber != nil && *c.lastSequenceNumber != fr.SequenceNumber {
			return store.CompleteParams{}, newProblem(http.StatusBadRequest, problem.BadRequest,
				"last_sequence_number must be final_results.sequence_number when both are given")
		}
		key := c.ref.AttemptID.String() + ":" + strconv.Itoa(fr.SequenceNumber)
		if _, err := h.acceptResultBatch(ctx, c.ref, key, *fr); err != nil {
			return store.CompleteParams{}, err
		}
		p.LastSequenceNumber = &fr.SequenceNumber
	}
	return p, nil
}

func (h *handlers) completeResponse(res store.CompleteResult) api.CompleteResponse {
	if res.Replayed {
		h.metrics.replays.WithLabelValues("complete").Inc()
	}
	return api.CompleteResponse{
		AttemptId:     res.AttemptID,
		TaskId:        res.TaskID,
		AttemptStatus: api.AttemptStatus(res.AttemptStatus),
		TaskState:     api.TaskState(res.TaskState),
		FinishedAt:    res.FinishedAt,
		RetryAt:       res.RetryAt,
	}
}

// setCompletionProblem answers one completion of a batch with the problem
// it would have got alone; an unexpected error's cause is logged, not shown.
func (h *handlers) setCompletionProblem(ctx context.Context, a *api.CompletionAnswer, err error) {
	p := problemFor(err)
	if p.Status >= http.StatusInternalServerError {
		h.logger.Error("completion failed", "request_id", requestIDFrom(ctx), "attempt_id", a.AttemptId.String(), "error", err.Error())
	}
	a.Status = p.Status
	a.Problem = &api.Problem{Type: p.Type, Title: p.Title, Status: p.Status, Code: p.Code}
	if p.Detail != "" {
		detail := string(p.Detail)
		a.Problem.Detail = &detail
	}
	if id := requestIDFrom(ctx); id != "" {
		a.Problem.RequestId = &id
	}
}
