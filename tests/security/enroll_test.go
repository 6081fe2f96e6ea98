package security

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// enrollAnswer is what POST /v1/enroll answered.
type enrollAnswer struct {
	status      int
	code        string
	retryAfter  string
	contentType string
}

func enrollFrom(t *testing.T, c *http.Client, url, token string) enrollAnswer {
	t.Helper()
	_, csrPEM, err := pki.NewCSR("w")
	require.NoError(t, err)
	body, _ := json.Marshal(map[string]string{"enrollment_token": token, "csr_pem": string(csrPEM)})
	res, err := c.Post(url+"/v1/enroll", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	a := enrollAnswer{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After"), contentType: res.Header.Get("Content-Type")}
	if res.StatusCode != http.StatusOK {
		var p struct{ Code string }
		require.NoError(t, json.Unmarshal(raw, &p), string(raw))
		a.code = p.Code
	}
	return a
}

// newEnrollableWorker creates a worker and returns its one-time enrollment token.
func newEnrollableWorker(t *testing.T, g *harness.Gateway, name string) (uuid.UUID, string) {
	t.Helper()
	res, err := g.Control.CreateWorkerWithResponse(context.Background(), apiclient.CreateWorkerRequest{Name: name, WorkerType: "scanner"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201.Id, res.JSON201.EnrollmentToken
}

func TestEnrollRefusalsAreRateLimitedPerAddress(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	const burst = 5
	r := startAuditReplica(t, g, func(c *server.Config) {
		c.SecurityAuditWindow = time.Hour
		c.Limits.EnrollRefusalBurst = burst
		c.Limits.EnrollRefusalRate = 0.001 // no refill within the test
	})
	worker, token := newEnrollableWorker(t, g, "patient")
	attacker := clientFrom(g, "127.0.0.1", nil)

	for i := range 20 {
		a := enrollFrom(t, attacker, r.URL, "wge_wrong-guess")
		if i < burst {
			require.Equal(t, enrollAnswer{status: http.StatusUnauthorized, code: "enrollment-token-invalid", contentType: "application/problem+json"}, a, "guess %d", i)
			continue
		}
		require.Equal(t, http.StatusTooManyRequests, a.status, "guess %d: past the burst", i)
		require.Equal(t, "too-many-requests", a.code)
		require.Equal(t, "application/problem+json", a.contentType)
		wait, err := strconv.Atoi(a.retryAfter)
		require.NoError(t, err, "Retry-After %q", a.retryAfter)
		require.Greater(t, wait, 100, "one refusal per 1000 s refills")
	}

	// The limit is checked before the database: even the right token from
	// the refused address is not looked at, so it is not used up.
	a := enrollFrom(t, attacker, r.URL, token)
	require.Equal(t, http.StatusTooManyRequests, a.status)
	var unused bool
	require.NoError(t, g.Pool.QueryRow(context.Background(),
		`SELECT bool_and(used_at IS NULL) FROM enrollment_tokens WHERE worker_id = $1`, worker).Scan(&unused))
	require.True(t, unused)

	// Another address is not held back by the attacker's failures.
	a = enrollFrom(t, clientFrom(g, "127.0.0.2", nil), r.URL, token)
	require.Equal(t, http.StatusOK, a.status)

	// A successful enrollment does not count against its own address.
	_, token2 := newEnrollableWorker(t, g, "clumsy")
	clumsy := clientFrom(g, "127.0.0.3", nil)
	for range burst - 1 {
		require.Equal(t, http.StatusUnauthorized, enrollFrom(t, clumsy, r.URL, "wge_typo").status)
	}
	require.Equal(t, http.StatusOK, enrollFrom(t, clumsy, r.URL, token2).status)
	require.Equal(t, http.StatusUnauthorized, enrollFrom(t, clumsy, r.URL, "wge_typo").status, "the success left the last refusal of the burst")
	require.Equal(t, http.StatusTooManyRequests, enrollFrom(t, clumsy, r.URL, "wge_typo").status)

	// Audit: one row per kind and address now, the counts at shutdown.
	refused := auditRowsOf(t, g, "security.enrollment_refused")
	limited := auditRowsOf(t, g, "security.enrollment_rate_limited")
	require.Len(t, refused, 2)
	require.Len(t, limited, 2)
	require.Equal(t, map[string]int{"127.0.0.1": 1, "127.0.0.3": 1}, countsBySource(refused))
	r.Stop()
	refused = auditRowsOf(t, g, "security.enrollment_refused")
	limited = auditRowsOf(t, g, "security.enrollment_rate_limited")
	require.Equal(t, map[string]int{"127.0.0.1": burst, "127.0.0.3": burst}, countsBySource(refused))
	require.Equal(t, map[string]int{"127.0.0.1": 20 - burst + 1, "127.0.0.3": 1}, countsBySource(limited))
	require.LessOrEqual(t, len(refused)+len(limited), 8, "two rows per kind and address at most")
	for _, row := range append(refused, limited...) {
		require.NotContains(t, row.Details, "enrollment_token", "no secret in the audit log")
	}
}
