package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/failpoint"
	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store"
)

// The security scheme names in openapi.yaml. The request validator calls
// authenticate with the scheme each route declares, so the spec alone
// decides which routes need a certificate and which a token.
const (
	schemeWorkerMTLS = "workerMTLS"
	schemeBearer     = "bearerAuth"
)

// authState is filled in by authenticate and read by handlers. The outer
// middleware puts an empty one in the request context because the
// validator's callback cannot replace the context itself.
type authState struct {
	worker    *store.WorkerIdentity
	principal *store.Principal
	// fingerprint is the client certificate the worker authenticated with.
	fingerprint string
	// tenant is the tenant the operation's permission was decided for
	// (authenticate, authorizeOperation); nil until then.
	tenant *store.Tenant
}

type authKey struct{}

func withAuthState(ctx context.Context) (context.Context, *authState) {
	st := &authState{}
	return context.WithValue(ctx, authKey{}, st), st
}

func authFrom(ctx context.Context) *authState {
	st, _ := ctx.Value(authKey{}).(*authState)
	if st == nil {
		return &authState{}
	}
	return st
}

// tenantFrom is the tenant decided for the caller of the operation a
// handler serves, when its permission in the contract was checked. Without
// a decision it is the zero Tenant, which sees and changes nothing.
func tenantFrom(ctx context.Context) store.Tenant {
	if sc := authFrom(ctx).tenant; sc != nil {
		return *sc
	}
	return store.Tenant{}
}

// workerFrom returns the authenticated worker; handlers of worker routes
// run only after authenticate succeeded.
func workerFrom(ctx context.Context) uuid.UUID {
	if w := authFrom(ctx).worker; w != nil {
		return w.ID
	}
	return uuid.Nil
}

// authenticate checks one security scheme for one request, then the
// permission the route's operation names in the contract (x-permission):
// the one place a route's permission is enforced, before any byte of the
// body is read. It runs on every request, so a revoked worker is refused
// even on a connection (or resumed TLS session) that was authenticated
// before its revocation.
func (s *Server) authenticate(ctx context.Context, input *openapi3filter.AuthenticationInput) error {
	r := input.RequestValidationInput.Request
	permission := operationPermission(input.RequestValidationInput.Route.Operation)
	st := authFrom(r.Context())
	switch input.SecuritySchemeName {
	case schemeWorkerMTLS:
		id, err := s.authenticateWorker(ctx, r)
		if err != nil {
			return err
		}
		if ok, wait, _ := s.workerRate.allow(id.ID, time.Now()); !ok {
			s.metrics.rateLimited.Inc()
			return rateLimited(wait)
		}
		if permission != permissionWorker {
			return newProblem(http.StatusForbidden, problem.Forbidden, "a worker certificate does not grant this route")
		}
		st.worker, st.fingerprint = &id, fingerprintOf(r)
		return nil
	case schemeBearer:
		p, err := s.authenticateBearer(ctx, r)
		if err != nil {
			return err
		}
		st.principal = &p
		tenant, err := authorize(&p, permission)
		if err != nil {
			return err
		}
		st.tenant = &tenant
		return nil
	}
	return newProblem(http.StatusUnauthorized, problem.Unauthenticated, "unsupported security scheme")
}

func (s *Server) authenticateWorker(ctx context.Context, r *http.Request) (store.WorkerIdentity, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return store.WorkerIdentity{}, newProblem(http.StatusUnauthorized, problem.CertificateRequired,
			"this route needs a TLS client certificate")
	}
	cert := r.TLS.PeerCertificates[0]
	// The gateway's own clock (skewable in fault tests): certificate
	// validity is the one decision here that is not the database's.
	if now := failpoint.Now(); now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		return store.WorkerIdentity{}, newProblem(http.StatusUnauthorized, problem.CertificateExpired,
			"the client certificate is not valid at this time")
	}
	id, err := s.lookupWorker(ctx, pki.Fingerprint(cert))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.WorkerIdentity{}, newProblem(http.StatusUnauthorized, problem.CertificateUnknown,
			"the client certificate is not registered to any worker")
	case err != nil:
		return store.WorkerIdentity{}, problemFor(err)
	case id.Revoked:
		return store.WorkerIdentity{}, problemFor(store.ErrWorkerRevoked)
	}
	return id, nil
}

// fingerprintOfContext is the certificate the request's worker
// authenticated with.
func fingerprintOfContext(ctx context.Context) string { return authFrom(ctx).fingerprint }

// fingerprintOf is the SHA-256 fingerprint of the request's client
// certificate, or "".
func fingerprintOf(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return ""
	}
	return pki.Fingerprint(r.TLS.PeerCertificates[0])
}

func (s *Server) authenticateBearer(ctx context.Context, r *http.Request) (store.Principal, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return store.Principal{}, newProblem(http.StatusUnauthorized, problem.Unauthenticated, "this route needs a bearer API token")
	}
	// Compare the prefix in constant time anyway: it is cheap, and the
	// lookup itself is by hash, so no timing reveals a stored token.
	if subtle.ConstantTimeCompare([]byte(token[:min(len(token), len(store.APITokenPrefix))]), []byte(store.APITokenPrefix)) != 1 {
		return store.Principal{}, newProblem(http.StatusUnauthorized, problem.Unauthenticated, "the API token is malformed")
	}
	p, err := s.store.AuthenticateToken(ctx, token)
	if errors.Is(err, store.ErrNotFound) {
		return store.Principal{}, newProblem(http.StatusUnauthorized, problem.Unauthenticated, "the API token is unknown, revoked or expired")
	}
	if err != nil {
		return store.Principal{}, problemFor(err)
	}
	return p, nil
}
