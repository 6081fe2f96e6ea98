package identity

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/tests/harness"
)

// TestBadInputIsAProblemNeverA5xx sends malformed, oversized, mistyped and
// unauthenticated requests: each gets a 4xx application/problem+json.
func TestBadInputIsAProblemNeverA5xx(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)

	strangerCA, err := pki.NewCA("stranger")
	require.NoError(t, err)
	strangerIssued, err := strangerCA.IssueClient("stranger", time.Hour)
	require.NoError(t, err)
	stranger, err := tls.X509KeyPair(strangerIssued.CertPEM, strangerIssued.KeyPEM)
	require.NoError(t, err)

	revoked := g.NewWorker(t, "revoked", 1, org)
	_, err = g.Pool.Exec(context.Background(), `UPDATE workers SET revoked_at = now() WHERE id = $1`, revoked.ID)
	require.NoError(t, err)

	bearer := "Bearer " + g.AdminToken
	cases := []struct {
		name        string
		client      *http.Client
		method      string
		path        string
		contentType string
		auth        string
		body        string
		status      int
		code        string
	}{
		{"malformed JSON", w.HTTP, "POST", "/v1/leases", "application/json", "", `{"max_tasks": `, 400, "bad-request"},
		{"unknown field", w.HTTP, "POST", "/v1/leases", "application/json", "", `{"max_tasks": 1, "surprise": true}`, 400, "bad-request"},
		{"wrong type", w.HTTP, "POST", "/v1/leases", "application/json", "", `{"max_tasks": "many"}`, 400, "bad-request"},
		{"out of range", w.HTTP, "POST", "/v1/leases", "application/json", "", `{"max_tasks": 0}`, 400, "bad-request"},
		{"trailing garbage", w.HTTP, "POST", "/v1/leases", "application/json", "", `{"max_tasks": 1} xyz`, 400, "bad-request"},
		{"oversized body", w.HTTP, "POST", "/v1/leases", "application/json", "", `{"software_version": "` + strings.Repeat("x", 100<<10) + `"}`, 413, "payload-too-large"},
		{"wrong content type", w.HTTP, "POST", "/v1/leases", "text/plain", "", `{"max_tasks": 1}`, 415, "unsupported-media-type"},
		{"no client certificate", g.HTTPClient(nil), "POST", "/v1/leases", "application/json", "", `{}`, 401, "certificate-required"},
		{"unregistered certificate", g.HTTPClient(&stranger), "POST", "/v1/leases", "application/json", "", `{}`, 401, "certificate-unknown"},
		{"revoked worker", revoked.HTTP, "POST", "/v1/leases", "application/json", "", `{}`, 403, "worker-revoked"},
		{"missing lease token", w.HTTP, "POST", "/v1/attempts/0193f1a2-7c4e-7d1a-9a51-6b3f0e2c4d10/heartbeat", "", "", "", 400, "bad-request"},
		{"bad attempt id", w.HTTP, "POST", "/v1/attempts/not-a-uuid/heartbeat", "", "", "", 400, "bad-request"},
		{"no token", g.HTTPClient(nil), "GET", "/v1/tasks", "", "", "", 401, "unauthenticated"},
		{"bad token", g.HTTPClient(nil), "GET", "/v1/tasks", "", "Bearer wgt_nope", "", 401, "unauthenticated"},
		{"malformed token", g.HTTPClient(nil), "GET", "/v1/tasks", "", "Bearer abc", "", 401, "unauthenticated"},
		{"worker cert on control route", w.HTTP, "GET", "/v1/tasks", "", "", "", 401, "unauthenticated"},
		{"bad cursor", g.HTTPClient(nil), "GET", "/v1/tasks?cursor=bm9wZQ", "", bearer, "", 400, "bad-request"},
		{"bad limit", g.HTTPClient(nil), "GET", "/v1/tasks?limit=100000", "", bearer, "", 400, "bad-request"},
		{"unknown route", g.HTTPClient(nil), "GET", "/v1/nothing-here", "", bearer, "", 404, "not-found"},
		{"wrong method", g.HTTPClient(nil), "DELETE", "/v1/tasks", "", bearer, "", 405, "method-not-allowed"},
		{"unknown task", g.HTTPClient(nil), "GET", "/v1/tasks/0193f1a2-7c4e-7d1a-9a51-6b3f0e2c4d10", "", bearer, "", 404, "not-found"},
		{"invalid task body", g.HTTPClient(nil), "POST", "/v1/tasks", "application/json", bearer, `{"organization_id": "` + org.String() + `", "task_type": "nope"}`, 400, "bad-request"},
		{"array instead of object", g.HTTPClient(nil), "POST", "/v1/tasks", "application/json", bearer, `[]`, 400, "bad-request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, err := http.NewRequest(tc.method, g.URL+tc.path, body)
			require.NoError(t, err)
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			res, err := tc.client.Do(req)
			require.NoError(t, err)
			defer res.Body.Close()
			raw, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			require.Equal(t, tc.status, res.StatusCode, string(raw))
			require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
			var p struct {
				Type, Title, Code, RequestID string
				Status                       int
			}
			require.NoError(t, json.Unmarshal(raw, &p))
			require.Equal(t, tc.code, p.Code, string(raw))
			require.Equal(t, tc.status, p.Status)
			require.NotEmpty(t, p.Type)
			require.NotContains(t, string(raw), g.AdminToken)
		})
	}
}

func TestOpsRoutesNeedNoAuthentication(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml", "/openapi.json"} {
		res, err := g.HTTPClient(nil).Get(g.URL + path)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, path)
	}
}
