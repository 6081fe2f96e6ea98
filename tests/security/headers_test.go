package security

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// headersLease leases one task to a fresh worker.
func headersLease(t *testing.T, g *harness.Gateway) (*harness.Worker, apiclient.Lease, *apiclient.AcquireLeasesResponse) {
	t.Helper()
	org := g.NewOrganization(t, "headers")
	w := g.NewWorker(t, "w", 1, org)
	g.CreateTask(t, org, harness.TaskSpec{})
	n, wait := 1, 5
	res, err := w.Client.AcquireLeasesWithResponse(context.Background(), nil, apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Len(t, res.JSON200.Leases, 1)
	return w, res.JSON200.Leases[0], res
}

// headersOpenUpload opens an upload session for content declared as
// contentType, through client (which may rewrite the request).
func headersOpenUpload(t *testing.T, client *apiclient.ClientWithResponses, l apiclient.Lease, name, contentType string, content []byte) *apiclient.OpenArtifactUploadResponse {
	t.Helper()
	sum := sha256.Sum256(content)
	res, err := client.OpenArtifactUploadWithResponse(context.Background(), l.AttemptId,
		&apiclient.OpenArtifactUploadParams{LeaseToken: l.LeaseToken},
		apiclient.OpenUploadRequest{Name: name, ContentType: &contentType, SizeBytes: int64(len(content)), Sha256: hex.EncodeToString(sum[:])})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res
}

// TestArtifactDownloadsAreInert: whatever content type a worker declared,
// a download is served as an attachment, sandboxed, never sniffed, with a
// content type from the allowlist (else application/octet-stream) and text
// with a charset.
func TestArtifactDownloadsAreInert(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	w, l, _ := headersLease(t, g)
	cases := []struct{ name, declared, served string }{
		{"page.html", "text/html", "application/octet-stream"},
		{"page2.html", "text/html; charset=utf-8", "application/octet-stream"},
		{"drawing.svg", "image/svg+xml", "application/octet-stream"},
		{"data.xml", "application/xml", "application/octet-stream"},
		{"script.js", "text/javascript", "application/octet-stream"},
		{"odd", "not a media type", "application/octet-stream"},
		{"report.json", "application/json", "application/json"},
		{"notes.txt", "text/plain", "text/plain; charset=utf-8"},
		{"latin.txt", "TEXT/PLAIN; charset=iso-8859-1", "text/plain; charset=utf-8"},
		{"lines.ndjson", "application/x-ndjson", "application/x-ndjson"},
		{"shot.png", "image/png", "image/png"},
		{"bundle.zip", "application/zip", "application/zip"},
	}
	for _, c := range cases {
		content := []byte("<script>alert(1)</script> " + c.name)
		session := headersOpenUpload(t, w.Client, l, c.name, c.declared, content).JSON201
		req, err := http.NewRequest(string(session.Method), session.Url, bytes.NewReader(content))
		require.NoError(t, err)
		for k, v := range session.Headers {
			req.Header.Set(k, v)
		}
		put, err := w.HTTP.Do(req)
		require.NoError(t, err)
		put.Body.Close()
		require.Equal(t, http.StatusNoContent, put.StatusCode)
		committed, err := w.Client.CommitArtifactUploadWithResponse(context.Background(), session.UploadId)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, committed.StatusCode(), string(committed.Body))

		res, err := g.Control.GetFileContent(context.Background(), committed.JSON200.Id)
		require.NoError(t, err)
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Equal(t, content, got)
		require.Equal(t, c.served, res.Header.Get("Content-Type"), "declared %q", c.declared)
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
		require.True(t, strings.HasPrefix(res.Header.Get("Content-Disposition"), "attachment;"), res.Header.Get("Content-Disposition"))
		require.Contains(t, res.Header.Get("Content-Security-Policy"), "sandbox")
		require.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'none'")
	}
}

// inlineCode matches inline <script> and <style> elements (a script with a
// src attribute is not inline).
var inlineCode = regexp.MustCompile(`(?s)<(script|style)>(.*?)</(?:script|style)>`)

// TestDocsPageHeaders: Swagger UI is served under a Content-Security-Policy
// that allows this origin only, inline code only by the hash of what the
// page holds, and no framing; the page and its assets are never sniffed.
func TestDocsPageHeaders(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	client := g.HTTPClient(nil)
	res, err := client.Get(g.URL + "/docs/")
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)

	csp := res.Header.Get("Content-Security-Policy")
	directives := map[string][]string{}
	for _, d := range strings.Split(csp, ";") {
		fields := strings.Fields(d)
		if len(fields) > 0 {
			directives[fields[0]] = fields[1:]
		}
	}
	require.Equal(t, []string{"'self'"}, directives["default-src"], csp)
	require.Equal(t, []string{"'none'"}, directives["frame-ancestors"], csp)
	require.Equal(t, []string{"'none'"}, directives["object-src"], csp)
	require.NotContains(t, csp, "unsafe-inline")
	require.NotContains(t, csp, "unsafe-eval")
	require.NotRegexp(t, `https?:|\*`, csp, "no source but this origin (no CDN)")
	// Every inline script and style of the page is allowed by its hash:
	// the page works under its policy.
	matches := inlineCode.FindAllSubmatch(page, -1)
	require.NotEmpty(t, matches, "Swagger UI's page has inline code")
	for _, m := range matches {
		sum := sha256.Sum256(m[2])
		source := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		directive := "script-src"
		if string(m[1]) == "style" {
			directive = "style-src"
		}
		require.Contains(t, directives[directive], source, "inline %s not allowed by %s", m[1], csp)
	}
	require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
	require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"))
	require.Equal(t, "no-referrer", res.Header.Get("Referrer-Policy"))

	// The page's assets and the redirect to it carry the same headers.
	for _, path := range []string{"/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css", "/docs"} {
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		res, err := client.Get(g.URL + path)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, csp, res.Header.Get("Content-Security-Policy"), path)
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), path)
		require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"), path)
	}
}

// TestEveryResponseIsNosniff: the contract, health, successes and problems
// alike.
func TestEveryResponseIsNosniff(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	anonymous := g.HTTPClient(nil)
	admin := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+g.AdminToken) }
	for _, c := range []struct {
		method, path string
		edit         func(*http.Request)
		status       int
	}{
		{http.MethodGet, "/openapi.yaml", nil, http.StatusOK},
		{http.MethodGet, "/openapi.json", nil, http.StatusOK},
		{http.MethodGet, "/healthz", nil, http.StatusOK},
		{http.MethodGet, "/v1/tasks", admin, http.StatusOK},
		{http.MethodGet, "/v1/tasks", nil, http.StatusUnauthorized},
		{http.MethodGet, "/no/such/route", nil, http.StatusNotFound},
		{http.MethodGet, "/metrics", admin, http.StatusOK},
	} {
		req, err := http.NewRequest(c.method, g.URL+c.path, nil)
		require.NoError(t, err)
		if c.edit != nil {
			c.edit(req)
		}
		res, err := anonymous.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, c.status, res.StatusCode, c.path)
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), "%s %s", c.method, c.path)
	}
	ops := httptest.NewServer(g.Server.OpsHandler())
	defer ops.Close()
	res, err := http.Get(ops.URL + "/metrics")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), "the ops listener")
}

// TestUploadURLIgnoresForgedHost: without -public-url the gateway's own
// upload URL names the address the connection was accepted on, whatever
// Host the request claims.
func TestUploadURLIgnoresForgedHost(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	w, l, _ := headersLease(t, g)
	for name, protocol := range preauthProtocols {
		t.Run(name, func(t *testing.T) {
			client, err := apiclient.NewClientWithResponses(g.URL,
				apiclient.WithHTTPClient(preauthClient(g, &w.Cert, protocol)),
				apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
					r.Host = "evil.example:8443"
					return nil
				}))
			require.NoError(t, err)
			session := headersOpenUpload(t, client, l, "forged-"+name, "application/json", []byte("{}")).JSON201
			require.NotContains(t, session.Url, "evil.example")
			require.Equal(t, g.URL+"/v1/uploads/"+session.UploadId.String(), session.Url)
		})
	}
}

// TestSecretAnswersAreNeverStored calls every operation of the contract
// whose answer can carry a field marked x-secret (tokens, lease tokens and
// task secrets, enrollment and renewal certificates, upload sessions,
// webhook signing secrets) and checks the answer forbids caching. An
// operation the contract marks that is not called here fails the test.
func TestSecretAnswersAreNeverStored(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	answers := map[string]*http.Response{}

	token, err := g.Control.CreateApiTokenWithResponse(ctx, apiclient.CreateApiTokenRequest{Name: "t", Scopes: []apiclient.TokenScope{"reader"}})
	require.NoError(t, err)
	answers["CreateApiToken"] = token.HTTPResponse

	created, err := g.Control.CreateWorkerWithResponse(ctx, apiclient.CreateWorkerRequest{Name: "enrolling", WorkerType: "scanner"})
	require.NoError(t, err)
	answers["CreateWorker"] = created.HTTPResponse
	require.Equal(t, http.StatusCreated, created.StatusCode(), string(created.Body))

	fresh, err := g.Control.CreateEnrollmentTokenWithResponse(ctx, created.JSON201.Id)
	require.NoError(t, err)
	answers["CreateEnrollmentToken"] = fresh.HTTPResponse
	var enrollment struct {
		Token string `json:"enrollment_token"`
	}
	require.NoError(t, json.Unmarshal(fresh.Body, &enrollment))

	keyPEM, csrPEM, err := pki.NewCSR("w")
	require.NoError(t, err)
	body, err := json.Marshal(map[string]string{"enrollment_token": enrollment.Token, "csr_pem": string(csrPEM)})
	require.NoError(t, err)
	enrolled, err := g.HTTPClient(nil).Post(g.URL+"/v1/enroll", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	var issued apiclient.IssuedCertificate
	require.NoError(t, json.NewDecoder(enrolled.Body).Decode(&issued))
	enrolled.Body.Close()
	answers["Enroll"] = enrolled

	pair, err := tls.X509KeyPair([]byte(issued.CertificatePem), keyPEM)
	require.NoError(t, err)
	self, err := apiclient.NewClientWithResponses(g.URL, apiclient.WithHTTPClient(g.HTTPClient(&pair)))
	require.NoError(t, err)
	_, renewCSR, err := pki.NewCSR("w")
	require.NoError(t, err)
	renewed, err := self.RenewCertificateWithResponse(ctx, apiclient.RenewRequest{CsrPem: string(renewCSR)})
	require.NoError(t, err)
	answers["RenewCertificate"] = renewed.HTTPResponse

	w, l, leases := headersLease(t, g)
	answers["AcquireLeases"] = leases.HTTPResponse
	answers["OpenArtifactUpload"] = headersOpenUpload(t, w.Client, l, "a.json", "application/json", []byte("{}")).HTTPResponse

	// Completions that ask for the next leases answer them, tokens included.
	g.CreateTask(t, l.Task.OrganizationId, harness.TaskSpec{})
	g.CreateTask(t, l.Task.OrganizationId, harness.TaskSpec{})
	done, err := w.Client.CompleteAttemptWithResponse(ctx, l.AttemptId, &apiclient.CompleteAttemptParams{LeaseToken: l.LeaseToken},
		apiclient.CompleteRequest{Outcome: "succeeded", Next: &apiclient.NextLeases{}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, done.StatusCode(), string(done.Body))
	require.Len(t, *done.JSON200.Leases, 1)
	answers["CompleteAttempt"] = done.HTTPResponse
	second := (*done.JSON200.Leases)[0]
	many, err := w.Client.CompleteAttemptsWithResponse(ctx, apiclient.CompleteManyRequest{Next: &apiclient.NextLeases{},
		Completions: []apiclient.CompletionItem{{AttemptId: second.AttemptId, LeaseToken: second.LeaseToken, Outcome: "succeeded"}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, many.StatusCode(), string(many.Body))
	require.Len(t, *many.JSON200.Leases, 1)
	answers["CompleteAttempts"] = many.HTTPResponse

	// A webhook's signing secret, at creation and at rotation.
	org := g.NewOrganization(t, "headers-webhook")
	hook, err := g.Control.CreateWebhookWithResponse(ctx, apiclient.CreateWebhookRequest{OrganizationId: org,
		Url: "http://9.9.9.9/headers", EventTypes: []apiclient.WebhookEventType{apiclient.ScheduleFireSkipped}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, hook.StatusCode(), string(hook.Body))
	answers["CreateWebhook"] = hook.HTTPResponse
	rotated, err := g.Control.RotateWebhookSecretWithResponse(ctx, hook.JSON201.Id, apiclient.RotateWebhookSecretRequest{})
	require.NoError(t, err)
	answers["RotateWebhookSecret"] = rotated.HTTPResponse

	for op, res := range answers {
		require.Less(t, res.StatusCode, 300, op)
		require.Equal(t, "no-store", res.Header.Get("Cache-Control"), "%s %d %v", op, res.StatusCode, res.Header)
	}

	// Every operation of the contract whose answer holds a field marked
	// x-secret is among those called.
	spec, err := api.GetSpec()
	require.NoError(t, err)
	marked := map[string]bool{}
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			for _, ref := range op.Responses.Map() {
				if ref.Value == nil {
					continue
				}
				for _, media := range ref.Value.Content {
					if media.Schema != nil && holdsSecret(media.Schema, map[*openapi3.Schema]bool{}) {
						require.Contains(t, answers, op.OperationID,
							"%s %s answers a field marked x-secret: call it here", method, path)
						marked[op.OperationID] = true
					}
				}
			}
		}
	}
	// And nothing is called here that the contract does not mark.
	for op := range answers {
		require.True(t, marked[op], "%s answers no field marked x-secret", op)
	}
}

func holdsSecret(ref *openapi3.SchemaRef, seen map[*openapi3.Schema]bool) bool {
	s := ref.Value
	if s == nil || seen[s] {
		return false
	}
	seen[s] = true
	for _, prop := range s.Properties {
		if isSecret(prop) || holdsSecret(prop, seen) {
			return true
		}
	}
	for _, sub := range []*openapi3.SchemaRef{s.Items, s.AdditionalProperties.Schema} {
		if sub != nil && holdsSecret(sub, seen) {
			return true
		}
	}
	for _, group := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
		for _, sub := range group {
			if holdsSecret(sub, seen) {
				return true
			}
		}
	}
	return false
}

// isSecret reports whether a property is marked x-secret: true, beside its
// $ref or in its schema.
func isSecret(ref *openapi3.SchemaRef) bool {
	if v, ok := ref.Extensions["x-secret"].(bool); ok {
		return v
	}
	v, _ := ref.Value.Extensions["x-secret"].(bool)
	return v
}
