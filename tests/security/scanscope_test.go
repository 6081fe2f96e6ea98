package security

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// scopedOrg is an organization (with the API's default policy) whose scan
// scope approves the given domains.
func scopedOrg(t *testing.T, g *harness.Gateway, name string, domains ...string) (uuid.UUID, map[string]uuid.UUID) {
	t.Helper()
	org := g.NewOrganizationWithPolicy(t, name, nil)
	entries := map[string]uuid.UUID{}
	for _, d := range domains {
		res, err := g.Control.AddScopeTargetWithResponse(context.Background(), org, apiclient.CreateScopeTargetRequest{Kind: "domain", Value: d})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
		entries[d] = res.JSON201.Id
	}
	return org, entries
}

// createTaskRaw posts a scanner_plugin task with payload as written (keys
// byte for byte) and returns the answer's status and body.
func createTaskRaw(t *testing.T, g *harness.Gateway, org uuid.UUID, payload string) (int, []byte) {
	t.Helper()
	body := `{"organization_id": "` + org.String() + `", "task_type": "scanner_plugin", "payload": ` + payload + `}`
	res, err := g.Control.CreateTaskWithBodyWithResponse(context.Background(), nil, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	return res.StatusCode(), res.Body
}

// The red-team finding: an organization whose scope was only example.com
// created a tcp-connect task whose ip asset was "vm" (which resolved to
// loopback) and got 201; so did numeric spellings of 127.0.0.1, a port
// asset on a single-label host, and an input key that Go's JSON decoder
// folds to "addresses" (U+017F ſ), in tasks and in scans. Each is now 400
// target-out-of-scope, and what the scope approves still passes.
func TestScannerPayloadsCannotBypassScope(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org, _ := scopedOrg(t, g, "bypass-"+uuid.NewString()[:8], "example.com")

	for _, payload := range []string{
		`{"plugin": "tcp-connect", "assets": [{"type": "ip", "value": "vm"}], "input": {"ports": [18443]}}`,
		`{"plugin": "tcp-connect", "assets": [{"type": "ip", "value": "2130706433"}], "input": {"ports": [22]}}`,
		`{"plugin": "tcp-connect", "assets": [{"type": "ip", "value": "127.1"}], "input": {"ports": [22]}}`,
		`{"plugin": "tcp-connect", "assets": [{"type": "ip", "value": "0x7f000001"}], "input": {"ports": [22]}}`,
		`{"plugin": "tcp-connect", "assets": [{"type": "hostname", "value": "ip6-localhost"}]}`,
		`{"plugin": "http-probe", "assets": [{"type": "port", "value": "intranet:22"}]}`,
		`{"plugin": "tcp-connect", "input": {"addreſſes": ["vm:18443"]}}`,
		`{"plugin": "tcp-connect", "input": {"ADDRESSES": ["vm:18443"]}}`,
		`{"plugin": "tcp-connect", "aſſets": [{"type": "ip", "value": "127.0.0.1"}]}`,
		`{"plugin": "tcp-connect", "input": {"note": "0x7f000001"}}`,
		`{"plugin": "tcp-connect", "input": {"via": "intranet:22"}}`,
	} {
		status, body := createTaskRaw(t, g, org, payload)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", payload, body)
		require.Equal(t, "target-out-of-scope", problemCode(t, body), payload)
	}
	status, body := createTaskRaw(t, g, org,
		`{"plugin": "tcp-connect", "assets": [{"type": "hostname", "value": "example.com"}], "input": {"addresses": ["example.com:22"]}}`)
	require.Equal(t, http.StatusCreated, status, string(body))

	scan := `{"organization_id": "` + org.String() + `", "targets": ["example.com"],
		"plugins": [{"name": "tcp-connect", "input": {"addreſſes": ["vm:18443"]}}]}`
	res, err := g.Control.CreateScanWithBodyWithResponse(context.Background(), nil, "application/json", strings.NewReader(scan))
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, res.StatusCode(), string(res.Body))
	require.Equal(t, "target-out-of-scope", problemCode(t, res.Body))
}

// The red-team finding: after a scope entry was deleted, creating a task
// aimed at it again was refused, but retrying the cancelled one answered
// 200 and put it back in the queue. A redrive is now decided like a
// creation, and the deletion itself cancels the organization's queued work
// that lost its approval.
func TestRedriveAndQueuedWorkAreHeldToScope(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	org, entries := scopedOrg(t, g, "redrive-"+uuid.NewString()[:8], "leaving.example", "staying.example")

	task := func(host string) uuid.UUID {
		return g.CreateTask(t, org, harness.TaskSpec{Payload: `{"plugin": "tcp-connect", "input": {"addresses": ["` + host + `:22"]}}`})
	}
	cancelled, queued, staying := task("leaving.example"), task("leaving.example"), task("staying.example")
	res, err := g.Control.CancelTaskWithResponse(ctx, cancelled)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))

	removed, err := g.Control.RemoveScopeTargetWithResponse(ctx, org, entries["leaving.example"])
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, removed.StatusCode(), string(removed.Body))

	retry, err := g.Control.RetryTaskWithResponse(ctx, cancelled)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, retry.StatusCode(), string(retry.Body))
	require.Equal(t, "target-out-of-scope", problemCode(t, retry.Body))
	require.Equal(t, "cancelled", string(g.Task(t, cancelled).State), "the refused redrive left it cancelled")

	q := g.Task(t, queued)
	require.Equal(t, "cancelled", string(q.State), "a queued task does not outlive its approval")
	require.NotNil(t, q.LastErrorCode)
	require.Equal(t, "target-out-of-scope", *q.LastErrorCode)
	require.Equal(t, "pending", string(g.Task(t, staying).State))
}

// The red-team finding: an organization that never had a scope entry could
// scan anything. The policy is now the organization's, shown with it: an
// organization created through the API without naming one is allow_list
// (nothing approved, nothing scanned); unrestricted is explicit; only a
// platform operator changes it, and moving to allow_list cancels the
// queued work it no longer approves.
func TestScopePolicyIsExplicitAndAllowListByDefault(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()

	byDefault := g.NewOrganizationWithPolicy(t, "default-"+uuid.NewString()[:8], nil)
	got, err := g.Control.GetOrganizationWithResponse(ctx, byDefault)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, got.StatusCode(), string(got.Body))
	require.Equal(t, apiclient.AllowList, got.JSON200.ScopePolicy)
	status, body := createTaskRaw(t, g, byDefault, `{"plugin": "tcp-connect", "input": {"addresses": ["127.0.0.1:22"]}}`)
	require.Equal(t, http.StatusBadRequest, status, string(body))
	require.Equal(t, "target-out-of-scope", problemCode(t, body))

	open := g.NewOrganization(t, "open-"+uuid.NewString()[:8]) // unrestricted, by name
	got, err = g.Control.GetOrganizationWithResponse(ctx, open)
	require.NoError(t, err)
	require.Equal(t, apiclient.Unrestricted, got.JSON200.ScopePolicy)
	anywhere := g.CreateTask(t, open, harness.TaskSpec{Payload: `{"plugin": "tcp-connect", "input": {"addresses": ["127.0.0.1:22"]}}`})

	scopedAdmin := g.ControlClient(t, mint(t, g.Control, apiclient.CreateApiTokenRequest{Name: "org-admin",
		Scopes: scopes(admin), OrganizationId: &open}).Token)
	refused, err := scopedAdmin.UpdateOrganizationWithResponse(ctx, open, apiclient.UpdateOrganizationRequest{ScopePolicy: apiclient.AllowList})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, refused.StatusCode(), string(refused.Body))

	updated, err := g.Control.UpdateOrganizationWithResponse(ctx, open, apiclient.UpdateOrganizationRequest{ScopePolicy: apiclient.AllowList})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, updated.StatusCode(), string(updated.Body))
	require.Equal(t, apiclient.AllowList, updated.JSON200.ScopePolicy)
	require.Equal(t, "cancelled", string(g.Task(t, anywhere).State))

	list, err := g.Control.ListOrganizationsWithResponse(ctx, &apiclient.ListOrganizationsParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, list.StatusCode(), string(list.Body))
	for _, o := range list.JSON200.Items {
		require.Contains(t, []apiclient.ScopePolicy{apiclient.AllowList, apiclient.Unrestricted}, o.ScopePolicy, o.Name)
	}
}
