package identity

import (
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
)

// TestTLSSessionsResumeAndIdentityIsStillChecked: a worker reconnecting
// with a session ticket skips the full handshake (TLS 1.3 resumption), and
// the resumed connection still carries — and is checked as — the worker's
// certificate.
func TestTLSSessionsResumeAndIdentityIsStillChecked(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)

	cfg := w.TLSConfig()
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	var resumed []bool
	for range 2 {
		tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
		client := &http.Client{Transport: tr}
		status := pollStatus(t, client, g.URL)
		require.Equal(t, http.StatusOK, status, "the worker is authenticated")
		// One request, one connection: ask it whether it resumed.
		req, err := http.NewRequest(http.MethodGet, g.URL+"/healthz", nil)
		require.NoError(t, err)
		res, err := client.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.NotNil(t, res.TLS)
		resumed = append(resumed, res.TLS.DidResume)
		tr.CloseIdleConnections()
	}
	require.Equal(t, []bool{false, true}, resumed, "the second connection resumed the first one's session")
}
