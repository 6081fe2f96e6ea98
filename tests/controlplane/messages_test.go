package controlplane

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// problemAnswer is what a client reads of a refusal.
type problemAnswer struct {
	Status int
	Code   string
	Detail string
}

// send makes one request and reads its problem answer.
func send(t *testing.T, client *http.Client, method, url, auth, body string, header map[string]string) problemAnswer {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"), string(raw))
	var p problemAnswer
	require.NoError(t, json.Unmarshal(raw, &p))
	require.Equal(t, res.StatusCode, p.Status)
	return p
}

// TestMessagesReadLikeTheAPI: the refusals a newcomer meets first name the
// parameter or field and say what it must be, never a regular expression
// or the validator's wording.
func TestMessagesReadLikeTheAPI(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	admin := g.HTTPClient(nil)
	attempt := g.URL + "/v1/attempts/" + uuid.NewString() + "/heartbeat"

	cases := []struct {
		name, method, path, body string
		worker                   bool
		header                   map[string]string
		detail                   string
	}{
		{name: "path UUID", method: "GET", path: "/v1/tasks/not-a-uuid", detail: "task_id must be a UUID"},
		{name: "query UUID", method: "GET", path: "/v1/tasks?organization_id=acme", detail: "organization_id must be a UUID"},
		{name: "body UUID", method: "POST", path: "/v1/tasks", body: `{"organization_id": "acme", "task_type": "ai"}`,
			detail: "invalid request body: organization_id must be a UUID"},
		{name: "query enum", method: "GET", path: "/v1/tasks?state=waiting",
			detail: "state must be one of: pending, leased, running, cancelling, cancelled, completed, retry_wait, failed_terminal"},
		{name: "body enum", method: "POST", path: "/v1/tasks", body: `{"organization_id": "` + org.String() + `", "task_type": "nope"}`,
			detail: "invalid request body: task_type must be one of: scanner_plugin, ai"},
		{name: "worker path UUID", method: "POST", path: "/v1/attempts/nope/heartbeat", worker: true,
			header: map[string]string{"Lease-Token": strings.Repeat("a", 64)}, detail: "attempt_id must be a UUID"},
		{name: "missing Lease-Token", method: "POST", path: strings.TrimPrefix(attempt, g.URL), worker: true,
			detail: "the Lease-Token header is missing"},
		{name: "malformed Lease-Token", method: "POST", path: strings.TrimPrefix(attempt, g.URL), worker: true,
			header: map[string]string{"Lease-Token": "short"}, detail: "the Lease-Token header is malformed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, auth := admin, g.AdminToken
			if tc.worker {
				client, auth = w.HTTP, ""
			}
			p := send(t, client, tc.method, g.URL+tc.path, auth, tc.body, tc.header)
			require.Equal(t, http.StatusBadRequest, p.Status, p.Detail)
			require.Equal(t, "bad-request", p.Code)
			require.Equal(t, tc.detail, p.Detail)
			require.NotContains(t, p.Detail, "regular expression")
		})
	}
}

// TestMissingOrganizationIsNamedForAnUnscopedAdmin: creating or listing
// tasks and scans of an organization that does not exist is a 404 that
// names it, for the platform operator. An organization's own token gets the
// answer it gets for another tenant's organization, which names nothing.
func TestMissingOrganizationIsNamedForAnUnscopedAdmin(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	orgA := g.NewOrganization(t, "a")
	orgB := g.NewOrganization(t, "b")
	token, _, err := g.Store.CreateAPIToken(context.Background(), store.EveryOrganization(),
		store.CreateAPITokenParams{Name: "a-admin", Permissions: []string{"admin"}, OrganizationID: &orgA})
	require.NoError(t, err)
	missing := uuid.NewString()
	client := g.HTTPClient(nil)
	named := "organization " + missing + " does not exist"
	createTask := func(org string) string { return `{"organization_id": "` + org + `", "task_type": "scanner_plugin"}` }
	createScan := func(org string) string {
		return `{"organization_id": "` + org + `", "targets": ["example.com"], "plugins": [{"name": "echo"}]}`
	}

	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/tasks", createTask(missing)},
		{"POST", "/v1/scans", createScan(missing)},
		{"GET", "/v1/tasks?organization_id=" + missing, ""},
		{"GET", "/v1/scans?organization_id=" + missing, ""},
	} {
		p := send(t, client, c.method, g.URL+c.path, g.AdminToken, c.body, nil)
		require.Equal(t, http.StatusNotFound, p.Status, "%s %s: %s", c.method, c.path, p.Detail)
		require.Equal(t, "not-found", p.Code)
		require.Equal(t, named, p.Detail, "%s %s", c.method, c.path)
	}

	// A scoped admin: a missing organization and another tenant's answer
	// alike, without naming it.
	for _, org := range []string{missing, orgB.String()} {
		for _, body := range []string{createTask(org), createScan(org)} {
			path := "/v1/tasks"
			if strings.Contains(body, "targets") {
				path = "/v1/scans"
			}
			p := send(t, client, "POST", g.URL+path, token, body, nil)
			require.Equal(t, http.StatusNotFound, p.Status, p.Detail)
			require.Equal(t, "not-found", p.Code)
			require.Equal(t, "no such resource", p.Detail)
		}
		tasks, err := g.ControlClient(t, token).ListTasksWithResponse(context.Background(),
			&apiclient.ListTasksParams{OrganizationId: new(uuid.MustParse(org))})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, tasks.StatusCode(), string(tasks.Body))
		require.Empty(t, tasks.JSON200.Items)
		scans, err := g.ControlClient(t, token).ListScansWithResponse(context.Background(),
			&apiclient.ListScansParams{OrganizationId: new(uuid.MustParse(org))})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, scans.StatusCode(), string(scans.Body))
		require.Empty(t, scans.JSON200.Items)
	}
}

// TestPendingReasonNamesAnUnadvertisedPlugin: a task whose plugin none of
// its organization's workers advertises says so while it waits.
func TestPendingReasonNamesAnUnadvertisedPlugin(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	wait := 0
	caps := apiclient.Capabilities(`{"plugins": ["echo"]}`)
	res, err := w.Client.AcquireLeasesWithResponse(context.Background(), &apiclient.AcquireLeasesParams{},
		apiclient.LeaseRequest{WaitSeconds: &wait, Capabilities: &caps})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))

	task := g.CreateTask(t, org, harness.TaskSpec{Payload: `{"plugin": "nmap", "input": {}}`})
	require.Equal(t, "plugin_not_advertised", string(*g.Task(t, task).PendingReason))
}
