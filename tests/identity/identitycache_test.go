package identity

import (
	"bytes"
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// pollStatus sends one poll that does not wait and returns its HTTP status.
func pollStatus(t *testing.T, client *http.Client, url string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/leases", bytes.NewReader([]byte(`{"max_tasks":1,"wait_seconds":0}`)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode
}

// TestIdentityChangesReachEveryReplica: replicas remember which worker a
// certificate belongs to, so a revocation or a certificate replaced through
// one replica must reach the others' memory too — through the database's
// notices — and not wait for it to expire (the cache TTL here is an hour).
func TestIdentityChangesReachEveryReplica(t *testing.T) {
	t.Parallel()
	g, procs := harness.StartProcesses(t, 2, "-identity-cache-ttl", "1h")
	org := g.NewOrganization(t, "acme")
	revoked := g.NewWorker(t, "revoked", 1, org)
	rotated := g.NewWorker(t, "rotated", 1, org)
	other := procs[1].URL
	for _, w := range []*harness.Worker{revoked, rotated} {
		require.Equal(t, http.StatusOK, pollStatus(t, w.HTTP, other), "the second replica knows the certificate now")
	}

	res, err := g.Control.RevokeWorkerWithResponse(context.Background(), revoked.ID, apiclient.RevokeRequest{Reason: "compromised"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	harness.WaitFor(t, 10*time.Second, "the other replica to refuse the revoked worker", func() bool {
		return pollStatus(t, revoked.HTTP, other) == http.StatusForbidden
	})

	issued, err := g.CA.IssueClient("rotated-2", time.Hour)
	require.NoError(t, err)
	pemText := string(issued.CertPEM)
	reg, err := g.Control.RegisterWorkerCertificateWithResponse(context.Background(), rotated.ID,
		apiclient.RegisterWorkerCertificateJSONRequestBody{CertificatePem: &pemText})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	harness.WaitFor(t, 10*time.Second, "the other replica to refuse the replaced certificate", func() bool {
		return pollStatus(t, rotated.HTTP, other) == http.StatusUnauthorized
	})
	cert, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, pollStatus(t, g.HTTPClient(&cert), other), "the new certificate works")
}
