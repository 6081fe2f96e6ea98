package server

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// CreateSchedule creates a schedule at version 1.
func (h *handlers) CreateSchedule(ctx context.Context, req api.CreateScheduleRequestObject) (api.CreateScheduleResponseObject, error) {
	tenant := tenantFrom(ctx)
	b := req.Body
	p, err := scheduleParams(ctx, b.Name, b.Timing, b.Definition)
	if err != nil {
		return nil, err
	}
	ctx = h.audit(ctx, "schedule.create", "schedule", "", &b.OrganizationId, nil)
	sc, err := h.store.CreateSchedule(ctx, tenant, b.OrganizationId, p)
	if err != nil {
		return nil, err
	}
	out, err := toSchedule(sc)
	if err != nil {
		return nil, err
	}
	return api.CreateSchedule201JSONResponse(out), nil
}

// UpdateSchedule stores the request as the schedule's next version.
func (h *handlers) UpdateSchedule(ctx context.Context, req api.UpdateScheduleRequestObject) (api.UpdateScheduleResponseObject, error) {
	tenant := tenantFrom(ctx)
	b := req.Body
	p, err := scheduleParams(ctx, b.Name, b.Timing, b.Definition)
	if err != nil {
		return nil, err
	}
	ctx = h.audit(ctx, "schedule.update", "schedule", req.ScheduleId.String(), nil, nil)
	sc, err := h.store.UpdateSchedule(ctx, tenant, req.ScheduleId, p)
	if err != nil {
		return nil, err
	}
	out, err := toSchedule(sc)
	if err != nil {
		return nil, err
	}
	return api.UpdateSchedule200JSONResponse(out), nil
}

// DeleteSchedule deletes a schedule: it stops firing when the deletion
// commits, and its runs stay.
func (h *handlers) DeleteSchedule(ctx context.Context, req api.DeleteScheduleRequestObject) (api.DeleteScheduleResponseObject, error) {
	ctx = h.audit(ctx, "schedule.delete", "schedule", req.ScheduleId.String(), nil, nil)
	if _, err := h.store.DeleteSchedule(ctx, tenantFrom(ctx), req.ScheduleId); err != nil {
		return nil, err
	}
	return api.DeleteSchedule204Response{}, nil
}

// GetSchedule returns a schedule at its current version.
func (h *handlers) GetSchedule(ctx context.Context, req api.GetScheduleRequestObject) (api.GetScheduleResponseObject, error) {
	tenant := tenantFrom(ctx)
	sc, err := h.store.GetSchedule(ctx, tenant, req.ScheduleId)
	if err != nil {
		return nil, err
	}
	out, err := toSchedule(sc)
	if err != nil {
		return nil, err
	}
	return api.GetSchedule200JSONResponse(out), nil
}

// ListSchedules pages schedules.
func (h *handlers) ListSchedules(ctx context.Context, req api.ListSchedulesRequestObject) (api.ListSchedulesResponseObject, error) {
	tenant, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	list, next, err := h.store.ListSchedules(ctx, tenant, req.Params.OrganizationId, after, limit)
	if err != nil {
		return nil, err
	}
	items := make([]api.Schedule, 0, len(list))
	for _, sc := range list {
		out, err := toSchedule(sc)
		if err != nil {
			return nil, err
		}
		items = append(items, out)
	}
	return api.ListSchedules200JSONResponse{Items: items, NextCursor: encodeCursor(next)}, nil
}

// PauseSchedule stops a schedule firing.
func (h *handlers) PauseSchedule(ctx context.Context, req api.PauseScheduleRequestObject) (api.PauseScheduleResponseObject, error) {
	sc, err := h.setScheduleEnabled(ctx, req.ScheduleId, false)
	if err != nil {
		return nil, err
	}
	return api.PauseSchedule200JSONResponse(sc), nil
}

// ResumeSchedule lets a paused schedule fire again.
func (h *handlers) ResumeSchedule(ctx context.Context, req api.ResumeScheduleRequestObject) (api.ResumeScheduleResponseObject, error) {
	sc, err := h.setScheduleEnabled(ctx, req.ScheduleId, true)
	if err != nil {
		return nil, err
	}
	return api.ResumeSchedule200JSONResponse(sc), nil
}

func (h *handlers) setScheduleEnabled(ctx context.Context, id uuid.UUID, enabled bool) (api.Schedule, error) {
	tenant := tenantFrom(ctx)
	verb, action := h.store.PauseSchedule, "schedule.pause"
	if enabled {
		verb, action = h.store.ResumeSchedule, "schedule.resume"
	}
	ctx = h.audit(ctx, action, "schedule", id.String(), nil, nil)
	sc, err := verb(ctx, tenant, id)
	if err != nil {
		return api.Schedule{}, err
	}
	return toSchedule(sc)
}

// RunSchedule starts the schedule's run at once (a manual trigger).
func (h *handlers) RunSchedule(ctx context.Context, req api.RunScheduleRequestObject) (api.RunScheduleResponseObject, error) {
	tenant := tenantFrom(ctx)
	var err error
	p := store.RunScheduleParams{TokenID: tokenOf(ctx)}
	// The request has no body: the schedule is what a repeat must name.
	if p.IdempotencyKey, p.RequestSHA256, err = idempotency(req.Params.IdempotencyKey,
		map[string]string{"run_schedule": req.ScheduleId.String()}); err != nil {
		return nil, err
	}
	ctx = h.audit(ctx, "schedule.run", "schedule", req.ScheduleId.String(), nil, nil)
	f, replayed, err := h.store.RunScheduleNow(ctx, tenant, req.ScheduleId, p)
	if err != nil {
		return nil, err
	}
	if replayed {
		return api.RunSchedule200JSONResponse{Body: toScheduleFire(f), Headers: api.RunSchedule200ResponseHeaders{IdempotentReplayed: ptr("true")}}, nil
	}
	return api.RunSchedule201JSONResponse(toScheduleFire(f)), nil
}

// ListScheduleFires pages a schedule's history.
func (h *handlers) ListScheduleFires(ctx context.Context, req api.ListScheduleFiresRequestObject) (api.ListScheduleFiresResponseObject, error) {
	tenant, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	fires, next, err := h.store.ScheduleFires(ctx, tenant, req.ScheduleId, after, limit)
	if err != nil {
		return nil, err
	}
	return api.ListScheduleFires200JSONResponse{Items: mapSlice(fires, toScheduleFire), NextCursor: encodeCursor(next)}, nil
}

// ListScheduleNext lists a schedule's next fire times.
func (h *handlers) ListScheduleNext(ctx context.Context, req api.ListScheduleNextRequestObject) (api.ListScheduleNextResponseObject, error) {
	tenant := tenantFrom(ctx)
	n := 10
	if req.Params.Count != nil {
		n = *req.Params.Count
	}
	slots, err := h.store.NextFireTimes(ctx, tenant, req.ScheduleId, n)
	if err != nil {
		return nil, err
	}
	return api.ListScheduleNext200JSONResponse{Items: mapSlice(slots, func(s store.ScheduleSlot) api.ScheduleSlot {
		return api.ScheduleSlot{SlotAt: s.SlotAt, FireAt: s.FireAt}
	})}, nil
}

// tokenOf is the calling API token, recorded as what triggered a run.
func tokenOf(ctx context.Context) *uuid.UUID {
	if p := authFrom(ctx).principal; p != nil {
		return ptr(p.TokenID)
	}
	return nil
}

// scheduleParams converts the contract's timing and definition to the
// store's. Their JSON is the same by design, so the conversion is a round
// trip through it; the store validates and names a bad field.
func scheduleParams(ctx context.Context, name string, timing api.ScheduleTiming, def api.ScheduleDefinition) (store.ScheduleParams, error) {
	p := store.ScheduleParams{Name: name, TokenID: tokenOf(ctx)}
	if err := convertJSON(timing, &p.Timing); err != nil {
		return p, problem.Wrap(store.ErrInvalid, "timing: malformed")
	}
	if err := convertJSON(def, &p.Definition); err != nil {
		return p, problem.Wrap(store.ErrInvalid, "definition: malformed")
	}
	return p, nil
}

func convertJSON(from, to any) error {
	raw, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, to)
}

func toSchedule(sc store.Schedule) (api.Schedule, error) {
	out := api.Schedule{
		Id: sc.ID, OrganizationId: sc.OrganizationID, Name: sc.Name, Version: sc.Version, Enabled: sc.Enabled,
		NextSlotAt: sc.NextSlotAt, NextFireAt: sc.NextFireAt, LastSlotAt: sc.LastSlotAt, QueuedSlotAt: sc.QueuedSlotAt,
		CreatedAt: sc.CreatedAt, UpdatedAt: sc.UpdatedAt,
	}
	if err := convertJSON(sc.Timing, &out.Timing); err != nil {
		return api.Schedule{}, fmt.Errorf("schedule %s timing: %w", sc.ID, err)
	}
	if err := convertJSON(sc.Definition, &out.Definition); err != nil {
		return api.Schedule{}, fmt.Errorf("schedule %s definition: %w", sc.ID, err)
	}
	return out, nil
}

func toScheduleFire(f store.ScheduleFire) api.ScheduleFire {
	out := api.ScheduleFire{
		Id: f.ID, ScheduleId: f.ScheduleID, Version: f.Version, SlotAt: f.SlotAt, Trigger: api.ScheduleFireTrigger(f.Trigger),
		TokenId: f.TokenID, Outcome: api.ScheduleFireOutcome(f.Outcome), MissedSlots: f.MissedSlots,
		TaskId: f.TaskID, ScanId: f.ScanID, RunState: nonEmpty(f.RunState), FiredAt: f.FiredAt,
	}
	if f.SkipReason != "" {
		out.SkipReason = ptr(api.ScheduleFireSkipReason(f.SkipReason))
	}
	return out
}

// toTrigger is what created a task or scan (the token stays unsaid).
func toTrigger(t *store.Trigger) *api.Trigger {
	if t == nil {
		return nil
	}
	return &api.Trigger{Kind: api.TriggerKind(t.Kind), ScheduleId: t.ScheduleID, ScheduleVersion: t.ScheduleVersion, SlotAt: t.SlotAt}
}
