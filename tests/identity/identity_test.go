package identity

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestRevocationRefusesEverythingAtOnce revokes a worker that holds leases,
// has a long-poll waiting and keeps a keep-alive connection open.
func TestRevocationRefusesEverythingAtOnce(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	bad := g.NewWorker(t, "bad", 2, org)
	g.CreateTask(t, org, harness.TaskSpec{})
	leases := lease(t, bad, 1, 0)
	require.Len(t, leases, 1)
	l := leases[0]
	s := harness.ResultSender{T: t, W: bad, Base: g.URL}
	require.Equal(t, http.StatusOK, s.Send(l, "k1", scannerBatch(1, "before.example")).Status, "the connection is warm")

	// A long-poll waits on another stream of the same keep-alive client
	// (capacity 2, one slot free, nothing leasable).
	g.CreateTask(t, org, harness.TaskSpec{RequiredCapabilities: map[string]any{"never": true}})
	polled := make(chan int, 1)
	go func() {
		body, _ := json.Marshal(map[string]any{"max_tasks": 1, "wait_seconds": 25})
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/leases", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := bad.HTTP.Do(req)
		if err != nil {
			polled <- -1
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		polled <- res.StatusCode
	}()
	harness.WaitFor(t, 10*time.Second, "the poll to wait", func() bool { return g.Server.Hub().Waiting() == 1 })

	res, err := g.Control.RevokeWorkerWithResponse(context.Background(), bad.ID, apiclient.RevokeRequest{Reason: "key leaked"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.True(t, res.JSON200.Revoked)

	select {
	case status := <-polled:
		require.Contains(t, []int{http.StatusOK, http.StatusForbidden}, status, "the waiting poll is answered at once")
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting poll was not answered")
	}
	// Its next request of any kind is refused, on the same client.
	hb, err := bad.Client.HeartbeatAttemptWithResponse(context.Background(), l.AttemptId, &apiclient.HeartbeatAttemptParams{LeaseToken: l.LeaseToken})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, hb.StatusCode())
	require.Equal(t, "worker-revoked", problemCode(t, hb.Body))
	late := s.Send(l, "k2", scannerBatch(2, "after.example"))
	require.Equal(t, http.StatusForbidden, late.Status)
	done, err := bad.Client.CompleteAttemptWithResponse(context.Background(), l.AttemptId,
		&apiclient.CompleteAttemptParams{LeaseToken: l.LeaseToken}, apiclient.CompleteRequest{Outcome: "succeeded"})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, done.StatusCode())

	// Its task is leasable elsewhere at once, without using up an attempt.
	good := g.NewWorker(t, "good", 5, org)
	var got []apiclient.Lease
	for _, x := range lease(t, good, 5, 0) {
		if x.Task.Id == l.Task.Id {
			got = append(got, x)
		}
	}
	require.Len(t, got, 1)
	require.Equal(t, 2, got[0].Task.AttemptNumber)
	require.Zero(t, g.Task(t, l.Task.Id).AttemptCount-1, "the revoked attempt was not counted")
	require.Equal(t, 2, countRows(t, g, "assets"), "before.example and 127.0.0.1; nothing written after the revocation")

	events, err := g.Control.ListAuditEventsWithResponse(context.Background(), &apiclient.ListAuditEventsParams{Action: ptr("worker.revoke")})
	require.NoError(t, err)
	require.Len(t, events.JSON200.Items, 1)
}

func enroll(t *testing.T, g *harness.Gateway, token string, csrPEM []byte) (int, []byte) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"enrollment_token": token, "csr_pem": string(csrPEM)})
	res, err := g.HTTPClient(nil).Post(g.URL+"/v1/enroll", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}

func TestEnrollmentAndRenewal(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	created, err := g.Control.CreateWorkerWithResponse(context.Background(), apiclient.CreateWorkerRequest{Name: "enrolled", WorkerType: "scanner"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.StatusCode(), string(created.Body))
	worker := created.JSON201
	require.NotEmpty(t, worker.EnrollmentToken)
	g.Assign(t, org, worker.Id)

	keyPEM, csrPEM, err := pki.NewCSR("whatever-i-ask")
	require.NoError(t, err)
	status, body := enroll(t, g, worker.EnrollmentToken, csrPEM)
	require.Equal(t, http.StatusOK, status, string(body))
	var issued apiclient.IssuedCertificate
	require.NoError(t, json.Unmarshal(body, &issued))
	require.Equal(t, worker.Id, issued.WorkerId)
	require.Positive(t, issued.RenewInSeconds)
	cert, err := pki.ParseCertificatePEM([]byte(issued.CertificatePem))
	require.NoError(t, err)
	require.Equal(t, worker.Id.String(), cert.Subject.CommonName, "the gateway names the certificate, not the CSR")

	// A repeat with the same key (the first answer was lost) gets the same
	// certificate; the token is otherwise one-time.
	status, body = enroll(t, g, worker.EnrollmentToken, csrPEM)
	require.Equal(t, http.StatusOK, status, string(body))
	var again apiclient.IssuedCertificate
	require.NoError(t, json.Unmarshal(body, &again))
	require.Equal(t, issued.CertificatePem, again.CertificatePem)
	_, otherCSR, err := pki.NewCSR("another-key")
	require.NoError(t, err)
	status, body = enroll(t, g, worker.EnrollmentToken, otherCSR)
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, "enrollment-token-invalid", problemCode(t, body))

	// The enrolled certificate works.
	pair, err := tls.X509KeyPair([]byte(issued.CertificatePem), keyPEM)
	require.NoError(t, err)
	client := g.HTTPClient(&pair)
	wc, err := apiclient.NewClientWithResponses(g.URL, apiclient.WithHTTPClient(client))
	require.NoError(t, err)
	hb, err := wc.HeartbeatWorkerWithResponse(context.Background(), apiclient.WorkerHeartbeatRequest{Leases: []apiclient.LeaseRef{}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, hb.StatusCode(), string(hb.Body))

	// Renewal: the new certificate is bound, the old one keeps working until the new one is used.
	newKey, newCSR, err := pki.NewCSR("renewed")
	require.NoError(t, err)
	renewed, err := wc.RenewCertificateWithResponse(context.Background(), apiclient.RenewRequest{CsrPem: string(newCSR)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, renewed.StatusCode(), string(renewed.Body))
	oldStill, err := wc.HeartbeatWorkerWithResponse(context.Background(), apiclient.WorkerHeartbeatRequest{Leases: []apiclient.LeaseRef{}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, oldStill.StatusCode(), "the grace period")
	newPair, err := tls.X509KeyPair([]byte(renewed.JSON200.CertificatePem), newKey)
	require.NoError(t, err)
	wcNew, err := apiclient.NewClientWithResponses(g.URL, apiclient.WithHTTPClient(g.HTTPClient(&newPair)))
	require.NoError(t, err)
	fresh, err := wcNew.HeartbeatWorkerWithResponse(context.Background(), apiclient.WorkerHeartbeatRequest{Leases: []apiclient.LeaseRef{}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, fresh.StatusCode())
	oldClient, err := apiclient.NewClientWithResponses(g.URL, apiclient.WithHTTPClient(g.HTTPClient(&pair)))
	require.NoError(t, err)
	stale, err := oldClient.HeartbeatWorkerWithResponse(context.Background(), apiclient.WorkerHeartbeatRequest{Leases: []apiclient.LeaseRef{}})
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, stale.StatusCode(), "the old certificate stopped once the new one was used")

	// A revoked worker cannot renew.
	_, err = g.Control.RevokeWorkerWithResponse(context.Background(), worker.Id, apiclient.RevokeRequest{Reason: "decommissioned"})
	require.NoError(t, err)
	_, anotherCSR, err := pki.NewCSR("x")
	require.NoError(t, err)
	refused, err := wcNew.RenewCertificateWithResponse(context.Background(), apiclient.RenewRequest{CsrPem: string(anotherCSR)})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, refused.StatusCode())
	require.Equal(t, "worker-revoked", problemCode(t, refused.Body))

	events, err := g.Control.ListAuditEventsWithResponse(context.Background(), &apiclient.ListAuditEventsParams{TargetId: ptr(worker.Id.String())})
	require.NoError(t, err)
	var actions []string
	for _, e := range events.JSON200.Items {
		actions = append(actions, e.Action)
		require.NotContains(t, string(*e.Details), worker.EnrollmentToken, "no secret in the audit log")
	}
	require.Subset(t, actions, []string{"worker.create", "worker.enroll", "worker.renew_certificate", "worker.revoke"})
}

func TestEnrollmentRefusals(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	created, err := g.Control.CreateWorkerWithResponse(context.Background(), apiclient.CreateWorkerRequest{Name: "w", WorkerType: "scanner"})
	require.NoError(t, err)
	token := created.JSON201.EnrollmentToken
	_, csrPEM, err := pki.NewCSR("w")
	require.NoError(t, err)

	status, body := enroll(t, g, token, []byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "bad-csr", problemCode(t, body))
	weakKey, err := rsa.GenerateKey(rand.Reader, 1024)
	require.NoError(t, err)
	weakDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "w"}}, weakKey)
	require.NoError(t, err)
	status, body = enroll(t, g, token, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: weakDER}))
	require.Equal(t, http.StatusBadRequest, status, "a CSR with a weak key")
	require.Equal(t, "bad-csr", problemCode(t, body))
	status, _ = enroll(t, g, "wge_not-a-token", csrPEM)
	require.Equal(t, http.StatusUnauthorized, status)

	// The bad CSR did not use the token up; an expired token is refused.
	_, err = g.Pool.Exec(context.Background(), `UPDATE enrollment_tokens SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	status, body = enroll(t, g, token, csrPEM)
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, "enrollment-token-invalid", problemCode(t, body))
}

func TestScopedAPITokens(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	orgA, orgB := g.NewOrganization(t, "a"), g.NewOrganization(t, "b")
	taskB := g.CreateTask(t, orgB, harness.TaskSpec{})

	res, err := g.Control.CreateApiTokenWithResponse(context.Background(), apiclient.CreateApiTokenRequest{
		Name: "a producer", Scopes: []apiclient.TokenScope{"producer"}, OrganizationId: &orgA})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	scoped := g.ControlClient(t, res.JSON201.Token)
	own := g.CreateTask(t, orgA, harness.TaskSpec{})
	got, err := scoped.GetTaskWithResponse(context.Background(), own)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, got.StatusCode())
	other, err := scoped.GetTaskWithResponse(context.Background(), taskB)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, other.StatusCode())
	forbidden, err := scoped.CreateOrganizationWithResponse(context.Background(), apiclient.CreateOrganizationRequest{Name: "x"})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, forbidden.StatusCode())

	list, err := g.Control.ListApiTokensWithResponse(context.Background())
	require.NoError(t, err)
	require.NotContains(t, string(list.Body), res.JSON201.Token, "tokens are shown once")
	revoked, err := g.Control.RevokeApiTokenWithResponse(context.Background(), res.JSON201.ApiToken.Id)
	require.NoError(t, err)
	require.True(t, revoked.JSON200.Revoked)
	after, err := scoped.GetTaskWithResponse(context.Background(), own)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, after.StatusCode(), "a revoked token stops at once")
}

// TestEveryIDRouteIsOrganizationScoped calls every route that takes an id
// with another organization's id, as a worker of organization A and with a
// token scoped to A: always 404, and none of B's data in the answer.
func TestEveryIDRouteIsOrganizationScoped(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	orgA, orgB := g.NewOrganization(t, "a"), g.NewOrganization(t, "b")
	workerB := g.NewWorker(t, "secret-b-worker", 1, orgB)
	workerA := g.NewWorker(t, "wa", 1, orgA)
	scanB := createScan(t, g, orgB, []string{"secret-b.example"}, `[{"name": "x"}]`)
	lb := lease(t, workerB, 1, 5)[0]
	content := []byte("secret-b")
	sess := openUpload(t, workerB, lb, "secret-b.txt", int64(len(content)), sha256Hex(content)).JSON201
	put(t, workerB.HTTP, sess, bytes.NewReader(content), int64(len(content)))
	fileB := commit(t, workerB, sess).JSON200
	tokenRes, err := g.Control.CreateApiTokenWithResponse(context.Background(), apiclient.CreateApiTokenRequest{
		Name: "a admin", Scopes: []apiclient.TokenScope{"admin"}, OrganizationId: &orgA})
	require.NoError(t, err)
	tokenA := tokenRes.JSON201.Token

	type call struct {
		method, path string
		worker       bool
		body         string
	}
	id := func(u uuid.UUID) string { return u.String() }
	calls := []call{
		{"GET", "/v1/organizations/" + id(orgB), false, ""},
		{"GET", "/v1/organizations/" + id(orgB) + "/workers", false, ""},
		{"GET", "/v1/organizations/" + id(orgB) + "/assets", false, ""},
		{"GET", "/v1/organizations/" + id(orgB) + "/threats", false, ""},
		{"PUT", "/v1/organizations/" + id(orgB) + "/workers/" + id(workerA.ID), false, ""},
		{"DELETE", "/v1/organizations/" + id(orgB) + "/workers/" + id(workerB.ID), false, ""},
		{"GET", "/v1/workers/" + id(workerB.ID), false, ""},
		{"GET", "/v1/tasks/" + id(lb.Task.Id), false, ""},
		{"POST", "/v1/tasks/" + id(lb.Task.Id) + "/cancel", false, ""},
		{"POST", "/v1/tasks/" + id(lb.Task.Id) + "/retry", false, ""},
		{"GET", "/v1/tasks/" + id(lb.Task.Id) + "/results", false, ""},
		{"GET", "/v1/tasks/" + id(lb.Task.Id) + "/logs", false, ""},
		{"GET", "/v1/tasks/" + id(lb.Task.Id) + "/artifacts", false, ""},
		{"GET", "/v1/files/" + id(fileB.Id), false, ""},
		{"GET", "/v1/files/" + id(fileB.Id) + "/content", false, ""},
		{"GET", "/v1/scans/" + id(scanB.Id), false, ""},
		{"POST", "/v1/scans/" + id(scanB.Id) + "/cancel", false, ""},
		{"POST", "/v1/tasks", false, `{"organization_id": "` + id(orgB) + `", "task_type": "scanner_plugin"}`},
		{"POST", "/v1/attempts/" + id(lb.AttemptId) + "/heartbeat", true, ""},
		{"POST", "/v1/attempts/" + id(lb.AttemptId) + "/start", true, ""},
		{"POST", "/v1/attempts/" + id(lb.AttemptId) + "/complete", true, `{"outcome": "succeeded"}`},
		{"POST", "/v1/attempts/" + id(lb.AttemptId) + "/results", true, `{"sequence_number": 1, "records": []}`},
		{"POST", "/v1/attempts/" + id(lb.AttemptId) + "/logs", true, `{"offset": 0, "data": "x"}`},
		{"POST", "/v1/attempts/" + id(lb.AttemptId) + "/artifacts", true, `{"name": "x", "size_bytes": 1, "sha256": "` + sha256Hex([]byte("x")) + `"}`},
		{"POST", "/v1/uploads/" + id(sess.UploadId) + "/commit", true, ""},
	}
	for _, c := range calls {
		var body io.Reader
		if c.body != "" {
			body = bytes.NewReader([]byte(c.body))
		}
		req, err := http.NewRequest(c.method, g.URL+c.path, body)
		require.NoError(t, err)
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		client := g.HTTPClient(nil)
		if c.worker {
			client = workerA.HTTP
			req.Header.Set("Lease-Token", lb.LeaseToken)
			req.Header.Set("Idempotency-Key", "k")
		} else {
			req.Header.Set("Authorization", "Bearer "+tokenA)
		}
		res, err := client.Do(req)
		require.NoError(t, err)
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusNotFound, res.StatusCode, "%s %s: %s", c.method, c.path, raw)
		require.NotContains(t, string(raw), "secret-b", "%s %s", c.method, c.path)
	}
	require.Equal(t, apiclient.TaskState("leased"), g.Task(t, lb.Task.Id).State, "nothing changed")
}

// TestRenewalRetriedAfterALostAnswerKeepsTheOldCertificate: a worker whose
// renewal answer was lost renews again with its old certificate; the old
// one must keep working until a new one is used, or it would be locked out.
func TestRenewalRetriedAfterALostAnswerKeepsTheOldCertificate(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	created, err := g.Control.CreateWorkerWithResponse(context.Background(), apiclient.CreateWorkerRequest{Name: "w", WorkerType: "scanner"})
	require.NoError(t, err)
	keyPEM, csrPEM, err := pki.NewCSR("w")
	require.NoError(t, err)
	status, body := enroll(t, g, created.JSON201.EnrollmentToken, csrPEM)
	require.Equal(t, http.StatusOK, status, string(body))
	var issued apiclient.IssuedCertificate
	require.NoError(t, json.Unmarshal(body, &issued))
	pair, err := tls.X509KeyPair([]byte(issued.CertificatePem), keyPEM)
	require.NoError(t, err)
	old, err := apiclient.NewClientWithResponses(g.URL, apiclient.WithHTTPClient(g.HTTPClient(&pair)))
	require.NoError(t, err)

	for range 3 { // every answer "lost": the worker never sees the new certificates
		_, csr, err := pki.NewCSR("w")
		require.NoError(t, err)
		res, err := old.RenewCertificateWithResponse(context.Background(), apiclient.RenewRequest{CsrPem: string(csr)})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	}
	hb, err := old.HeartbeatWorkerWithResponse(context.Background(), apiclient.WorkerHeartbeatRequest{Leases: []apiclient.LeaseRef{}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, hb.StatusCode(), "the certificate the worker still holds keeps working")
}

// TestRevokedWorkersTasksGoElsewhereAtOnce: a worker holding 20 leases is
// revoked while another waits in a long-poll; the waiting poll gets all 20
// tasks without waiting for any lease to expire. It logs how long that took.
func TestRevokedWorkersTasksGoElsewhereAtOnce(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	bad := g.NewWorker(t, "bad", 20, org)
	good := g.NewWorker(t, "good", 20, org)
	for range 20 {
		g.CreateTask(t, org, harness.TaskSpec{LeaseDurationSeconds: 600})
	}
	require.Len(t, lease(t, bad, 20, 0), 20)
	got := make(chan int, 1)
	var returned time.Time
	go func() {
		n, wait := 20, 25
		res, err := good.Client.AcquireLeasesWithResponse(context.Background(), nil, apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait})
		returned = time.Now()
		if err != nil || res.JSON200 == nil {
			got <- -1
			return
		}
		got <- len(res.JSON200.Leases)
	}()
	harness.WaitFor(t, 10*time.Second, "the good worker's poll", func() bool { return g.Server.Hub().Waiting() == 1 })
	res, err := g.Control.RevokeWorkerWithResponse(context.Background(), bad.ID, apiclient.RevokeRequest{Reason: "compromised"})
	require.NoError(t, err)
	revoked := time.Now()
	require.Equal(t, http.StatusOK, res.StatusCode())
	require.Equal(t, 20, <-got, "all 20 tasks went to the waiting worker, well before their 600 s leases could expire")
	t.Logf("revoke returned → 20 tasks leased by another worker: %.1f ms", float64(returned.Sub(revoked).Microseconds())/1000)
}
