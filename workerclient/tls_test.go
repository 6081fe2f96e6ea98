package workerclient

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/pki"
)

// mtlsServer is a gateway stand-in that requires a client certificate from
// ca and answers with what it saw of the connection.
func mtlsServer(t *testing.T, ca *pki.CA) *httptest.Server {
	t.Helper()
	srvCert, err := ca.IssueServer([]string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(srvCert.CertPEM, srvCert.KeyPEM)
	require.NoError(t, err)
	clients := x509.NewCertPool()
	clients.AddCert(ca.Cert)

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %x %s", r.Proto, r.TLS.Version, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // rejected handshakes are expected
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clients,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

func get(t *testing.T, hc *http.Client, url string) string {
	t.Helper()
	resp, err := hc.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body := make([]byte, 256)
	n, _ := resp.Body.Read(body)
	return string(body[:n])
}

func TestNewHTTPClientSpeaksMTLS13OverHTTP2(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("test CA")
	require.NoError(t, err)
	srv := mtlsServer(t, ca)

	dir := t.TempDir()
	cfg := Config{
		GatewayURL: srv.URL,
		CertFile:   filepath.Join(dir, "worker.crt"),
		KeyFile:    filepath.Join(dir, "worker.key"),
		CAFile:     filepath.Join(dir, "ca.crt"),
	}
	worker1, err := ca.IssueClient("worker-1", time.Hour)
	require.NoError(t, err)
	writeFile(t, cfg.CertFile, worker1.CertPEM)
	writeFile(t, cfg.KeyFile, worker1.KeyPEM)
	writeFile(t, cfg.CAFile, ca.CertPEM)

	hc, err := NewHTTPClient(cfg)
	require.NoError(t, err)
	t.Cleanup(hc.CloseIdleConnections)
	assert.Greater(t, hc.Timeout, 20*time.Second, "the client timeout allows the default long-poll")
	assert.Equal(t, "HTTP/2.0 304 worker-1", get(t, hc, srv.URL))

	// A renewed certificate written in place is used by the next connection.
	worker2, err := ca.IssueClient("worker-2", time.Hour)
	require.NoError(t, err)
	writeFile(t, cfg.CertFile, worker2.CertPEM)
	writeFile(t, cfg.KeyFile, worker2.KeyPEM)
	future := time.Now().Add(time.Minute) // mtimes may not move within a coarse clock tick
	require.NoError(t, os.Chtimes(cfg.CertFile, future, future))
	require.NoError(t, os.Chtimes(cfg.KeyFile, future, future))
	hc.CloseIdleConnections()
	assert.Equal(t, "HTTP/2.0 304 worker-2", get(t, hc, srv.URL))

	// A half-written pair keeps the last good one in use.
	writeFile(t, cfg.KeyFile, []byte("not a key"))
	later := future.Add(time.Minute)
	require.NoError(t, os.Chtimes(cfg.KeyFile, later, later))
	hc.CloseIdleConnections()
	assert.Equal(t, "HTTP/2.0 304 worker-2", get(t, hc, srv.URL))
}

func TestNewHTTPClientRejectsAnUntrustedGateway(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("gateway CA")
	require.NoError(t, err)
	other, err := pki.NewCA("other CA")
	require.NoError(t, err)
	srv := mtlsServer(t, ca)

	dir := t.TempDir()
	worker, err := ca.IssueClient("worker", time.Hour)
	require.NoError(t, err)
	cfg := Config{CertFile: filepath.Join(dir, "w.crt"), KeyFile: filepath.Join(dir, "w.key"), CAFile: filepath.Join(dir, "ca.crt")}
	writeFile(t, cfg.CertFile, worker.CertPEM)
	writeFile(t, cfg.KeyFile, worker.KeyPEM)
	writeFile(t, cfg.CAFile, other.CertPEM)

	hc, err := NewHTTPClient(cfg)
	require.NoError(t, err)
	t.Cleanup(hc.CloseIdleConnections)
	_, err = hc.Get(srv.URL)
	var unknown x509.UnknownAuthorityError
	assert.ErrorAs(t, err, &unknown)
}

func TestNewHTTPClientConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := pki.NewCA("CA")
	require.NoError(t, err)
	worker, err := ca.IssueClient("worker", time.Hour)
	require.NoError(t, err)
	crt, key := filepath.Join(dir, "w.crt"), filepath.Join(dir, "w.key")
	writeFile(t, crt, worker.CertPEM)
	writeFile(t, key, worker.KeyPEM)
	empty := filepath.Join(dir, "empty.pem")
	writeFile(t, empty, []byte("no PEM here"))

	_, err = NewHTTPClient(Config{CertFile: crt})
	assert.ErrorContains(t, err, "CertFile and KeyFile")
	_, err = NewHTTPClient(Config{CertFile: crt, KeyFile: filepath.Join(dir, "missing")})
	assert.ErrorContains(t, err, "client certificate")
	_, err = NewHTTPClient(Config{CertFile: crt, KeyFile: crt})
	assert.ErrorContains(t, err, "client certificate")
	_, err = NewHTTPClient(Config{CertFile: crt, KeyFile: key, CAFile: filepath.Join(dir, "missing")})
	assert.ErrorContains(t, err, "CA file")
	_, err = NewHTTPClient(Config{CertFile: crt, KeyFile: key, CAFile: empty})
	assert.ErrorContains(t, err, "no PEM certificate")
}

func TestNewHTTPClientRaisesTLSConfigToTLS13(t *testing.T) {
	t.Parallel()
	given := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "gw"}
	hc, err := NewHTTPClient(Config{TLSConfig: given, WaitSeconds: 60})
	require.NoError(t, err)
	tr := hc.Transport.(*http.Transport)
	assert.Equal(t, uint16(tls.VersionTLS13), tr.TLSClientConfig.MinVersion)
	assert.Equal(t, "gw", tr.TLSClientConfig.ServerName)
	assert.Equal(t, uint16(tls.VersionTLS12), given.MinVersion, "the caller's config is not modified")
	assert.True(t, tr.ForceAttemptHTTP2)
	assert.Greater(t, hc.Timeout, 60*time.Second)
}
