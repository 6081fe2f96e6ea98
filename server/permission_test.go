package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// TestEveryOperationNamesItsPermission: the build fails on an operation of
// openapi.yaml without x-permission, with an unknown one, or with one that
// disagrees with the security it declares — the same check that keeps the
// gateway from starting.
func TestEveryOperationNamesItsPermission(t *testing.T) {
	spec, err := api.GetSpec()
	require.NoError(t, err)
	require.NoError(t, checkPermissions(spec))
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			_, known := schemeOfPermission(operationPermission(op))
			require.True(t, known, "%s %s (%s) names no known x-permission", method, path, op.OperationID)
		}
	}

	// The check catches each way an operation can be wrong.
	op := spec.Paths.Find("/v1/tasks").Get
	for _, bad := range []any{nil, "", "superuser", permissionWorker, permissionPublic, true} {
		t.Run(fmt.Sprintf("x-permission %v", bad), func(t *testing.T) {
			saved := op.Extensions[permissionExtension]
			defer func() { op.Extensions[permissionExtension] = saved }()
			if bad == nil {
				delete(op.Extensions, permissionExtension)
			} else {
				op.Extensions[permissionExtension] = bad
			}
			require.ErrorContains(t, checkPermissions(spec), "GET /v1/tasks")
		})
	}
}

// TestAuthorize: each permission against each kind of token, with the
// problems the handlers answered before the contract carried permissions.
func TestAuthorize(t *testing.T) {
	org := uuid.New()
	token := func(scoped bool, scopes ...string) *store.Principal {
		p := &store.Principal{TokenID: uuid.New(), Permissions: scopes}
		if scoped {
			p.OrganizationID = &org
		}
		return p
	}
	const lacks = "the API token lacks the permission this route needs"
	cases := []struct {
		name       string
		principal  *store.Principal
		permission string
		refusal    string // "" when allowed
	}{
		{"reader reads", token(true, "reader"), permissionReader, ""},
		{"producer reads", token(true, "producer"), permissionReader, ""},
		{"admin reads", token(true, "admin"), permissionReader, ""},
		{"reader may not produce", token(true, "reader"), permissionProducer, lacks},
		{"producer produces", token(true, "producer"), permissionProducer, ""},
		{"admin produces", token(true, "admin"), permissionProducer, ""},
		{"producer is no admin", token(true, "producer", "reader"), permissionAdmin, lacks},
		{"scoped admin", token(true, "admin"), permissionAdmin, ""},
		{"scoped admin is no global admin", token(true, "admin"), permissionGlobalAdmin, "this route needs an admin token without organization scope"},
		{"unscoped producer is no global admin", token(false, "producer"), permissionGlobalAdmin, lacks},
		{"unscoped admin is global admin", token(false, "admin"), permissionGlobalAdmin, ""},
		{"no token scope", token(false), permissionReader, lacks},
		{"a token never passes as a worker", token(false, "admin"), permissionWorker, lacks},
		{"unknown permission", token(false, "admin"), "superuser", lacks},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tenant, err := authorize(c.principal, c.permission)
			if c.refusal == "" {
				require.NoError(t, err)
				require.Equal(t, store.TenantOf(c.principal.OrganizationID), tenant)
				return
			}
			var p *Problem
			require.True(t, errors.As(err, &p), "%v", err)
			require.Equal(t, http.StatusForbidden, p.Status)
			require.Equal(t, problem.Forbidden, p.Code)
			require.Equal(t, c.refusal, string(p.Detail))
			require.Equal(t, store.Tenant{}, tenant)
		})
	}
	_, err := authorize(nil, permissionReader)
	var p *Problem
	require.True(t, errors.As(err, &p))
	require.Equal(t, http.StatusUnauthorized, p.Status)
}

// TestConsoleCallsAreAuthorized: every method of the strict interface, as
// the console holds it, asks the contract's permission for its own
// operation before it runs, and runs with the decided scope.
func TestConsoleCallsAreAuthorized(t *testing.T) {
	spec, err := loadSpec()
	require.NoError(t, err)
	decide := authorizeOperation(spec)
	iface := reflect.TypeFor[api.StrictServerInterface]()
	for i := range iface.NumMethod() {
		m := iface.Method(i)
		t.Run(m.Name, func(t *testing.T) {
			var asked []string
			guarded := api.NewGuardedStrictServer(nil, func(ctx context.Context, operationID string) (context.Context, error) {
				asked = append(asked, operationID)
				return decide(ctx, operationID)
			})
			// No principal: refused before the (nil) handler runs.
			ctx, _ := withAuthState(context.Background())
			out := reflect.ValueOf(guarded).MethodByName(m.Name).Call([]reflect.Value{
				reflect.ValueOf(ctx), reflect.New(m.Type.In(1)).Elem(),
			})
			require.Equal(t, []string{m.Name}, asked)
			err, _ := out[1].Interface().(error)
			var p *Problem
			require.True(t, errors.As(err, &p), "%s: %v", m.Name, err)
			require.Contains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, p.Status)
		})
	}

	// A reader's session reads with its organization's scope, and may not
	// create a task.
	org := uuid.New()
	ctx, st := withAuthState(context.Background())
	st.principal = &store.Principal{TokenID: uuid.New(), Permissions: []string{"reader"}, OrganizationID: &org}
	decided, err := decide(ctx, "ListTasks")
	require.NoError(t, err)
	require.Equal(t, store.OneOrganization(org), tenantFrom(decided))
	require.Equal(t, store.Tenant{}, tenantFrom(ctx), "the page's own context keeps no decision")
	_, err = decide(ctx, "CreateTask")
	var p *Problem
	require.True(t, errors.As(err, &p))
	require.Equal(t, http.StatusForbidden, p.Status)
}

// secretLikeName is a property name that suggests a secret; every such
// property of an answer must say whether it holds one.
var secretLikeName = regexp.MustCompile(`(?i)secret|token|key|password|passphrase|private|credential|pem`)

// TestSecretFieldsAreMarked: in every schema an answer can carry, a
// property named like a secret carries x-secret (true or false), so a new
// secret field cannot be left out of no-store; and the operations known to
// answer secrets are found from the marks.
func TestSecretFieldsAreMarked(t *testing.T) {
	spec, err := api.GetSpec()
	require.NoError(t, err)
	var walk func(where string, ref *openapi3.SchemaRef, seen map[*openapi3.Schema]bool)
	walk = func(where string, ref *openapi3.SchemaRef, seen map[*openapi3.Schema]bool) {
		s := ref.Value
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		for name, prop := range s.Properties {
			if secretLikeName.MatchString(name) {
				_, marked := secretMark(prop)
				require.True(t, marked, "%s.%s is named like a secret: mark it x-secret: true or false in openapi.yaml", where, name)
			}
			walk(where+"."+name, prop, seen)
		}
		for _, c := range append(append(append(openapi3.SchemaRefs{}, s.AllOf...), s.OneOf...), s.AnyOf...) {
			walk(where, c, seen)
		}
		if s.Items != nil {
			walk(where+"[]", s.Items, seen)
		}
		if s.AdditionalProperties.Schema != nil {
			walk(where+"{}", s.AdditionalProperties.Schema, seen)
		}
	}
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			for status, resp := range op.Responses.Map() {
				for _, media := range resp.Value.Content {
					if media.Schema != nil {
						walk(method+" "+path+" "+status, media.Schema, map[*openapi3.Schema]bool{})
					}
				}
			}
		}
	}

	secret := secretAnswers(spec)
	for _, op := range []string{"CreateApiToken", "CreateWorker", "CreateEnrollmentToken", "Enroll", "RenewCertificate",
		"AcquireLeases", "OpenArtifactUpload", "CreateWebhook", "RotateWebhookSecret"} {
		require.True(t, secret[op], "%s answers a secret", op)
	}
	for _, op := range []string{"ListApiTokens", "GetWebhook", "ListWebhooks", "GetTask", "HeartbeatWorker"} {
		require.False(t, secret[op], "%s answers no secret", op)
	}
}
