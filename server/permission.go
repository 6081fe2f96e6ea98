package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store"
)

// permissionExtension names, on every operation of openapi.yaml, the
// permission it needs. The contract is the only place a route's permission
// is written: authenticate enforces it for HTTP requests, authorizeOperation
// for the console's in-process calls, and the permission matrix test reads
// it.
const permissionExtension = "x-permission"

// The permissions an operation may need. reader, producer and admin are
// API token scopes (the API calls them "scopes"; in this code "scope" names
// only the tenant a call acts for, store.Scope).
const (
	permissionPublic      = "public"       // no credential
	permissionWorker      = "worker"       // a worker's client certificate
	permissionReader      = "reader"       // read an organization's data
	permissionProducer    = "producer"     // create and manage tasks, scans, schedules
	permissionAdmin       = "admin"        // everything within the token's organizations
	permissionGlobalAdmin = "global-admin" // shared objects: an admin token without organization scope
)

// tokenScopesFor are the API token scopes that satisfy each permission a
// bearer token can hold: admin may do everything, a producer also reads.
var tokenScopesFor = map[string][]string{
	permissionReader:      {permissionReader, permissionProducer, permissionAdmin},
	permissionProducer:    {permissionProducer, permissionAdmin},
	permissionAdmin:       {permissionAdmin},
	permissionGlobalAdmin: {permissionAdmin},
}

// schemeOfPermission is the security scheme an operation with each
// permission must declare ("" for none).
func schemeOfPermission(permission string) (string, bool) {
	switch permission {
	case permissionPublic:
		return "", true
	case permissionWorker:
		return schemeWorkerMTLS, true
	}
	_, ok := tokenScopesFor[permission]
	return schemeBearer, ok
}

// operationPermission is the permission op declares, or "".
func operationPermission(op *openapi3.Operation) string {
	p, _ := op.Extensions[permissionExtension].(string)
	return p
}

// checkPermissions fails unless every operation of spec names a known
// permission that agrees with the security it declares. The gateway does
// not start with a contract that fails it, so no route ships without a
// decided permission.
func checkPermissions(spec *openapi3.T) error {
	var errs []error
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			permission := operationPermission(op)
			scheme, known := schemeOfPermission(permission)
			if !known {
				errs = append(errs, fmt.Errorf("%s %s (%s): %s %q is missing or unknown", method, path, op.OperationID, permissionExtension, permission))
				continue
			}
			security := spec.Security
			if op.Security != nil {
				security = *op.Security
			}
			var declared []string
			for _, req := range security {
				for name := range req {
					declared = append(declared, name)
				}
			}
			if (scheme == "" && len(declared) != 0) || (scheme != "" && !slices.Equal(declared, []string{scheme})) {
				errs = append(errs, fmt.Errorf("%s %s (%s): %s %q needs security %q, the operation declares %v", method, path, op.OperationID, permissionExtension, permission, scheme, declared))
			}
		}
	}
	return errors.Join(errs...)
}

// authorize is the one permission decision for API tokens: may p perform an
// operation that needs permission, and for which organizations. The
// answer's scope is what every store call of the operation is limited to.
func authorize(p *store.Principal, permission string) (store.Tenant, error) {
	if p == nil {
		return store.Tenant{}, newProblem(http.StatusUnauthorized, problem.Unauthenticated, "this route needs a bearer API token")
	}
	scopes, ok := tokenScopesFor[permission]
	if !ok || !slices.ContainsFunc(scopes, func(s string) bool { return slices.Contains(p.Permissions, s) }) {
		return store.Tenant{}, newProblem(http.StatusForbidden, problem.Forbidden, "the API token lacks the permission this route needs")
	}
	tenant := store.TenantOf(p.OrganizationID)
	if permission == permissionGlobalAdmin && !tenant.IsEveryOrganization() {
		return store.Tenant{}, newProblem(http.StatusForbidden, problem.Forbidden, "this route needs an admin token without organization scope")
	}
	return tenant, nil
}

// authorizeOperation decides the console's in-process call of an operation
// (named as the generated interface names it) as authenticate decides an
// HTTP request for it: from the operation's permission in the contract and
// the session's token. The returned context carries the decided scope for
// the handler; the caller's context is left as it was, so one page's calls
// are each decided on their own.
func authorizeOperation(spec *openapi3.T) func(ctx context.Context, operationID string) (context.Context, error) {
	byID := map[string]*openapi3.Operation{}
	for _, item := range spec.Paths.Map() {
		for _, op := range item.Operations() {
			byID[op.OperationID] = op
		}
	}
	return func(ctx context.Context, operationID string) (context.Context, error) {
		op, ok := byID[operationID]
		if !ok {
			return ctx, fmt.Errorf("authorize: no operation %q in the contract", operationID)
		}
		principal := authFrom(ctx).principal
		permission := operationPermission(op)
		if scheme, _ := schemeOfPermission(permission); scheme != schemeBearer {
			// Public and worker routes are no console's to call.
			return ctx, newProblem(http.StatusForbidden, problem.Forbidden, "the API token lacks the permission this route needs")
		}
		tenant, err := authorize(principal, permission)
		if err != nil {
			return ctx, err
		}
		ctx, st := withAuthState(ctx)
		st.principal, st.tenant = principal, &tenant
		return ctx, nil
	}
}
