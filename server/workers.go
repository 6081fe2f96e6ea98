package server

import (
	"context"

	"github.com/worker-gateway/gateway/internal/failpoint"
	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// CreateWorker creates a worker identity, optionally with its certificate.
// An organization-scoped admin creates workers its organization owns.
func (h *handlers) CreateWorker(ctx context.Context, req api.CreateWorkerRequestObject) (api.CreateWorkerResponseObject, error) {
	tenant := tenantFrom(ctx)
	b := req.Body
	fingerprint, subject, err := certificateIdentity(b.CertificatePem, b.CertificateFingerprint, false)
	if err != nil {
		return nil, err
	}
	p := store.CreateWorkerParams{Name: b.Name, WorkerType: string(b.WorkerType), CertificateFingerprint: fingerprint,
		CertificateSubject: subject, OwnerOrganizationID: b.OrganizationId}
	if b.MaxConcurrentTasks != nil {
		p.MaxConcurrentTasks = *b.MaxConcurrentTasks
	}
	ctx = h.audit(ctx, "worker.create", "worker", "", nil,
		map[string]any{"name": p.Name, "certificate_fingerprint": p.CertificateFingerprint})
	w, err := h.store.CreateWorker(ctx, tenant, p, h.onlineWindow())
	if err != nil {
		return nil, err
	}
	token, expires, err := h.store.CreateEnrollmentToken(ctx, tenant, w.ID, h.cfg.Identity.EnrollmentTokenTTL)
	if err != nil {
		return nil, err
	}
	out := toWorker(w)
	return api.CreateWorker201JSONResponse{
		Id: out.Id, Name: out.Name, WorkerType: out.WorkerType, Enabled: out.Enabled, Revoked: out.Revoked,
		RevokedAt: out.RevokedAt, RevocationReason: out.RevocationReason, CertificateFingerprint: out.CertificateFingerprint,
		CertificateSubject: out.CertificateSubject, SoftwareVersion: out.SoftwareVersion, ProtocolVersion: out.ProtocolVersion,
		Capabilities: out.Capabilities, Labels: out.Labels, MaxConcurrentTasks: out.MaxConcurrentTasks, LastSeenAt: out.LastSeenAt, Online: out.Online,
		ActiveAttempts: out.ActiveAttempts, OrganizationIds: out.OrganizationIds, OwnerOrganizationId: out.OwnerOrganizationId,
		CreatedAt:       out.CreatedAt,
		EnrollmentToken: token, EnrollmentTokenExpiresAt: expires,
	}, nil
}

// certificateIdentity derives the fingerprint (and subject) a worker is
// known by from a PEM certificate or a bare fingerprint.
func certificateIdentity(pemText, fingerprint *string, required bool) (string, string, error) {
	switch {
	case pemText != nil && *pemText != "":
		cert, err := pki.ParseCertificatePEM([]byte(*pemText))
		if err != nil {
			return "", "", problem.Wrap(store.ErrInvalid, "certificate_pem is not a PEM certificate")
		}
		if failpoint.Now().After(cert.NotAfter) {
			return "", "", problem.Wrap(store.ErrInvalid, "the certificate has expired")
		}
		fp := pki.Fingerprint(cert)
		if fingerprint != nil && *fingerprint != "" && *fingerprint != fp {
			return "", "", problem.Wrap(store.ErrInvalid, "certificate_fingerprint does not match certificate_pem")
		}
		return fp, cert.Subject.String(), nil
	case fingerprint != nil && *fingerprint != "":
		return *fingerprint, "", nil
	case required:
		return "", "", problem.Wrap(store.ErrInvalid, "give certificate_pem or certificate_fingerprint")
	}
	return "", "", nil
}

// ListWorkers pages workers with their online state.
func (h *handlers) ListWorkers(ctx context.Context, req api.ListWorkersRequestObject) (api.ListWorkersResponseObject, error) {
	tenant, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	workers, next, err := h.store.ListWorkers(ctx, tenant, after, limit, h.onlineWindow())
	if err != nil {
		return nil, err
	}
	return api.ListWorkers200JSONResponse{Items: mapSlice(workers, toWorker), NextCursor: encodeCursor(next)}, nil
}

// GetWorker returns one worker.
func (h *handlers) GetWorker(ctx context.Context, req api.GetWorkerRequestObject) (api.GetWorkerResponseObject, error) {
	tenant := tenantFrom(ctx)
	w, err := h.store.GetWorker(ctx, tenant, req.WorkerId, h.onlineWindow())
	if err != nil {
		return nil, err
	}
	return api.GetWorker200JSONResponse(toWorker(w)), nil
}

// UpdateWorker renames, enables/disables, resizes or labels a worker. A
// label change is audited with the changes asked for (null: removed).
func (h *handlers) UpdateWorker(ctx context.Context, req api.UpdateWorkerRequestObject) (api.UpdateWorkerResponseObject, error) {
	tenant := tenantFrom(ctx)
	p := store.UpdateWorkerParams{
		Name:               req.Body.Name,
		Enabled:            req.Body.Enabled,
		MaxConcurrentTasks: req.Body.MaxConcurrentTasks,
		CancelActive:       req.Params.Active != nil && *req.Params.Active == api.UpdateWorkerParamsActiveCancel,
	}
	if req.Body.Labels != nil {
		p.Labels = *req.Body.Labels
	}
	ctx = h.audit(ctx, "worker.update", "worker", req.WorkerId.String(), tenant.Organization(), map[string]any{"enabled": p.Enabled, "max_concurrent_tasks": p.MaxConcurrentTasks, "name": p.Name, "cancel_active": p.CancelActive,
		"labels": p.Labels})
	w, err := h.store.UpdateWorker(ctx, tenant, req.WorkerId, p, h.onlineWindow())
	if err != nil {
		return nil, err
	}
	h.identities.forgetWorker(req.WorkerId) // other replicas hear the NOTIFY
	return api.UpdateWorker200JSONResponse(toWorker(w)), nil
}

// RegisterWorkerCertificate binds a (bring-your-own) certificate.
func (h *handlers) RegisterWorkerCertificate(ctx context.Context, req api.RegisterWorkerCertificateRequestObject) (api.RegisterWorkerCertificateResponseObject, error) {
	tenant := tenantFrom(ctx)
	fingerprint, subject, err := certificateIdentity(req.Body.CertificatePem, req.Body.CertificateFingerprint, true)
	if err != nil {
		return nil, err
	}
	ctx = h.audit(ctx, "worker.register_certificate", "worker", req.WorkerId.String(), tenant.Organization(), map[string]any{"certificate_fingerprint": fingerprint})
	w, err := h.store.SetWorkerCertificate(ctx, tenant, req.WorkerId, fingerprint, subject, h.onlineWindow())
	if err != nil {
		return nil, err
	}
	h.identities.forgetWorker(req.WorkerId) // other replicas hear the NOTIFY
	return api.RegisterWorkerCertificate200JSONResponse(toWorker(w)), nil
}

// AssignWorker lets a worker serve an organization.
func (h *handlers) AssignWorker(ctx context.Context, req api.AssignWorkerRequestObject) (api.AssignWorkerResponseObject, error) {
	tenant := tenantFrom(ctx)
	ctx = h.audit(ctx, "assignment.create", "worker", req.WorkerId.String(), &req.OrganizationId, nil)
	a, err := h.store.AssignWorker(ctx, tenant, req.OrganizationId, req.WorkerId)
	if err != nil {
		return nil, err
	}
	return api.AssignWorker200JSONResponse(toAssignment(a)), nil
}

// UnassignWorker removes an assignment, cancelling (default) or draining the
// worker's active attempts for that organization.
func (h *handlers) UnassignWorker(ctx context.Context, req api.UnassignWorkerRequestObject) (api.UnassignWorkerResponseObject, error) {
	tenant := tenantFrom(ctx)
	cancelActive := req.Params.Active == nil || *req.Params.Active == api.UnassignWorkerParamsActiveCancel
	reason := ""
	if req.Params.Reason != nil {
		reason = *req.Params.Reason
	}
	ctx = h.audit(ctx, "assignment.revoke", "worker", req.WorkerId.String(), &req.OrganizationId,
		map[string]any{"reason": reason, "cancel_active": cancelActive}) // cancelled_attempts: store
	a, err := h.store.UnassignWorker(ctx, tenant, req.OrganizationId, req.WorkerId, cancelActive, reason)
	if err != nil {
		return nil, err
	}
	return api.UnassignWorker200JSONResponse(toAssignment(a)), nil
}

// GrantWorker lets another organization assign a worker.
func (h *handlers) GrantWorker(ctx context.Context, req api.GrantWorkerRequestObject) (api.GrantWorkerResponseObject, error) {
	tenant := tenantFrom(ctx)
	ctx = h.audit(ctx, "worker.grant", "worker", req.WorkerId.String(), tenant.Organization(), map[string]any{"grantee": req.OrganizationId})
	g, err := h.store.GrantWorker(ctx, tenant, req.WorkerId, req.OrganizationId)
	if err != nil {
		return nil, err
	}
	return api.GrantWorker200JSONResponse(toWorkerGrant(g)), nil
}

// RevokeWorkerGrant withdraws a grant and the grantee's assignment.
func (h *handlers) RevokeWorkerGrant(ctx context.Context, req api.RevokeWorkerGrantRequestObject) (api.RevokeWorkerGrantResponseObject, error) {
	tenant := tenantFrom(ctx)
	cancelActive := req.Params.Active == nil || *req.Params.Active == api.RevokeWorkerGrantParamsActiveCancel
	ctx = h.audit(ctx, "worker.grant_revoke", "worker", req.WorkerId.String(), tenant.Organization(),
		map[string]any{"grantee": req.OrganizationId, "cancel_active": cancelActive})
	if err := h.store.RevokeWorkerGrant(ctx, tenant, req.WorkerId, req.OrganizationId, cancelActive); err != nil {
		return nil, err
	}
	return api.RevokeWorkerGrant204Response{}, nil
}

// ListWorkerGrants lists the organizations a worker's owner lets assign it.
func (h *handlers) ListWorkerGrants(ctx context.Context, req api.ListWorkerGrantsRequestObject) (api.ListWorkerGrantsResponseObject, error) {
	tenant := tenantFrom(ctx)
	grants, err := h.store.WorkerGrants(ctx, tenant, req.WorkerId)
	if err != nil {
		return nil, err
	}
	return api.ListWorkerGrants200JSONResponse{Items: mapSlice(grants, toWorkerGrant)}, nil
}

func toWorkerGrant(g store.WorkerGrant) api.WorkerGrant {
	return api.WorkerGrant{WorkerId: g.WorkerID, OrganizationId: g.OrganizationID, GrantedAt: g.GrantedAt}
}
