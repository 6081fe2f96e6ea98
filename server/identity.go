package server

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// IdentityConfig is how the gateway issues worker identities.
type IdentityConfig struct {
	// CA signs enrolled workers' certificates; nil disables enrollment
	// (bring-your-own-PKI certificates still work). Its key comes from
	// configuration files, never from the database.
	CA *pki.CA
	// CertificateValidity is an enrolled certificate's lifetime; workers
	// renew after two thirds of it.
	CertificateValidity time.Duration
	// RenewalGrace is how long the previous certificate keeps working
	// after a renewal if the new one is not used.
	RenewalGrace time.Duration
	// EnrollmentTokenTTL is how long an enrollment token stays usable.
	EnrollmentTokenTTL time.Duration
}

// maxEnrollSources bounds the source addresses whose refused enrollments
// are tracked at once (a few hundred KiB); past it the fullest buckets make
// room, so many addresses cannot grow the map.
const maxEnrollSources = 10000

// Enroll turns a one-time token and a CSR into a certificate.
func (h *handlers) Enroll(ctx context.Context, req api.EnrollRequestObject) (api.EnrollResponseObject, error) {
	ca, err := h.enrollmentCA()
	if err != nil {
		return nil, err
	}
	// Every attempt takes a token from its source address's bucket before
	// the database is asked, so concurrent guesses cannot overrun it; all
	// but a refused enrollment token give it back.
	source := sourceAddressFrom(ctx)
	ok, wait, refund := h.enrollRefusals.allow(source, time.Now())
	if !ok {
		h.security(ctx, actionEnrollmentRateLimited, "", "", nil)
		return nil, enrollmentRateLimited(wait)
	}
	tokenRefused := false
	defer func() {
		if !tokenRefused {
			refund()
		}
	}()
	keySum, err := csrPublicKeySHA256(req.Body.CsrPem)
	if err != nil {
		return nil, withCause(newProblem(http.StatusBadRequest, problem.BadCSR, "the CSR cannot be parsed"), err)
	}
	var issued api.IssuedCertificate
	ctx = h.auditAs(ctx, "worker", "", "worker.enroll", "worker", "", nil, nil) // the worker the token names: store
	workerID, certPEM, replayed, err := h.store.Enroll(ctx, req.Body.EnrollmentToken, keySum, func(workerID uuid.UUID) (store.Certificate, error) {
		var err error
		issued, err = h.signWorkerCSR(ca, workerID, req.Body.CsrPem)
		if err != nil {
			return store.Certificate{}, err
		}
		return store.Certificate{Fingerprint: issuedFingerprint(issued), Subject: "CN=" + workerID.String(),
			ExpiresAt: issued.ExpiresAt, PEM: issued.CertificatePem}, nil
	})
	if errors.Is(err, store.ErrEnrollmentToken) {
		tokenRefused = true
		h.security(ctx, actionEnrollmentRefused, "", "", nil)
		return nil, problemFor(err)
	}
	if err != nil {
		return nil, err
	}
	if replayed {
		// The worker's first answer was lost; it gets the same certificate.
		if issued, err = issuedFromPEM(ca, workerID, certPEM); err != nil {
			return nil, err
		}
		return api.Enroll200JSONResponse(issued), nil
	}
	return api.Enroll200JSONResponse(issued), nil
}

// RenewCertificate issues a new certificate to an authenticated worker.
func (h *handlers) RenewCertificate(ctx context.Context, req api.RenewCertificateRequestObject) (api.RenewCertificateResponseObject, error) {
	ca, err := h.enrollmentCA()
	if err != nil {
		return nil, err
	}
	workerID := workerFrom(ctx)
	issued, err := h.signWorkerCSR(ca, workerID, req.Body.CsrPem)
	if err != nil {
		return nil, err
	}
	cert := store.Certificate{Fingerprint: issuedFingerprint(issued), Subject: "CN=" + workerID.String(), ExpiresAt: issued.ExpiresAt}
	ctx = h.audit(ctx, "worker.renew_certificate", "worker", workerID.String(), nil, map[string]any{"expires_at": issued.ExpiresAt})
	if err := h.store.RenewCertificate(ctx, workerID, cert, fingerprintOfContext(ctx), h.cfg.Identity.RenewalGrace); err != nil {
		return nil, err
	}
	h.identities.forgetWorker(workerID) // other replicas hear the NOTIFY
	return api.RenewCertificate200JSONResponse(issued), nil
}

func (h *handlers) enrollmentCA() (*pki.CA, error) {
	if h.cfg.Identity.CA == nil {
		return nil, newProblem(http.StatusServiceUnavailable, problem.EnrollmentDisabled, "this gateway has no CA configured for enrollment")
	}
	return h.cfg.Identity.CA, nil
}

// signWorkerCSR signs a CSR with the worker's id as its subject, whatever
// the CSR asked for.
func (h *handlers) signWorkerCSR(ca *pki.CA, workerID uuid.UUID, csrPEM string) (api.IssuedCertificate, error) {
	validity := h.cfg.Identity.CertificateValidity
	cert, certPEM, err := ca.SignCSR([]byte(csrPEM), workerID.String(), validity)
	if errors.Is(err, pki.ErrBadCSR) {
		return api.IssuedCertificate{}, withCause(newProblem(http.StatusBadRequest, problem.BadCSR, publicTextOr(err, "the CSR is not acceptable")), err)
	}
	if err != nil {
		return api.IssuedCertificate{}, fmt.Errorf("sign certificate: %w", err)
	}
	lifetime := time.Until(cert.NotAfter)
	return api.IssuedCertificate{
		WorkerId: workerID, CertificatePem: string(certPEM), CaCertificatePem: string(ca.CertPEM),
		ExpiresAt: cert.NotAfter, ExpiresInSeconds: lifetime.Seconds(), RenewInSeconds: (lifetime * 2 / 3).Seconds(),
	}, nil
}

// csrPublicKeySHA256 identifies a CSR's key, so a repeated enrollment can
// be recognised without trusting anything else in the CSR.
func csrPublicKeySHA256(csrPEM string) (string, error) {
	block, _ := pem.Decode([]byte(csrPEM))
	if block == nil {
		return "", errors.New("no PEM block")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(csr.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:]), nil
}

// issuedFromPEM describes a stored certificate as an enrollment answer.
func issuedFromPEM(ca *pki.CA, workerID uuid.UUID, certPEM string) (api.IssuedCertificate, error) {
	cert, err := pki.ParseCertificatePEM([]byte(certPEM))
	if err != nil {
		return api.IssuedCertificate{}, fmt.Errorf("stored enrollment certificate: %w", err)
	}
	lifetime := cert.NotAfter.Sub(cert.NotBefore)
	return api.IssuedCertificate{
		WorkerId: workerID, CertificatePem: certPEM, CaCertificatePem: string(ca.CertPEM),
		ExpiresAt: cert.NotAfter, ExpiresInSeconds: time.Until(cert.NotAfter).Seconds(),
		RenewInSeconds: max(time.Until(cert.NotBefore.Add(lifetime*2/3)), 0).Seconds(),
	}, nil
}

func issuedFingerprint(c api.IssuedCertificate) string {
	cert, err := pki.ParseCertificatePEM([]byte(c.CertificatePem))
	if err != nil {
		return ""
	}
	return pki.Fingerprint(cert)
}

// RevokeWorker revokes a worker for good.
func (h *handlers) RevokeWorker(ctx context.Context, req api.RevokeWorkerRequestObject) (api.RevokeWorkerResponseObject, error) {
	tenant := tenantFrom(ctx)
	ctx = h.audit(ctx, "worker.revoke", "worker", req.WorkerId.String(), tenant.Organization(), map[string]any{"reason": req.Body.Reason})
	w, err := h.store.RevokeWorker(ctx, tenant, req.WorkerId, req.Body.Reason, h.onlineWindow())
	if err != nil {
		return nil, err
	}
	// Refuse its next request and answer its waiting polls here at once;
	// other replicas hear the NOTIFY.
	h.identities.forgetWorker(req.WorkerId)
	h.hub.WakeWorker(req.WorkerId)
	return api.RevokeWorker200JSONResponse(toWorker(w)), nil
}

// CreateEnrollmentToken issues a new one-time enrollment token.
func (h *handlers) CreateEnrollmentToken(ctx context.Context, req api.CreateEnrollmentTokenRequestObject) (api.CreateEnrollmentTokenResponseObject, error) {
	tenant := tenantFrom(ctx)
	ctx = h.audit(ctx, "worker.enrollment_token", "worker", req.WorkerId.String(), tenant.Organization(), nil)
	token, expires, err := h.store.CreateEnrollmentToken(ctx, tenant, req.WorkerId, h.cfg.Identity.EnrollmentTokenTTL)
	if err != nil {
		return nil, err
	}
	return api.CreateEnrollmentToken201JSONResponse{EnrollmentToken: token, ExpiresAt: expires,
		ExpiresInSeconds: h.cfg.Identity.EnrollmentTokenTTL.Seconds()}, nil
}

// ListOrganizationWorkers lists an organization's workers with eligibility.
func (h *handlers) ListOrganizationWorkers(ctx context.Context, req api.ListOrganizationWorkersRequestObject) (api.ListOrganizationWorkersResponseObject, error) {
	tenant := tenantFrom(ctx)
	list, err := h.store.OrganizationWorkers(ctx, tenant, req.OrganizationId, h.onlineWindow())
	if err != nil {
		return nil, err
	}
	return api.ListOrganizationWorkers200JSONResponse{Items: mapSlice(list, func(e store.WorkerEligibility) api.OrganizationWorker {
		return api.OrganizationWorker{Worker: toWorker(e.Worker), AssignmentEnabled: e.AssignmentEnabled, Eligible: e.Eligible,
			Reason: api.OrganizationWorkerReason(e.Reason)}
	})}, nil
}
