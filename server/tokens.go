package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

func toAPIToken(t store.APIToken) api.ApiToken {
	return api.ApiToken{
		Id: t.ID, Name: t.Name, Scopes: mapSlice(t.Permissions, func(s string) api.TokenScope { return api.TokenScope(s) }),
		OrganizationId: t.OrganizationID, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt,
		Revoked: t.RevokedAt != nil, RevokedAt: t.RevokedAt, LastUsedAt: t.LastUsedAt, ParentTokenId: t.ParentID,
	}
}

// CreateApiToken mints an API token, shown once. The calling token is its
// parent and bounds it (store.CreateAPIToken): a token can never mint one
// that outlives or outranks it.
func (h *handlers) CreateApiToken(ctx context.Context, req api.CreateApiTokenRequestObject) (api.CreateApiTokenResponseObject, error) {
	tenant := tenantFrom(ctx)
	parent := authFrom(ctx).principal.TokenID
	b := req.Body
	p := store.CreateAPITokenParams{Name: b.Name, OrganizationID: b.OrganizationId, ParentID: &parent}
	for _, s := range b.Scopes {
		if !slices.Contains(p.Permissions, string(s)) {
			p.Permissions = append(p.Permissions, string(s))
		}
	}
	if b.ExpiresInSeconds != nil {
		p.ExpiresIn = time.Duration(*b.ExpiresInSeconds) * time.Second
	}
	ctx = h.audit(ctx, "api_token.create", "api_token", "", nil, map[string]any{"name": b.Name, "scopes": p.Permissions, "parent_token_id": parent})
	token, id, err := h.store.CreateAPIToken(ctx, tenant, p)
	var bounds *store.TokenBoundsError
	switch {
	case errors.As(err, &bounds):
		return nil, newProblem(http.StatusForbidden, problem.TokenExceedsParent, bounds.Detail)
	case err != nil:
		return nil, err
	}
	meta, err := h.store.GetAPIToken(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	return api.CreateApiToken201JSONResponse{Token: token, ApiToken: toAPIToken(meta)}, nil
}

// ListApiTokens lists token metadata.
func (h *handlers) ListApiTokens(ctx context.Context, _ api.ListApiTokensRequestObject) (api.ListApiTokensResponseObject, error) {
	tenant := tenantFrom(ctx)
	tokens, err := h.store.ListAPITokens(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return api.ListApiTokens200JSONResponse{Items: mapSlice(tokens, toAPIToken)}, nil
}

// RevokeApiToken revokes a token and, in the same transaction, every token
// it minted, recursively; the audit event counts those descendants.
func (h *handlers) RevokeApiToken(ctx context.Context, req api.RevokeApiTokenRequestObject) (api.RevokeApiTokenResponseObject, error) {
	tenant := tenantFrom(ctx)
	ctx = h.audit(ctx, "api_token.revoke", "api_token", req.TokenId.String(), nil, nil)
	t, _, err := h.store.RevokeAPIToken(ctx, tenant, req.TokenId)
	if err != nil {
		return nil, err
	}
	return api.RevokeApiToken200JSONResponse(toAPIToken(t)), nil
}

// ListAuditEvents pages the audit log.
func (h *handlers) ListAuditEvents(ctx context.Context, req api.ListAuditEventsRequestObject) (api.ListAuditEventsResponseObject, error) {
	tenant := tenantFrom(ctx)
	p := req.Params
	f := store.AuditFilter{Since: p.Since, Limit: 50}
	if p.Limit != nil {
		f.Limit = *p.Limit
	}
	for dst, src := range map[*string]*string{&f.Action: p.Action, &f.TargetType: p.TargetType, &f.TargetID: p.TargetId} {
		if src != nil {
			*dst = *src
		}
	}
	if p.Cursor != nil && *p.Cursor != "" {
		id, err := decodeAuditCursor(*p.Cursor)
		if err != nil {
			return nil, newProblem(http.StatusBadRequest, problem.BadRequest, "malformed cursor")
		}
		f.AfterID = &id
	}
	events, next, err := h.store.ListAuditEvents(ctx, tenant, f)
	if err != nil {
		return nil, err
	}
	out := api.ListAuditEvents200JSONResponse{Items: mapSlice(events, func(e store.AuditEvent) api.AuditEvent {
		return api.AuditEvent{Id: e.ID, OccurredAt: e.OccurredAt, ActorType: api.AuditEventActorType(e.ActorType),
			ActorId: nonEmpty(e.ActorID), Action: e.Action, TargetType: nonEmpty(e.TargetType), TargetId: nonEmpty(e.TargetID),
			OrganizationId: e.OrganizationID, RequestId: nonEmpty(e.RequestID), Details: ptr(api.JSONObject(jsonOrEmpty(e.Details)))}
	})}
	if next != nil {
		out.NextCursor = ptr(encodeAuditCursor(*next))
	}
	return out, nil
}
