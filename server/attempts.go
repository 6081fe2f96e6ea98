package server

import (
	"context"

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
	p := store.CompleteParams{
		AttemptRef:         store.AttemptRef{WorkerID: workerFrom(ctx), AttemptID: req.AttemptId, LeaseToken: req.Params.LeaseToken},
		Outcome:            store.AttemptStatus(req.Body.Outcome),
		LastSequenceNumber: req.Body.LastSequenceNumber,
	}
	if e := req.Body.Error; e != nil {
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
	res, err := h.completions.Complete(ctx, p)
	if err != nil {
		return nil, err
	}
	if res.Replayed {
		h.metrics.replays.WithLabelValues("complete").Inc()
	}
	return api.CompleteAttempt200JSONResponse{
		AttemptId:     res.AttemptID,
		TaskId:        res.TaskID,
		AttemptStatus: api.AttemptStatus(res.AttemptStatus),
		TaskState:     api.TaskState(res.TaskState),
		FinishedAt:    res.FinishedAt,
		RetryAt:       res.RetryAt,
	}, nil
}
