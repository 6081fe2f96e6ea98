package server

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// Scan scope, asset history and threat exclusions (issue 18).

// ListScopeTargets pages an organization's scan scope.
func (h *handlers) ListScopeTargets(ctx context.Context, req api.ListScopeTargetsRequestObject) (api.ListScopeTargetsResponseObject, error) {
	tenant, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	targets, enforced, next, err := h.store.ListScopeTargets(ctx, tenant, req.OrganizationId, after, limit)
	if err != nil {
		return nil, err
	}
	return api.ListScopeTargets200JSONResponse{Items: mapSlice(targets, toScopeTarget), Enforced: enforced, NextCursor: encodeCursor(next)}, nil
}

// AddScopeTarget approves a target for an organization's scans: the
// platform operator's decision, not the organization's own.
func (h *handlers) AddScopeTarget(ctx context.Context, req api.AddScopeTargetRequestObject) (api.AddScopeTargetResponseObject, error) {
	tenant := tenantFrom(ctx)
	b := req.Body
	p := store.ScopeTargetParams{Kind: string(b.Kind), Value: b.Value, TokenID: tokenOf(ctx)}
	if b.IncludeSubdomains != nil {
		p.IncludeSubdomains = *b.IncludeSubdomains
	}
	if b.Note != nil {
		p.Note = *b.Note
	}
	ctx = h.audit(ctx, "scope.add", "scope_target", "", &req.OrganizationId, nil) // the entry, as stored: store
	t, created, err := h.store.AddScopeTarget(ctx, tenant, req.OrganizationId, p)
	if err != nil {
		return nil, err
	}
	if !created {
		return api.AddScopeTarget200JSONResponse(toScopeTarget(t)), nil
	}
	return api.AddScopeTarget201JSONResponse(toScopeTarget(t)), nil
}

// RemoveScopeTarget removes a scope entry; the scope stays enforced.
func (h *handlers) RemoveScopeTarget(ctx context.Context, req api.RemoveScopeTargetRequestObject) (api.RemoveScopeTargetResponseObject, error) {
	tenant := tenantFrom(ctx)
	ctx = h.audit(ctx, "scope.remove", "scope_target", req.ScopeTargetId.String(), &req.OrganizationId, nil) // the entry: store
	t, err := h.store.RemoveScopeTarget(ctx, tenant, req.OrganizationId, req.ScopeTargetId)
	if err != nil {
		return nil, err
	}
	return api.RemoveScopeTarget200JSONResponse(toScopeTarget(t)), nil
}

func toScopeTarget(t store.ScopeTarget) api.ScopeTarget {
	return api.ScopeTarget{Id: t.ID, OrganizationId: t.OrganizationID, Kind: api.ScopeTargetKind(t.Kind), Value: t.Value,
		IncludeSubdomains: t.IncludeSubdomains, Note: nonEmpty(t.Note), CreatedAt: t.CreatedAt}
}

// changeFilter reads the kind, time and page parameters of a change list.
func changeFilter(ctx context.Context, kinds *api.ChangeKinds, since, until *api.Since, cursor *string, limit *int) (store.Tenant, store.ChangeFilter, error) {
	tenant, after, n, err := readPage(ctx, cursor, limit)
	if err != nil {
		return store.Tenant{}, store.ChangeFilter{}, err
	}
	f := store.ChangeFilter{Since: since, Until: until, After: after, Limit: n}
	if kinds != nil {
		for _, k := range *kinds {
			f.Kinds = append(f.Kinds, string(k))
		}
	}
	return tenant, f, nil
}

// ListScanChanges pages what a scan found changed since the scan before it.
func (h *handlers) ListScanChanges(ctx context.Context, req api.ListScanChangesRequestObject) (api.ListScanChangesResponseObject, error) {
	p := req.Params
	tenant, f, err := changeFilter(ctx, p.Kind, p.Since, p.Until, p.Cursor, p.Limit)
	if err != nil {
		return nil, err
	}
	changes, next, err := h.store.ListScanChanges(ctx, tenant, req.ScanId, f)
	if err != nil {
		return nil, err
	}
	return api.ListScanChanges200JSONResponse{Items: mapSlice(changes, toAssetChange), NextCursor: encodeCursor(next)}, nil
}

// ListExposureChanges pages an organization's exposure-change timeline.
func (h *handlers) ListExposureChanges(ctx context.Context, req api.ListExposureChangesRequestObject) (api.ListExposureChangesResponseObject, error) {
	p := req.Params
	tenant, f, err := changeFilter(ctx, p.Kind, p.Since, p.Until, p.Cursor, p.Limit)
	if err != nil {
		return nil, err
	}
	changes, next, err := h.store.ListExposureChanges(ctx, tenant, req.OrganizationId, f)
	if err != nil {
		return nil, err
	}
	return api.ListExposureChanges200JSONResponse{Items: mapSlice(changes, toAssetChange), NextCursor: encodeCursor(next)}, nil
}

func toAssetChange(c store.AssetChange) api.AssetChange {
	out := api.AssetChange{Id: c.ID, OrganizationId: c.OrganizationID, ScanId: c.ScanID, PreviousScanId: c.PreviousScanID,
		AssetId: c.AssetID, Asset: api.AssetRef{Type: c.AssetType, Value: c.AssetValue}, Kind: api.ChangeKind(c.Kind),
		DetectedAt: c.DetectedAt}
	if len(c.Before) > 0 && string(c.Before) != "null" {
		out.Before = ptr(api.JSONObject(c.Before))
	}
	if len(c.After) > 0 && string(c.After) != "null" {
		out.After = ptr(api.JSONObject(c.After))
	}
	return out
}

// ListThreatExclusions pages an organization's threat exclusions.
func (h *handlers) ListThreatExclusions(ctx context.Context, req api.ListThreatExclusionsRequestObject) (api.ListThreatExclusionsResponseObject, error) {
	tenant, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	list, next, err := h.store.ListThreatExclusions(ctx, tenant, req.OrganizationId, after, limit)
	if err != nil {
		return nil, err
	}
	return api.ListThreatExclusions200JSONResponse{Items: mapSlice(list, toThreatExclusion), NextCursor: encodeCursor(next)}, nil
}

// CreateThreatExclusion suppresses the threats it matches.
func (h *handlers) CreateThreatExclusion(ctx context.Context, req api.CreateThreatExclusionRequestObject) (api.CreateThreatExclusionResponseObject, error) {
	tenant := tenantFrom(ctx)
	b := req.Body
	p := store.ThreatExclusionParams{AssetID: b.AssetId, AssetPattern: b.AssetPattern, ExternalID: b.ExternalId,
		TitlePattern: b.TitlePattern, Reason: b.Reason, ExpiresAt: b.ExpiresAt, TokenID: tokenOf(ctx)}
	if b.Severity != nil {
		p.Severity = ptr(string(*b.Severity))
	}
	ctx = h.audit(ctx, "threat_exclusion.create", "threat_exclusion", "", &req.OrganizationId, map[string]any{"reason": p.Reason})
	e, err := h.store.CreateThreatExclusion(ctx, tenant, req.OrganizationId, p)
	if err != nil {
		return nil, err
	}
	return api.CreateThreatExclusion201JSONResponse(toThreatExclusion(e)), nil
}

// DeleteThreatExclusion removes an exclusion.
func (h *handlers) DeleteThreatExclusion(ctx context.Context, req api.DeleteThreatExclusionRequestObject) (api.DeleteThreatExclusionResponseObject, error) {
	tenant := tenantFrom(ctx)
	ctx = h.audit(ctx, "threat_exclusion.delete", "threat_exclusion", req.ExclusionId.String(), &req.OrganizationId, nil)
	e, err := h.store.DeleteThreatExclusion(ctx, tenant, req.OrganizationId, req.ExclusionId)
	if err != nil {
		return nil, err
	}
	return api.DeleteThreatExclusion200JSONResponse(toThreatExclusion(e)), nil
}

func toThreatExclusion(e store.ThreatExclusion) api.ThreatExclusion {
	out := api.ThreatExclusion{Id: e.ID, OrganizationId: e.OrganizationID, AssetId: e.AssetID, AssetPattern: e.AssetPattern,
		ExternalId: e.ExternalID, TitlePattern: e.TitlePattern, Reason: e.Reason, ExpiresAt: e.ExpiresAt,
		CreatedBy: e.CreatedBy, CreatedAt: e.CreatedAt}
	if e.Severity != nil {
		out.Severity = ptr(api.Severity(*e.Severity))
	}
	return out
}

func toVulnerability(v *store.Vulnerability) *api.Vulnerability {
	if v == nil {
		return nil
	}
	out := &api.Vulnerability{CvssScore: v.CVSSScore, CvssVector: nonEmpty(v.CVSSVector), Remediation: nonEmpty(v.Remediation)}
	if len(v.CVEIDs) > 0 {
		out.CveIds = &v.CVEIDs
	}
	if len(v.CWEIDs) > 0 {
		out.CweIds = &v.CWEIDs
	}
	if len(v.References) > 0 {
		out.References = &v.References
	}
	return out
}

func fromVulnerability(v *api.Vulnerability) *store.Vulnerability {
	if v == nil {
		return nil
	}
	out := &store.Vulnerability{CVSSScore: v.CvssScore}
	if v.CveIds != nil {
		out.CVEIDs = *v.CveIds
	}
	if v.CweIds != nil {
		out.CWEIDs = *v.CweIds
	}
	if v.References != nil {
		out.References = *v.References
	}
	if v.CvssVector != nil {
		out.CVSSVector = *v.CvssVector
	}
	if v.Remediation != nil {
		out.Remediation = *v.Remediation
	}
	return out
}

// outOfScopeProblem lists a scan's targets outside scope.
func outOfScopeProblem(err error, e *store.OutOfScopeError) *Problem {
	p := withCause(newProblem(http.StatusBadRequest, problem.TargetOutOfScope,
		"scan targets lie outside the organization's scan scope (out_of_scope_targets)"), err)
	p.OutOfScopeTargets = e.Targets
	return p
}

// jsonOrNil is raw as a JSON object, nil for none.
func jsonOrNil(raw json.RawMessage) *api.JSONObject {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return ptr(api.JSONObject(raw))
}

// ListAssetEdges pages an organization's asset graph.
func (h *handlers) ListAssetEdges(ctx context.Context, req api.ListAssetEdgesRequestObject) (api.ListAssetEdgesResponseObject, error) {
	tenant, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	edges, next, err := h.store.ListAssetEdges(ctx, tenant, req.OrganizationId, req.Params.AssetId, after, limit)
	if err != nil {
		return nil, err
	}
	return api.ListAssetEdges200JSONResponse{Items: mapSlice(edges, toAssetEdge), NextCursor: encodeCursor(next)}, nil
}

func toAssetEdge(e store.AssetEdge) api.AssetEdge {
	return api.AssetEdge{Id: e.ID, OrganizationId: e.OrganizationID, Relation: api.EdgeRelation(e.Relation),
		From: api.EdgeEnd{Id: e.From.ID, Type: e.From.Type, Value: e.From.Value},
		To:   api.EdgeEnd{Id: e.To.ID, Type: e.To.Type, Value: e.To.Value}, FirstSeenAt: e.FirstSeenAt, LastSeenAt: e.LastSeenAt}
}
