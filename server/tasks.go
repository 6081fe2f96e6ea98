package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// CreateTask creates a task, idempotently when given an Idempotency-Key.
func (h *handlers) CreateTask(ctx context.Context, req api.CreateTaskRequestObject) (api.CreateTaskResponseObject, error) {
	tenant := tenantFrom(ctx)
	var err error
	b := req.Body
	p := store.CreateTaskParams{
		OrganizationID:        b.OrganizationId,
		TaskType:              string(b.TaskType),
		AttemptTimeoutSeconds: b.AttemptTimeoutSeconds,
		LabelSelector:         fromAPISelector(b.LabelSelector),
		PinnedWorkerID:        b.PinnedWorkerId,
	}
	if b.Payload != nil {
		p.Payload = *b.Payload
	}
	if b.RequiredCapabilities != nil {
		p.RequiredCapabilities = *b.RequiredCapabilities
	}
	if b.CriticalCapabilities != nil {
		p.CriticalCapabilities = *b.CriticalCapabilities
	}
	if b.Priority != nil {
		p.Priority = *b.Priority
	}
	if b.DelaySeconds != nil {
		p.Delay = time.Duration(*b.DelaySeconds * float64(time.Second))
	}
	if b.ExecutionTimeoutSeconds != nil {
		p.ExecutionTimeout = time.Duration(*b.ExecutionTimeoutSeconds * float64(time.Second))
	}
	if b.MaxAttempts != nil {
		p.MaxAttempts = *b.MaxAttempts
	}
	if b.LeaseDurationSeconds != nil {
		p.LeaseDurationSeconds = *b.LeaseDurationSeconds
	}
	if r := b.Retry; r != nil {
		p.RetryBaseSeconds, p.RetryMaxSeconds = 1, 300
		if r.BaseSeconds != nil {
			p.RetryBaseSeconds = *r.BaseSeconds
		}
		if r.MaxSeconds != nil {
			p.RetryMaxSeconds = *r.MaxSeconds
		}
		if p.RetryMaxSeconds < p.RetryBaseSeconds {
			return nil, problem.Wrap(store.ErrInvalid, "retry.max_seconds must not be below retry.base_seconds")
		}
	}
	if b.SecretRefs != nil {
		p.SecretRefs = *b.SecretRefs
	}
	p.Trigger = &store.Trigger{Kind: store.TriggerAPI, TokenID: tokenOf(ctx)}
	if p.IdempotencyKey, p.RequestSHA256, err = idempotency(req.Params.IdempotencyKey, b); err != nil {
		return nil, err
	}
	ctx = h.audit(ctx, "task.create", "task", "", &p.OrganizationID, nil)
	task, replayed, err := h.store.CreateTask(ctx, tenant, p)
	if err != nil {
		return nil, err
	}
	if replayed {
		return api.CreateTask200JSONResponse{Body: toTask(task), Headers: api.CreateTask200ResponseHeaders{IdempotentReplayed: ptr("true")}}, nil
	}
	if p.ExecutionTimeout > 0 {
		// A dormant sweeper must wake for this deadline (it is relative to
		// the database's clock at creation, close enough for a wake-up).
		h.services.DueWithin(p.ExecutionTimeout)
	}
	return api.CreateTask201JSONResponse(toTask(task)), nil
}

// idempotency returns a creation request's Idempotency-Key and, when there
// is one, the checksum that tells a replay from a reuse of the key.
func idempotency(key *string, body any) (string, string, error) {
	if key == nil {
		return "", "", nil
	}
	sum, err := canonicalSHA256(body)
	return *key, sum, err
}

// canonicalSHA256 hashes a value's canonical JSON (object keys sorted, no
// insignificant whitespace, numbers as written), so one meaning has one
// checksum however the client formatted it.
func canonicalSHA256(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return "", err
	}
	canonical, err := json.Marshal(generic)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:]), nil
}

// ListTasks pages tasks the caller may see.
func (h *handlers) ListTasks(ctx context.Context, req api.ListTasksRequestObject) (api.ListTasksResponseObject, error) {
	tenant, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	p := store.ListTasksParams{OrganizationID: req.Params.OrganizationId, After: after, Limit: limit}
	if req.Params.State != nil {
		p.State = ptr(store.TaskState(*req.Params.State))
	}
	if req.Params.TaskType != nil {
		p.TaskType = ptr(string(*req.Params.TaskType))
	}
	if req.Params.Trigger != nil {
		p.Trigger = ptr(store.TriggerKind(*req.Params.Trigger))
	}
	p.ScheduleID = req.Params.ScheduleId
	p.ScanID = req.Params.ScanId
	tasks, next, err := h.store.ListTasks(ctx, tenant, p)
	if err != nil {
		return nil, err
	}
	return api.ListTasks200JSONResponse{Items: mapSlice(tasks, toTask), NextCursor: encodeCursor(next)}, nil
}

// GetTask returns a task with its attempts and pending reason.
func (h *handlers) GetTask(ctx context.Context, req api.GetTaskRequestObject) (api.GetTaskResponseObject, error) {
	tenant := tenantFrom(ctx)
	task, attempts, err := h.store.GetTask(ctx, tenant, req.TaskId, h.onlineWindow())
	if err != nil {
		return nil, err
	}
	t := toTask(task)
	out := api.GetTask200JSONResponse{
		Id: t.Id, TaskType: t.TaskType, OrganizationId: t.OrganizationId, ScanId: t.ScanId, ScanJobId: t.ScanJobId,
		State: t.State, PendingReason: t.PendingReason, Priority: t.Priority, Payload: t.Payload,
		RequiredCapabilities: t.RequiredCapabilities, AttemptCount: t.AttemptCount, MaxAttempts: t.MaxAttempts,
		AvailableAt: t.AvailableAt, ExecutionDeadlineAt: t.ExecutionDeadlineAt, LeaseDurationSeconds: t.LeaseDurationSeconds,
		AttemptTimeoutSeconds: t.AttemptTimeoutSeconds, CancelRequestedAt: t.CancelRequestedAt, CompletedAt: t.CompletedAt,
		LastErrorCode: t.LastErrorCode, LastError: t.LastError, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, Trigger: t.Trigger,
		LabelSelector: t.LabelSelector, PinnedWorkerId: t.PinnedWorkerId,
		Attempts: mapSlice(attempts, toAttempt),
	}
	return out, nil
}

// CancelTask cancels a task or asks its worker to stop.
func (h *handlers) CancelTask(ctx context.Context, req api.CancelTaskRequestObject) (api.CancelTaskResponseObject, error) {
	tenant := tenantFrom(ctx)
	ctx = h.audit(ctx, "task.cancel", "task", req.TaskId.String(), nil, nil)
	task, err := h.store.CancelTask(ctx, tenant, req.TaskId)
	if err != nil {
		return nil, err
	}
	return api.CancelTask200JSONResponse(toTask(task)), nil
}

// RetryTask redrives a dead-lettered or cancelled task.
func (h *handlers) RetryTask(ctx context.Context, req api.RetryTaskRequestObject) (api.RetryTaskResponseObject, error) {
	tenant := tenantFrom(ctx)
	ctx = h.audit(ctx, "task.retry", "task", req.TaskId.String(), nil, nil)
	task, err := h.store.RetryTask(ctx, tenant, req.TaskId)
	if err != nil {
		return nil, err
	}
	return api.RetryTask200JSONResponse(toTask(task)), nil
}
