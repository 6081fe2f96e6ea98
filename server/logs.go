package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// AppendLogs appends a chunk to an attempt's log, idempotently by offset.
func (h *handlers) AppendLogs(ctx context.Context, req api.AppendLogsRequestObject) (api.AppendLogsResponseObject, error) {
	ref := store.AttemptRef{WorkerID: workerFrom(ctx), AttemptID: req.AttemptId, LeaseToken: req.Params.LeaseToken}
	// The redaction step (redact.go) chose the redactor of the attempt's
	// secrets, if its task has any; the store applies it chunk by chunk.
	res, err := h.store.AppendRedactedLog(ctx, ref, req.Body.Offset, []byte(req.Body.Data), logRedactorFrom(ctx), h.cfg.Limits.LogBytesPerAttempt)
	var offsetErr *store.LogOffsetError
	if errors.As(err, &offsetErr) {
		p := newProblem(http.StatusConflict, problem.LogOffsetMismatch,
			problem.Text(fmt.Sprintf("the chunk does not continue the log: the next chunk must start at offset %d", offsetErr.Expected)))
		p.ExpectedOffset = &offsetErr.Expected
		return nil, p
	}
	if err != nil {
		return nil, err
	}
	h.follows.poke(req.AttemptId)
	return api.AppendLogs200JSONResponse{
		NextOffset: res.NextOffset, Truncated: res.Truncated,
		LeaseState: api.LeaseState(res.Lease.State), LeaseTtlSeconds: secondsOf(res.Lease.LeaseTTL),
	}, nil
}

// logReadLimit bounds one log read.
const logReadLimit = 1 << 20

// GetTaskLogs reads an attempt's log, optionally following it.
func (h *handlers) GetTaskLogs(ctx context.Context, req api.GetTaskLogsRequestObject) (api.GetTaskLogsResponseObject, error) {
	tenant := tenantFrom(ctx)
	var err error
	p := req.Params
	attempt, offset := 0, int64(0)
	if p.Attempt != nil {
		attempt = *p.Attempt
	}
	if p.Offset != nil {
		offset = int64(*p.Offset)
	}
	var lt store.LogText
	if p.Follow != nil && *p.Follow {
		wait := 20 * time.Second
		if p.WaitSeconds != nil {
			wait = time.Duration(*p.WaitSeconds) * time.Second
		}
		noteLongPoll(ctx)
		lt, err = h.followTaskLog(ctx, tenant, req.TaskId, attempt, offset, min(wait, h.cfg.MaxWait))
	} else {
		lt, err = h.store.ReadTaskLog(ctx, tenant, req.TaskId, attempt, offset, logReadLimit)
	}
	if err != nil {
		return nil, err
	}
	// A read that ends inside a character stops before it; the next read
	// starts there.
	data := lt.Data
	for len(data) > 0 && !utf8.Valid(data) {
		data = data[:len(data)-1]
	}
	return api.GetTaskLogs200JSONResponse{
		AttemptId: &lt.AttemptID, AttemptNumber: lt.AttemptNumber, Offset: lt.Offset,
		NextOffset: lt.Offset + int64(len(data)), Data: string(data), Truncated: &lt.Truncated, Complete: lt.Complete && len(data) == len(lt.Data),
	}, nil
}

// followTaskLog reads a log like ReadTaskLog and, when there is nothing new
// and the attempt is still active, waits up to wait for data or the
// attempt's end through the replica's shared reader of that attempt (see
// logFollowers): each request reads the database once, to check its scope
// and what is there; waiting costs no query of its own.
func (h *handlers) followTaskLog(ctx context.Context, tenant store.Tenant, task uuid.UUID, attempt int, offset int64, wait time.Duration) (store.LogText, error) {
	release, err := h.follows.acquire(authFrom(ctx).principal.TokenID, h.cfg.Limits)
	if err != nil {
		return store.LogText{}, err
	}
	defer release()
	lt, err := h.store.ReadTaskLog(ctx, tenant, task, attempt, offset, logReadLimit)
	if err != nil || len(lt.Data) > 0 || lt.Complete || wait <= 0 {
		return lt, err
	}
	deadline, stop := context.WithTimeout(ctx, wait)
	defer stop()
	tail := h.follows.join(lt.AttemptID, min(offset, lt.Stored))
	defer h.follows.leave(tail)
	r := h.follows.wait(deadline, tail, offset, logReadLimit, h.hub.Closed())
	switch {
	case r.direct:
		// Behind what the reader keeps: there are stored bytes at offset.
		return h.store.ReadTaskLog(ctx, tenant, task, lt.AttemptNumber, offset, logReadLimit)
	case r.timedOut:
		return lt, nil
	}
	lt.Data, lt.Truncated, lt.Complete = r.data, r.truncated, r.complete
	lt.NextOffset = offset + int64(len(r.data))
	return lt, nil
}
