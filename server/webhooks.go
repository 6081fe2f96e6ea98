package server

import (
	"context"
	"encoding/base64"
	"net/url"
	"time"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/server/services/webhookdeliver"
	"github.com/worker-gateway/gateway/store"
)

// defaultSecretOverlap is how long a rotated-out secret keeps signing when
// the request names no overlap.
const defaultSecretOverlap = 24 * time.Hour

// Webhook targets are an organization's configuration with a secret in it:
// every route takes the admin permission.

// CreateWebhook creates a target and answers its secret, once.
func (h *handlers) CreateWebhook(ctx context.Context, req api.CreateWebhookRequestObject) (api.CreateWebhookResponseObject, error) {
	tenant := tenantFrom(ctx)
	b := req.Body
	if !tenant.Allows(b.OrganizationId) {
		return nil, store.ErrNotFound
	}
	if err := h.checkWebhookURL(ctx, b.Url); err != nil {
		return nil, err
	}
	// The signing secret is stored sealed: no key, no target.
	keyring, err := h.secretsKeyring()
	if err != nil {
		return nil, err
	}
	p := store.WebhookTargetParams{URL: b.Url, Description: deref(b.Description), EventTypes: eventTypes(b.EventTypes), Enabled: true}
	if b.Enabled != nil {
		p.Enabled = *b.Enabled
	}
	ctx = h.audit(ctx, "webhook.create", "webhook", "", &b.OrganizationId,
		map[string]any{"url": redactedURL(p.URL), "event_types": p.EventTypes, "enabled": p.Enabled})
	w, secret, err := h.store.CreateWebhookTarget(ctx, tenant, keyring, b.OrganizationId, p)
	if err != nil {
		return nil, err
	}
	return api.CreateWebhook201JSONResponse(withSecret(w, secret)), nil
}

// UpdateWebhook replaces a target's definition.
func (h *handlers) UpdateWebhook(ctx context.Context, req api.UpdateWebhookRequestObject) (api.UpdateWebhookResponseObject, error) {
	tenant := tenantFrom(ctx)
	b := req.Body
	// Another organization's target is 404 before its URL is judged.
	if _, err := h.store.GetWebhookTarget(ctx, tenant, req.WebhookId); err != nil {
		return nil, err
	}
	if err := h.checkWebhookURL(ctx, b.Url); err != nil {
		return nil, err
	}
	ctx = h.audit(ctx, "webhook.update", "webhook", req.WebhookId.String(), nil,
		map[string]any{"url": redactedURL(b.Url), "event_types": eventTypes(b.EventTypes), "enabled": b.Enabled})
	w, err := h.store.UpdateWebhookTarget(ctx, tenant, req.WebhookId, store.WebhookTargetParams{
		URL: b.Url, Description: deref(b.Description), EventTypes: eventTypes(b.EventTypes), Enabled: b.Enabled})
	if err != nil {
		return nil, err
	}
	return api.UpdateWebhook200JSONResponse(toWebhook(w)), nil
}

// DeleteWebhook deletes a target and its deliveries.
func (h *handlers) DeleteWebhook(ctx context.Context, req api.DeleteWebhookRequestObject) (api.DeleteWebhookResponseObject, error) {
	tenant := tenantFrom(ctx)
	var details map[string]any
	if w, err := h.store.GetWebhookTarget(ctx, tenant, req.WebhookId); err == nil {
		details = map[string]any{"url": redactedURL(w.URL)}
	}
	ctx = h.audit(ctx, "webhook.delete", "webhook", req.WebhookId.String(), nil, details)
	if _, err := h.store.DeleteWebhookTarget(ctx, tenant, req.WebhookId); err != nil {
		return nil, err
	}
	return api.DeleteWebhook204Response{}, nil
}

// GetWebhook returns a target, without its secret.
func (h *handlers) GetWebhook(ctx context.Context, req api.GetWebhookRequestObject) (api.GetWebhookResponseObject, error) {
	tenant := tenantFrom(ctx)
	w, err := h.store.GetWebhookTarget(ctx, tenant, req.WebhookId)
	if err != nil {
		return nil, err
	}
	return api.GetWebhook200JSONResponse(toWebhook(w)), nil
}

// ListWebhooks pages targets.
func (h *handlers) ListWebhooks(ctx context.Context, req api.ListWebhooksRequestObject) (api.ListWebhooksResponseObject, error) {
	tenant := tenantFrom(ctx)
	after, limit, err := pageParams(req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	list, next, err := h.store.ListWebhookTargets(ctx, tenant, req.Params.OrganizationId, after, limit)
	if err != nil {
		return nil, err
	}
	items := make([]api.Webhook, 0, len(list))
	for _, w := range list {
		items = append(items, toWebhook(w))
	}
	return api.ListWebhooks200JSONResponse{Items: items, NextCursor: encodeCursor(next)}, nil
}

// RotateWebhookSecret gives a target a new secret, answered once; the old
// one keeps signing during the overlap.
func (h *handlers) RotateWebhookSecret(ctx context.Context, req api.RotateWebhookSecretRequestObject) (api.RotateWebhookSecretResponseObject, error) {
	tenant := tenantFrom(ctx)
	keyring, err := h.secretsKeyring()
	if err != nil {
		return nil, err
	}
	overlap := defaultSecretOverlap
	if req.Body != nil && req.Body.OverlapSeconds != nil {
		overlap = time.Duration(*req.Body.OverlapSeconds) * time.Second
	}
	ctx = h.audit(ctx, "webhook.rotate_secret", "webhook", req.WebhookId.String(), nil,
		map[string]any{"overlap_seconds": int(overlap.Seconds())})
	w, secret, err := h.store.RotateWebhookSecret(ctx, tenant, keyring, req.WebhookId, overlap)
	if err != nil {
		return nil, err
	}
	return api.RotateWebhookSecret200JSONResponse(withSecret(w, secret)), nil
}

// ListWebhookDeliveries pages a target's delivery log.
func (h *handlers) ListWebhookDeliveries(ctx context.Context, req api.ListWebhookDeliveriesRequestObject) (api.ListWebhookDeliveriesResponseObject, error) {
	tenant := tenantFrom(ctx)
	after, limit, err := pageParams(req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	list, next, err := h.store.ListWebhookDeliveries(ctx, tenant, req.WebhookId, after, limit)
	if err != nil {
		return nil, err
	}
	items := make([]api.WebhookDelivery, 0, len(list))
	for _, d := range list {
		out := api.WebhookDelivery{Id: d.ID, EventId: d.EventID, EventType: api.WebhookEventType(d.EventType), WebhookId: d.TargetID,
			State: api.WebhookDeliveryState(d.State), Attempts: d.Attempts, NextAttemptAt: d.NextAttemptAt,
			LastAttemptAt: d.LastAttemptAt, LastStatusCode: d.LastStatusCode, LastError: d.LastError,
			CreatedAt: d.CreatedAt, DeliveredAt: d.DeliveredAt}
		if d.LastLatency != nil {
			ms := int(d.LastLatency.Milliseconds())
			out.LastLatencyMs = &ms
		}
		items = append(items, out)
	}
	return api.ListWebhookDeliveries200JSONResponse{Items: items, NextCursor: encodeCursor(next)}, nil
}

func eventTypes(in []api.WebhookEventType) []string {
	out := make([]string, len(in))
	for i, t := range in {
		out[i] = string(t)
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func toWebhook(w store.WebhookTarget) api.Webhook {
	types := make([]api.WebhookEventType, len(w.EventTypes))
	for i, t := range w.EventTypes {
		types[i] = api.WebhookEventType(t)
	}
	return api.Webhook{Id: w.ID, OrganizationId: w.OrganizationID, Url: w.URL, Description: w.Description,
		EventTypes: types, Enabled: w.Enabled, ConsecutiveFailures: w.ConsecutiveFailures,
		CircuitOpenUntil: w.CircuitOpenUntil, PreviousSecretExpiresAt: w.PreviousSecretExpiresAt,
		CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt}
}

func withSecret(w store.WebhookTarget, secret []byte) api.WebhookWithSecret {
	o := toWebhook(w)
	return api.WebhookWithSecret{Id: o.Id, OrganizationId: o.OrganizationId, Url: o.Url, Description: o.Description,
		EventTypes: o.EventTypes, Enabled: o.Enabled, ConsecutiveFailures: o.ConsecutiveFailures,
		CircuitOpenUntil: o.CircuitOpenUntil, PreviousSecretExpiresAt: o.PreviousSecretExpiresAt,
		CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt, Secret: encodeWebhookSecret(secret)}
}

// encodeWebhookSecret is the Standard Webhooks form of a secret.
func encodeWebhookSecret(secret []byte) string {
	return "whsec_" + base64.StdEncoding.EncodeToString(secret)
}

// redactedURL is a target URL for the audit log: without its query and
// user info, which may carry a receiver's token.
func redactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// checkWebhookURL refuses a target URL that is not http(s) or whose host
// the gateway does not deliver to (webhookdeliver's CheckHost): one answer
// whether the name does not resolve or resolves to a refused address.
// Deliveries take the same decision on every dial: DNS may answer
// differently then.
func (h *handlers) checkWebhookURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return problem.Wrap(store.ErrInvalid, "url must be an absolute http or https URL")
	}
	if err := h.cfg.Webhooks.CheckHost(ctx, u.Hostname()); err != nil {
		return problem.Wrap(store.ErrInvalid, problem.Text("url: "+webhookdeliver.ErrUndeliverableHost.Error()))
	}
	return nil
}
