package tlsclient

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// tlsServer is an HTTPS server speaking HTTP/2 and the PEM file of its
// certificate.
func tlsServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(r.Proto))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	return srv, caFile
}

// TestTransportTrustsTheCAFileOverHTTP2: a client built from ReadCAs and
// Transport reaches a server signed by the file's CA, over HTTP/2.
func TestTransportTrustsTheCAFileOverHTTP2(t *testing.T) {
	t.Parallel()
	srv, caFile := tlsServer(t)
	for _, withSystemRoots := range []bool{false, true} {
		roots, err := ReadCAs(caFile, withSystemRoots)
		require.NoError(t, err)
		tr := Transport(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
		require.NotNil(t, tr.Proxy, "the proxy comes from the environment")
		res, err := (&http.Client{Transport: tr}).Get(srv.URL)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Equal(t, 2, res.ProtoMajor)
		tr.CloseIdleConnections()
	}

	// Without the CA, the server is not trusted.
	res, err := (&http.Client{Transport: Transport(&tls.Config{MinVersion: tls.VersionTLS12})}).Get(srv.URL)
	if err == nil {
		_ = res.Body.Close()
	}
	var verify *tls.CertificateVerificationError
	require.ErrorAs(t, err, &verify)
	require.True(t, Untrusted(err))
	require.False(t, Untrusted(errors.New("connection refused")))
	require.False(t, Untrusted(nil))
}

// TestUntrusted: each way a certificate fails verification, bare or
// wrapped, is an untrusted gateway.
func TestUntrusted(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		&tls.CertificateVerificationError{Err: errors.New("x509: certificate signed by unknown authority")},
		x509.UnknownAuthorityError{},
		fmt.Errorf("GET https://gw: %w", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "gw"}),
		x509.CertificateInvalidError{Reason: x509.Expired},
	} {
		require.True(t, Untrusted(err), "%T", err)
	}
}

func TestReadCAsErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := ReadCAs(filepath.Join(dir, "missing.pem"), false)
	require.ErrorIs(t, err, fs.ErrNotExist)

	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600))
	for _, withSystemRoots := range []bool{false, true} {
		_, err = ReadCAs(notPEM, withSystemRoots)
		require.EqualError(t, err, notPEM+" holds no PEM certificate")
	}
}
