package server_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
)

// TestRootRedirectsToDocs: a browser opening the gateway's address lands on
// Swagger UI, while other unknown paths stay API 404s.
func TestRootRedirectsToDocs(t *testing.T) {
	g := harness.Start(t)
	client := g.HTTPClient(nil)
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	res, err := client.Get(g.URL + "/")
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusFound, res.StatusCode)
	require.Equal(t, "/docs/", res.Header.Get("Location"))

	res, err = client.Get(g.URL + "/nothing-here")
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusNotFound, res.StatusCode)
}
