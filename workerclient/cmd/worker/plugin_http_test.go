package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// testCert is a certificate for 127.0.0.1, signed by parent (self-signed
// when parent is nil), valid from notBefore to notAfter.
func testCert(t *testing.T, cn string, notBefore, notAfter time.Time, isCA bool, parent *tls.Certificate) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"Worker Gateway tests"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  isCA,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	signer, signerKey := tmpl, any(key)
	if parent != nil {
		signer, signerKey = parent.Leaf, parent.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// tlsServer serves h over TLS on loopback with cert.
func tlsServer(t *testing.T, cert tls.Certificate, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// page answers every request with an HTML page titled title and a Server
// header.
func page(title string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "test-server/1.0")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><html><head><TITLE lang=en>%s</TITLE></head><body>hi</body></html>", title)
	})
}

func portAsset(t *testing.T, srv *httptest.Server) Asset {
	t.Helper()
	return Asset{Type: "port", Value: srv.Listener.Addr().String()}
}

func threatIDs(rs []record) []string {
	var ids []string
	for _, r := range rs {
		if r.Kind == "threat" {
			ids = append(ids, r.ExternalID)
		}
	}
	return ids
}

func TestHTTPProbePlainHTTPFromAPortAsset(t *testing.T) {
	srv := httptest.NewServer(page("  Hello &amp;\n\t World  "))
	defer srv.Close()
	c, rec := newCall(t, `{"timeout_ms": 2000}`, nil, []Asset{portAsset(t, srv)})
	require.NoError(t, httpProbePlugin(t.Context(), c))

	// A port other than 80/8080/443/8443: https is tried first, then http.
	assert.Equal(t, []record{{
		Kind: "asset", Type: "url", Value: srv.URL + "/",
		Details: map[string]any{"status": float64(200), "server": "test-server/1.0", "title": "Hello & World"},
	}}, records(rec))
}

func TestHTTPProbeSelfSignedTLSServer(t *testing.T) {
	srv := httptest.NewTLSServer(page("secure"))
	defer srv.Close()
	leaf, err := x509.ParseCertificate(srv.TLS.Certificates[0].Certificate[0])
	require.NoError(t, err)
	require.Equal(t, leaf.RawIssuer, leaf.RawSubject, "httptest's certificate is self-signed")
	require.True(t, leaf.NotAfter.After(time.Now().Add(365*24*time.Hour)), "and far from expiry")

	c, rec := newCall(t, "", []string{srv.URL + "/", "not a url", "ftp://127.0.0.1/"}, []Asset{portAsset(t, srv)})
	require.NoError(t, httpProbePlugin(t.Context(), c))

	rs := records(rec)
	require.Len(t, rs, 2, "the URL target and the port asset name the same URL: probed once")
	assert.Equal(t, record{
		Kind: "asset", Type: "url", Value: srv.URL + "/",
		Details: map[string]any{"status": float64(200), "server": "test-server/1.0", "title": "secure"},
	}, rs[0])
	assert.Equal(t, record{
		Kind: "threat", Type: "url", Value: srv.URL + "/", ExternalID: "tls-certificate-self-signed", Severity: "medium",
		Details: map[string]any{
			"not_after": leaf.NotAfter.UTC().Format(time.RFC3339),
			"subject":   leaf.Subject.String(),
			"issuer":    leaf.Issuer.String(),
		},
	}, rs[1])

	// The url names its certificate (compared between scans), the
	// certificate is an asset covering its DNS names, and the finding
	// carries vulnerability details.
	sum := sha256.Sum256(leaf.Raw)
	fingerprint := "sha256:" + hex.EncodeToString(sum[:])
	var certDetails map[string]any
	for _, r := range rec.Records() {
		switch {
		case r.Asset != nil && r.Asset.Type == "url" && r.Kind == "asset":
			var d map[string]any
			require.NoError(t, json.Unmarshal(*r.Details, &d))
			certDetails = d["certificate"].(map[string]any)
		case r.Kind == "threat":
			require.NotNil(t, r.Vulnerability)
			assert.Equal(t, []string{"CWE-295"}, *r.Vulnerability.CweIds)
			assert.NotEmpty(t, *r.Vulnerability.Remediation)
		}
	}
	assert.Equal(t, fingerprint, certDetails["sha256"])
	host := srv.Listener.Addr().String()
	want := []string{"url:" + srv.URL + "/ served_by port:" + host}
	for _, name := range leaf.DNSNames {
		if !strings.HasPrefix(name, "*.") { // a wildcard names no hostname asset
			want = append(want, "certificate:"+fingerprint+" covers hostname:"+name)
		}
	}
	slices.Sort(want)
	assert.Equal(t, want, edges(rec))
}

func TestHTTPProbeExpiredCertificate(t *testing.T) {
	now := time.Now()
	cert := testCert(t, "expired.test", now.Add(-30*24*time.Hour), now.Add(-24*time.Hour), false, nil)
	srv := tlsServer(t, cert, page("old"))
	c, rec := newCall(t, fmt.Sprintf(`{"urls": [%q]}`, srv.URL), nil, nil)
	require.NoError(t, httpProbePlugin(t.Context(), c))

	rs := records(rec)
	assert.Equal(t, []string{"tls-certificate-expired", "tls-certificate-self-signed"}, threatIDs(rs),
		"a self-signed leaf that is not a CA is still self-signed")
	for _, r := range rs {
		assert.Equal(t, srv.URL, r.Value, "threats are on the url asset")
		if r.ExternalID == "tls-certificate-expired" {
			assert.Equal(t, "high", r.Severity)
			assert.Equal(t, cert.Leaf.NotAfter.UTC().Format(time.RFC3339), r.Details["not_after"])
			assert.Equal(t, "CN=expired.test,O=Worker Gateway tests", r.Details["subject"])
		}
	}
}

func TestHTTPProbeExpiringCASignedCertificate(t *testing.T) {
	now := time.Now()
	ca := testCert(t, "Test CA", now.Add(-time.Hour), now.Add(365*24*time.Hour), true, nil)
	cert := testCert(t, "soon.test", now.Add(-time.Hour), now.Add(5*24*time.Hour), false, &ca)
	srv := tlsServer(t, cert, page("soon"))
	c, rec := newCall(t, fmt.Sprintf(`{"urls": [%q]}`, srv.URL+"/x"), nil, nil)
	require.NoError(t, httpProbePlugin(t.Context(), c))

	rs := records(rec)
	require.Equal(t, []string{"tls-certificate-expiring"}, threatIDs(rs), "signed by a CA: not self-signed")
	assert.Equal(t, "medium", rs[1].Severity)
	assert.Equal(t, "CN=Test CA,O=Worker Gateway tests", rs[1].Details["issuer"])
	assert.Equal(t, srv.URL+"/x", rs[1].Value)
}

func TestHTTPProbeStopsAfterThreeRedirects(t *testing.T) {
	var (
		mu   sync.Mutex
		hits []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits = append(hits, r.URL.Path)
		mu.Unlock()
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
		http.Redirect(w, r, fmt.Sprintf("/r/%d", n+1), http.StatusFound)
	}))
	defer srv.Close()
	c, rec := newCall(t, fmt.Sprintf(`{"urls": [%q]}`, srv.URL+"/r/0"), nil, nil)
	require.NoError(t, httpProbePlugin(t.Context(), c))
	mu.Lock()
	assert.Equal(t, []string{"/r/0", "/r/1", "/r/2", "/r/3"}, hits, "three redirects followed, no more")
	mu.Unlock()
	rs := records(rec)
	require.Len(t, rs, 1)
	assert.Equal(t, float64(http.StatusFound), rs[0].Details["status"])
	assert.Equal(t, srv.URL+"/r/3", rs[0].Details["final_url"])
}

func TestHTTPProbeUnreachableIsNotAnError(t *testing.T) {
	port := closedPort(t)
	c, rec := newCall(t, `{"timeout_ms": 1000}`, nil, []Asset{{Type: "port", Value: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}})
	require.NoError(t, httpProbePlugin(t.Context(), c))
	assert.Empty(t, records(rec))
}

func TestHTTPProbeTimesOut(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	c, rec := newCall(t, fmt.Sprintf(`{"urls": [%q], "timeout_ms": 100}`, srv.URL), nil, nil)
	require.NoError(t, httpProbePlugin(t.Context(), c))
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Empty(t, records(rec))
}

func TestHTTPTargets(t *testing.T) {
	c := call(t, "", []string{"https://127.0.0.1/", "127.0.0.1", "http://localhost:8080/app"}, []Asset{
		{Type: "port", Value: "127.0.0.1:443"},
		{Type: "port", Value: "127.0.0.1:80"},
		{Type: "port", Value: "127.0.0.1:8080"},
		{Type: "port", Value: "[::1]:8443"},
		{Type: "port", Value: "127.0.0.1:22"},
		{Type: "port", Value: "nonsense"},
		{Type: "ip", Value: "127.0.0.1"},
	})
	targets, err := httpTargets(c, httpProbeInput{})
	require.NoError(t, err)
	assert.Equal(t, []httpTarget{
		{"https://127.0.0.1/"},
		{"http://localhost:8080/app"},
		{"http://127.0.0.1/"},
		{"http://127.0.0.1:8080/"},
		{"https://[::1]:8443/"},
		{"https://127.0.0.1:22/", "http://127.0.0.1:22/"},
	}, targets, "https://127.0.0.1:443/ is the first target again")

	targets, err = httpTargets(c, httpProbeInput{URLs: []string{"http://127.0.0.1:1/"}})
	require.NoError(t, err)
	assert.Equal(t, []httpTarget{{"http://127.0.0.1:1/"}}, targets, "explicit URLs replace the derived ones")

	for _, input := range []string{`{"urls": ["127.0.0.1"]}`, `{"urls": ["file:///etc/passwd"]}`, `{"timeout_ms": -5}`} {
		err := httpProbePlugin(t.Context(), call(t, input, nil, nil))
		assert.Equal(t, "bad-input", taskError(t, err).Code, input)
	}
}

func TestHTMLTitle(t *testing.T) {
	long := strings.Repeat("é", 250)
	for body, want := range map[string]string{
		"<title>x</title>":                                   "x",
		"<html><TiTlE\n id=t>\n a  \n b </title>":            "a b",
		"<title>&lt;ok&gt; &#39;q&#39;</title>":              "<ok> 'q'",
		"no title here":                                      "",
		"<title>unterminated":                                "",
		"<title>" + long + "</title>":                        strings.Repeat("é", 200),
		"<title>a\xffb</title>":                              "ab",
		"<svg><title>first</title></svg><title>2":            "first",
		"<title></title>":                                    "",
		"<title>  " + strings.Repeat("a ", 150) + "</title>": strings.TrimSpace(strings.Repeat("a ", 100)),
	} {
		assert.Equal(t, want, htmlTitle([]byte(body)), body)
	}
}

func TestCertificateThreats(t *testing.T) {
	now := time.Now()
	asset := apiclient.AssetRef{Type: "url", Value: "https://127.0.0.1/"}
	ca := testCert(t, "CA", now.Add(-time.Hour), now.Add(24*time.Hour*365), true, nil)
	ids := func(c tls.Certificate) []string {
		var ids []string
		for _, r := range certificateThreats(asset, c.Leaf, now) {
			ids = append(ids, *r.ExternalId)
			assert.Equal(t, asset, *r.Asset)
		}
		return ids
	}
	assert.Equal(t, []string{"tls-certificate-self-signed"}, ids(ca))
	assert.Empty(t, ids(testCert(t, "ok", now.Add(-time.Hour), now.Add(15*24*time.Hour), false, &ca)))
	assert.Equal(t, []string{"tls-certificate-expiring"}, ids(testCert(t, "soon", now.Add(-time.Hour), now.Add(13*24*time.Hour), false, &ca)))
	assert.Equal(t, []string{"tls-certificate-expired"}, ids(testCert(t, "old", now.Add(-48*time.Hour), now.Add(-time.Minute), false, &ca)))

	// Issuer equal to subject, but signed by another CA of that name: its
	// own key does not verify it, so it is not self-signed.
	other := testCert(t, "CA", now.Add(-time.Hour), now.Add(24*time.Hour*365), true, nil)
	namesake := testCert(t, "CA", now.Add(-time.Hour), now.Add(24*time.Hour*365), true, &other)
	require.Equal(t, namesake.Leaf.RawIssuer, namesake.Leaf.RawSubject)
	assert.False(t, isSelfSigned(namesake.Leaf))
	assert.True(t, isSelfSigned(other.Leaf))
}
