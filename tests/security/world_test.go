package security

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// tenant is one organization with one of everything an API operation can
// name: a worker it owns (with its certificate), a task leased by that
// worker whose attempt has results, logs and a committed artifact, an open
// upload session, a scan, a schedule, a secret, a webhook target, an API
// token, a scope entry and a threat exclusion.
type tenant struct {
	org, worker, task, attempt, upload, file, scan, schedule, token, secret, webhook uuid.UUID
	scopeTarget, exclusion                                                           uuid.UUID
	leaseToken                                                                       string
	workerCert                                                                       tls.Certificate
	// uploadBody is what the open upload session expects.
	uploadBody []byte
}

// ids are the tenant's resource ids by the path parameter that names them.
func (tn tenant) ids() map[string]uuid.UUID {
	return map[string]uuid.UUID{
		"organization_id": tn.org, "worker_id": tn.worker, "task_id": tn.task, "attempt_id": tn.attempt,
		"upload_id": tn.upload, "file_id": tn.file, "scan_id": tn.scan, "token_id": tn.token,
		"schedule_id": tn.schedule, "secret_id": tn.secret, "webhook_id": tn.webhook,
		"scope_target_id": tn.scopeTarget, "exclusion_id": tn.exclusion,
	}
}

// newTenant builds a tenant through the public API only.
func newTenant(t *testing.T, g *harness.Gateway, name string) tenant {
	t.Helper()
	ctx := context.Background()
	var tn tenant
	tn.org = g.NewOrganizationWithPolicy(t, name, nil) // the default: allow_list
	// The scope covers the tenant's targets and the spec's examples'.
	localhost, err := g.Control.AddScopeTargetWithResponse(ctx, tn.org, apiclient.CreateScopeTargetRequest{Kind: "domain", Value: "localhost"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, localhost.StatusCode(), string(localhost.Body))
	scope, err := g.Control.AddScopeTargetWithResponse(ctx, tn.org, apiclient.CreateScopeTargetRequest{Kind: "domain", Value: "*.example"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, scope.StatusCode(), string(scope.Body))
	tn.scopeTarget = scope.JSON201.Id

	issued, err := g.CA.IssueClient(name+"-worker", time.Hour)
	require.NoError(t, err)
	tn.workerCert, err = tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	require.NoError(t, err)
	pemText, capacity := string(issued.CertPEM), 10
	created, err := g.Control.CreateWorkerWithResponse(ctx, apiclient.CreateWorkerRequest{Name: name + "-worker",
		WorkerType: "scanner", MaxConcurrentTasks: &capacity, CertificatePem: &pemText, OrganizationId: &tn.org})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.StatusCode(), string(created.Body))
	tn.worker = created.JSON201.Id

	tok, err := g.Control.CreateApiTokenWithResponse(ctx, apiclient.CreateApiTokenRequest{Name: name + "-reader",
		Scopes: []apiclient.TokenScope{"reader"}, OrganizationId: &tn.org})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, tok.StatusCode(), string(tok.Body))
	tn.token = tok.JSON201.ApiToken.Id

	tn.task = g.CreateTask(t, tn.org, harness.TaskSpec{})
	w := workerCaller{g: g, http: g.HTTPClient(&tn.workerCert)}
	var leases struct {
		Leases []struct {
			AttemptID  uuid.UUID `json:"attempt_id"`
			LeaseToken string    `json:"lease_token"`
			Task       struct {
				ID uuid.UUID `json:"id"`
			} `json:"task"`
		} `json:"leases"`
	}
	w.mustJSON(t, "POST", "/v1/leases", "", map[string]any{"max_tasks": 1, "wait_seconds": 10}, http.StatusOK, &leases)
	require.Len(t, leases.Leases, 1)
	require.Equal(t, tn.task, leases.Leases[0].Task.ID)
	tn.attempt, tn.leaseToken = leases.Leases[0].AttemptID, leases.Leases[0].LeaseToken

	attempt := "/v1/attempts/" + tn.attempt.String()
	w.mustJSON(t, "POST", attempt+"/results", tn.leaseToken, map[string]any{"sequence_number": 1,
		"records": []any{map[string]any{"kind": "asset", "asset": map[string]any{"type": "hostname", "value": name + ".example"}}}},
		http.StatusOK, nil)
	w.mustJSON(t, "POST", attempt+"/logs", tn.leaseToken, map[string]any{"offset": 0, "data": "hello from " + name + "\n"},
		http.StatusOK, nil)
	tn.file = w.uploadArtifact(t, attempt, tn.leaseToken, []byte("artifact of "+name), true)
	tn.uploadBody = []byte("second artifact of " + name)
	tn.upload = w.uploadArtifact(t, attempt, tn.leaseToken, tn.uploadBody, false)

	scan, err := g.Control.CreateScanWithResponse(ctx, nil, apiclient.CreateScanRequest{OrganizationId: tn.org,
		Targets: []string{name + ".example"}, Plugins: []apiclient.ScanPlugin{{Name: "dns-resolve"}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, scan.StatusCode(), string(scan.Body))
	tn.scan = scan.JSON201.Id

	// Yearly: it does not fire while the matrix runs, so only the calls
	// under test change its rows.
	sched, err := g.Control.CreateScheduleWithResponse(ctx, apiclient.CreateScheduleRequest{OrganizationId: tn.org,
		Name: name, Timing: apiclient.ScheduleTiming{Cron: ptr("0 3 1 1 *")},
		Definition: apiclient.ScheduleDefinition{Kind: apiclient.ScheduleDefinitionKindScan, Scan: &apiclient.ScheduledScan{
			Targets: []string{name + ".example"}, Plugins: []apiclient.ScanPlugin{{Name: "dns-resolve"}}}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, sched.StatusCode(), string(sched.Body))
	tn.schedule = sched.JSON201.Id

	// A public address literal (no DNS; documentation ranges are refused),
	// for an event that does not happen while the matrix runs.
	hook, err := g.Control.CreateWebhookWithResponse(ctx, apiclient.CreateWebhookRequest{OrganizationId: tn.org,
		Url: "http://9.9.9.9/" + name, EventTypes: []apiclient.WebhookEventType{apiclient.ScheduleFireSkipped}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, hook.StatusCode(), string(hook.Body))
	tn.webhook = hook.JSON201.Id
	value := "secret value of " + name
	sec, err := g.Control.CreateSecretWithResponse(ctx, apiclient.CreateSecretRequest{OrganizationId: tn.org,
		Name: "TENANT_SECRET", Value: &value})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, sec.StatusCode(), string(sec.Body))
	tn.secret = sec.JSON201.Id

	excl, err := g.Control.CreateThreatExclusionWithResponse(ctx, tn.org, apiclient.CreateThreatExclusionRequest{
		Severity: ptr(apiclient.Info), Reason: "noise of " + name})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, excl.StatusCode(), string(excl.Body))
	tn.exclusion = excl.JSON201.Id
	return tn
}

// workerCaller sends raw worker-protocol requests with one certificate.
type workerCaller struct {
	g    *harness.Gateway
	http *http.Client
}

func (w workerCaller) mustJSON(t *testing.T, method, path, leaseToken string, body any, want int, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	status, answer := w.do(t, method, path, leaseToken, "application/json", b)
	require.Equal(t, want, status, "%s %s: %s", method, path, answer)
	if out != nil {
		require.NoError(t, json.Unmarshal(answer, out))
	}
}

func (w workerCaller) do(t *testing.T, method, path, leaseToken, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, w.g.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Idempotency-Key", uuid.NewString())
	if leaseToken != "" {
		req.Header.Set("Lease-Token", leaseToken)
	}
	res, err := w.http.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	answer, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, answer
}

// uploadArtifact opens an upload session for content and, with commit,
// uploads and commits it, answering the file id; otherwise the open
// session's id.
func (w workerCaller) uploadArtifact(t *testing.T, attempt, leaseToken string, content []byte, commit bool) uuid.UUID {
	t.Helper()
	sum := sha256.Sum256(content)
	var session struct {
		UploadID uuid.UUID `json:"upload_id"`
	}
	w.mustJSON(t, "POST", attempt+"/artifacts", leaseToken, map[string]any{"name": "report.txt", "content_type": "text/plain",
		"size_bytes": len(content), "sha256": hex.EncodeToString(sum[:])}, http.StatusCreated, &session)
	if !commit {
		return session.UploadID
	}
	status, answer := w.do(t, "PUT", "/v1/uploads/"+session.UploadID.String(), "", "application/octet-stream", content)
	require.Less(t, status, 300, string(answer))
	var file struct {
		ID uuid.UUID `json:"id"`
	}
	status, answer = w.do(t, "POST", "/v1/uploads/"+session.UploadID.String()+"/commit", "", "", nil)
	require.Equal(t, http.StatusOK, status, string(answer))
	require.NoError(t, json.Unmarshal(answer, &file))
	require.NotEqual(t, uuid.Nil, file.ID)
	return file.ID
}

// scopedToken mints an API token of the organization with one scope.
func scopedToken(t *testing.T, g *harness.Gateway, org uuid.UUID, scope string) string {
	t.Helper()
	res, err := g.Control.CreateApiTokenWithResponse(context.Background(), apiclient.CreateApiTokenRequest{
		Name: fmt.Sprintf("%s of %s", scope, org), Scopes: []apiclient.TokenScope{apiclient.TokenScope(scope)}, OrganizationId: &org})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201.Token
}

// newSharedWorker makes a worker owned by b that serves both tenants: it
// holds one active attempt of b's, and is assigned to a too. a's callers
// must see only their own part of it.
func newSharedWorker(t *testing.T, g *harness.Gateway, a, b tenant) (worker, attemptOfB uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	issued, err := g.CA.IssueClient("shared", time.Hour)
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	require.NoError(t, err)
	pemText, capacity := string(issued.CertPEM), 4
	created, err := g.Control.CreateWorkerWithResponse(ctx, apiclient.CreateWorkerRequest{Name: "shared",
		WorkerType: "scanner", MaxConcurrentTasks: &capacity, CertificatePem: &pemText, OrganizationId: &b.org})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.StatusCode(), string(created.Body))
	worker = created.JSON201.Id

	g.CreateTask(t, b.org, harness.TaskSpec{})
	var leases struct {
		Leases []struct {
			AttemptID uuid.UUID `json:"attempt_id"`
		} `json:"leases"`
	}
	caller := workerCaller{g: g, http: g.HTTPClient(&cert)}
	caller.mustJSON(t, "POST", "/v1/leases", "", map[string]any{"max_tasks": 1, "wait_seconds": 10}, http.StatusOK, &leases)
	require.Len(t, leases.Leases, 1)
	g.Assign(t, a.org, worker)
	return worker, leases.Leases[0].AttemptID
}
