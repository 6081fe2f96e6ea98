package server

import (
	"context"

	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

func toOrganization(o store.Organization) api.Organization {
	return api.Organization{Id: o.ID, Name: o.Name, CreatedAt: o.CreatedAt}
}

// CreateOrganization creates a tenant (global admins only).
func (h *handlers) CreateOrganization(ctx context.Context, req api.CreateOrganizationRequestObject) (api.CreateOrganizationResponseObject, error) {
	scope, err := requireGlobalAdmin(ctx)
	if err != nil {
		return nil, err
	}
	ctx = h.audit(ctx, "organization.create", "organization", "", nil, map[string]any{"name": req.Body.Name})
	o, err := h.store.CreateOrganization(ctx, scope, req.Body.Name)
	if err != nil {
		return nil, err
	}
	return api.CreateOrganization201JSONResponse(toOrganization(o)), nil
}

// ListOrganizations pages the organizations the caller may see.
func (h *handlers) ListOrganizations(ctx context.Context, req api.ListOrganizationsRequestObject) (api.ListOrganizationsResponseObject, error) {
	scope, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	orgs, next, err := h.store.ListOrganizations(ctx, scope, after, limit)
	if err != nil {
		return nil, err
	}
	return api.ListOrganizations200JSONResponse{Items: mapSlice(orgs, toOrganization), NextCursor: encodeCursor(next)}, nil
}

// GetOrganization returns one organization.
func (h *handlers) GetOrganization(ctx context.Context, req api.GetOrganizationRequestObject) (api.GetOrganizationResponseObject, error) {
	scope, err := requirePermission(ctx, permissionReader, permissionProducer)
	if err != nil {
		return nil, err
	}
	o, err := h.store.GetOrganization(ctx, scope, req.OrganizationId)
	if err != nil {
		return nil, err
	}
	return api.GetOrganization200JSONResponse(toOrganization(o)), nil
}
