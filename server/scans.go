package server

import (
	"context"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// CreateScan starts a scan; its jobs run one after another.
func (h *handlers) CreateScan(ctx context.Context, req api.CreateScanRequestObject) (api.CreateScanResponseObject, error) {
	tenant := tenantFrom(ctx)
	var err error
	b := req.Body
	p := store.CreateScanParams{OrganizationID: b.OrganizationId, Targets: b.Targets}
	if b.AssetTargets != nil {
		p.AssetTargets = *b.AssetTargets
	}
	if len(p.Targets)+len(p.AssetTargets) == 0 {
		return nil, problem.Wrap(store.ErrInvalid, "a scan needs at least one target or asset target")
	}
	if b.Priority != nil {
		p.Priority = *b.Priority
	}
	for _, plugin := range b.Plugins {
		sp := store.ScanPlugin{Name: plugin.Name, TimeoutSeconds: plugin.TimeoutSeconds}
		if plugin.Input != nil {
			sp.Input = *plugin.Input
		}
		if plugin.RequiredCapabilities != nil {
			sp.RequiredCapabilities = *plugin.RequiredCapabilities
		}
		p.Plugins = append(p.Plugins, sp)
	}
	p.Trigger = &store.Trigger{Kind: store.TriggerAPI, TokenID: tokenOf(ctx)}
	if p.IdempotencyKey, p.RequestSHA256, err = idempotency(req.Params.IdempotencyKey, b); err != nil {
		return nil, err
	}
	ctx = h.audit(ctx, "scan.create", "scan", "", &p.OrganizationID, nil)
	scan, replayed, err := h.store.CreateScan(ctx, tenant, p)
	if err != nil {
		return nil, err
	}
	if replayed {
		return api.CreateScan200JSONResponse{Body: toScan(scan), Headers: api.CreateScan200ResponseHeaders{IdempotentReplayed: ptr("true")}}, nil
	}
	return api.CreateScan201JSONResponse(toScan(scan)), nil
}

// GetScan returns a scan with its jobs and their tasks.
func (h *handlers) GetScan(ctx context.Context, req api.GetScanRequestObject) (api.GetScanResponseObject, error) {
	tenant := tenantFrom(ctx)
	scan, err := h.store.GetScan(ctx, tenant, req.ScanId)
	if err != nil {
		return nil, err
	}
	return api.GetScan200JSONResponse(toScan(scan)), nil
}

// ListScans pages scans.
func (h *handlers) ListScans(ctx context.Context, req api.ListScansRequestObject) (api.ListScansResponseObject, error) {
	tenant, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	p := store.ListScansParams{OrganizationID: req.Params.OrganizationId, ScheduleID: req.Params.ScheduleId, After: after, Limit: limit}
	if req.Params.Trigger != nil {
		p.Trigger = ptr(store.TriggerKind(*req.Params.Trigger))
	}
	scans, next, err := h.store.ListScans(ctx, tenant, p)
	if err != nil {
		return nil, err
	}
	return api.ListScans200JSONResponse{Items: mapSlice(scans, toScan), NextCursor: encodeCursor(next)}, nil
}

// CancelScan cancels a scan and its current task.
func (h *handlers) CancelScan(ctx context.Context, req api.CancelScanRequestObject) (api.CancelScanResponseObject, error) {
	tenant := tenantFrom(ctx)
	ctx = h.audit(ctx, "scan.cancel", "scan", req.ScanId.String(), nil, nil)
	scan, err := h.store.CancelScan(ctx, tenant, req.ScanId)
	if err != nil {
		return nil, err
	}
	return api.CancelScan200JSONResponse(toScan(scan)), nil
}

// ListAssets pages an organization's assets.
func (h *handlers) ListAssets(ctx context.Context, req api.ListAssetsRequestObject) (api.ListAssetsResponseObject, error) {
	tenant, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	assets, next, err := h.store.ListAssets(ctx, tenant, req.OrganizationId, after, limit)
	if err != nil {
		return nil, err
	}
	return api.ListAssets200JSONResponse{Items: mapSlice(assets, toAsset), NextCursor: encodeCursor(next)}, nil
}

// ListThreats pages an organization's threats.
func (h *handlers) ListThreats(ctx context.Context, req api.ListThreatsRequestObject) (api.ListThreatsResponseObject, error) {
	tenant, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	includeExcluded := req.Params.IncludeExcluded != nil && *req.Params.IncludeExcluded
	threats, next, err := h.store.ListThreats(ctx, tenant, req.OrganizationId, includeExcluded, after, limit)
	if err != nil {
		return nil, err
	}
	return api.ListThreats200JSONResponse{Items: mapSlice(threats, toThreat), NextCursor: encodeCursor(next)}, nil
}

func toScan(s store.Scan) api.Scan {
	out := api.Scan{
		Id: s.ID, OrganizationId: s.OrganizationID, State: api.ScanState(s.State), Targets: s.Targets,
		CreatedAt: s.CreatedAt, CompletedAt: s.CompletedAt, Jobs: []api.ScanJob{}, Trigger: toTrigger(s.Trigger),
	}
	if len(s.AssetTargets) > 0 {
		out.AssetTargets = &s.AssetTargets
	}
	if out.Targets == nil {
		out.Targets = []string{}
	}
	for _, j := range s.Jobs {
		job := api.ScanJob{
			Id: j.ID, Position: j.Position, PluginName: j.PluginName, State: api.ScanState(j.State),
			Input: jsonOrEmpty(j.Input), Error: nonEmpty(j.Error), StartedAt: j.StartedAt, CompletedAt: j.CompletedAt,
		}
		if string(j.Output) != "{}" {
			job.Output = jsonOrNil(j.Output)
		}
		if j.Task != nil {
			job.Task = ptr(toTask(*j.Task))
		}
		out.Jobs = append(out.Jobs, job)
	}
	return out
}

func toAsset(a store.Asset) api.Asset {
	return api.Asset{
		Id: a.ID, OrganizationId: a.OrganizationID, Type: a.Type, Value: a.Value, NormalizedValue: a.NormalizedValue,
		Details: ptr(api.JSONObject(jsonOrEmpty(a.Details))), FirstSeenAt: a.FirstSeenAt, LastSeenAt: a.LastSeenAt,
	}
}

func toThreat(t store.Threat) api.Threat {
	out := api.Threat{
		Id: t.ID, OrganizationId: t.OrganizationID, Asset: api.AssetRef{Type: t.AssetType, Value: t.AssetValue},
		ExternalId: nonEmpty(t.ExternalID), Title: t.Title, Severity: api.Severity(t.Severity),
		Details: ptr(api.JSONObject(jsonOrEmpty(t.Details))), Detections: t.Detections, CreatedAt: t.CreatedAt,
		ExclusionId: t.ExclusionID, Vulnerability: toVulnerability(t.Vulnerability),
	}
	if t.ExclusionID != nil {
		out.Excluded = ptr(true)
	}
	return out
}
