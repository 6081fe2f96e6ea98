package server

import (
	"context"

	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

func toOrganization(o store.Organization) api.Organization {
	return api.Organization{Id: o.ID, Name: o.Name, CreatedAt: o.CreatedAt, ScopePolicy: api.ScopePolicy(o.ScopePolicy)}
}

// CreateOrganization creates a tenant (global admins only). Its scope
// policy is allow_list unless the request names another: a security
// product scans only what was approved unless told otherwise.
func (h *handlers) CreateOrganization(ctx context.Context, req api.CreateOrganizationRequestObject) (api.CreateOrganizationResponseObject, error) {
	tenant := tenantFrom(ctx)
	policy := store.ScopePolicyAllowList
	if req.Body.ScopePolicy != nil {
		policy = string(*req.Body.ScopePolicy)
	}
	ctx = h.audit(ctx, "organization.create", "organization", "", nil, map[string]any{"name": req.Body.Name, "scope_policy": policy})
	o, err := h.store.CreateOrganization(ctx, tenant, req.Body.Name, policy)
	if err != nil {
		return nil, err
	}
	return api.CreateOrganization201JSONResponse(toOrganization(o)), nil
}

// ListOrganizations pages the organizations the caller may see.
func (h *handlers) ListOrganizations(ctx context.Context, req api.ListOrganizationsRequestObject) (api.ListOrganizationsResponseObject, error) {
	tenant, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	orgs, next, err := h.store.ListOrganizations(ctx, tenant, after, limit)
	if err != nil {
		return nil, err
	}
	return api.ListOrganizations200JSONResponse{Items: mapSlice(orgs, toOrganization), NextCursor: encodeCursor(next)}, nil
}

// GetOrganization returns one organization.
func (h *handlers) GetOrganization(ctx context.Context, req api.GetOrganizationRequestObject) (api.GetOrganizationResponseObject, error) {
	tenant := tenantFrom(ctx)
	o, err := h.store.GetOrganization(ctx, tenant, req.OrganizationId)
	if err != nil {
		return nil, err
	}
	return api.GetOrganization200JSONResponse(toOrganization(o)), nil
}

// UpdateOrganization sets an organization's scope policy (platform
// operators only, as for its scope entries).
func (h *handlers) UpdateOrganization(ctx context.Context, req api.UpdateOrganizationRequestObject) (api.UpdateOrganizationResponseObject, error) {
	ctx = h.audit(ctx, "organization.update", "organization", req.OrganizationId.String(), &req.OrganizationId,
		map[string]any{"scope_policy": req.Body.ScopePolicy})
	o, err := h.store.SetScopePolicy(ctx, tenantFrom(ctx), req.OrganizationId, string(req.Body.ScopePolicy))
	if err != nil {
		return nil, err
	}
	return api.UpdateOrganization200JSONResponse(toOrganization(o)), nil
}
