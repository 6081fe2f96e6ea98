package workerclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/atomicfile"
	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// idGateway is a gateway stand-in for enrollment and renewal, over real TLS
// (HTTP/2). Like the gateway, it asks for a client certificate without
// requiring one, and authenticates every request but enrollment by the
// certificate's fingerprint: the current one, or the previous one until the
// current one is first used.
type idGateway struct {
	t        *testing.T
	ca       *pki.CA
	srv      *httptest.Server
	caFile   string
	token    string
	workerID uuid.UUID
	renewIn  float64       // renew_in_seconds answered to enrollment (renewals: an hour)
	pollHold time.Duration // how long a poll waits before its empty answer

	mu        sync.Mutex
	current   string   // fingerprint of the bound certificate
	issued    []string // fingerprints of the certificates issued, in order
	previous  string   // still accepted until current is used
	tokenUsed bool
	renewErr  *fault // answer renewals with this
	requests  []idRequest
	refused   []idRequest // requests refused as certificate-unknown
}

type idRequest struct {
	path        string
	fingerprint string // "" without a client certificate
	remote      string // the connection
	start, end  time.Time
	raw         []byte // headers and body, as received
}

func newIDGateway(t *testing.T) *idGateway {
	t.Helper()
	ca, err := pki.NewCA("gateway CA")
	require.NoError(t, err)
	g := &idGateway{t: t, ca: ca, token: "wge_" + uuid.NewString(), workerID: uuid.New(), renewIn: 3600, pollHold: 200 * time.Millisecond}
	g.caFile = filepath.Join(t.TempDir(), "gateway-ca.pem")
	require.NoError(t, os.WriteFile(g.caFile, ca.CertPEM, 0o644))

	srvCert, err := ca.IssueServer([]string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(srvCert.CertPEM, srvCert.KeyPEM)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/enroll", g.handleEnroll)
	mux.HandleFunc("POST /v1/certificates/renew", g.authenticated(g.handleRenew))
	mux.HandleFunc("POST /v1/leases", g.authenticated(g.handleLeases))
	g.srv = httptest.NewUnstartedServer(mux)
	g.srv.EnableHTTP2 = true
	g.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	g.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS13}
	g.srv.StartTLS()
	t.Cleanup(g.srv.Close)
	return g
}

// record reads the request, with everything it carried; false when the
// client went away meanwhile (a poll cancelled by Run's end).
func (g *idGateway) record(r *http.Request) (idRequest, []byte, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return idRequest{}, nil, false
	}
	var raw bytes.Buffer
	_ = r.Header.Write(&raw)
	raw.Write(body)
	req := idRequest{path: r.URL.Path, remote: r.RemoteAddr, start: time.Now(), raw: raw.Bytes()}
	if len(r.TLS.PeerCertificates) > 0 {
		req.fingerprint = pki.Fingerprint(r.TLS.PeerCertificates[0])
	}
	return req, body, true
}

func (g *idGateway) done(req idRequest) {
	req.end = time.Now()
	g.mu.Lock()
	g.requests = append(g.requests, req)
	g.mu.Unlock()
}

func (g *idGateway) authenticated(h func(http.ResponseWriter, *http.Request, idRequest, []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, body, ok := g.record(r)
		if !ok {
			return
		}
		g.mu.Lock()
		ok = req.fingerprint != "" && (req.fingerprint == g.current || req.fingerprint == g.previous)
		if req.fingerprint == g.current {
			g.previous = "" // the new certificate is used: the old one's grace ends
		}
		if !ok {
			g.refused = append(g.refused, req)
		}
		g.mu.Unlock()
		if !ok {
			writeProblem(w, http.StatusUnauthorized, "certificate-unknown")
			g.done(req)
			return
		}
		h(w, r, req, body)
		g.done(req)
	}
}

func (g *idGateway) issue(csrPEM string, renewIn float64) apiclient.IssuedCertificate {
	cert, certPEM, err := g.ca.SignCSR([]byte(csrPEM), g.workerID.String(), time.Hour)
	require.NoError(g.t, err)
	g.current = pki.Fingerprint(cert)
	g.issued = append(g.issued, g.current)
	life := time.Until(cert.NotAfter)
	return apiclient.IssuedCertificate{WorkerId: g.workerID, CertificatePem: string(certPEM), CaCertificatePem: string(g.ca.CertPEM),
		ExpiresAt: cert.NotAfter, ExpiresInSeconds: life.Seconds(), RenewInSeconds: renewIn}
}

func (g *idGateway) handleEnroll(w http.ResponseWriter, r *http.Request) {
	req, body, ok := g.record(r)
	if !ok {
		return
	}
	defer g.done(req)
	var in apiclient.EnrollRequest
	require.NoError(g.t, json.Unmarshal(body, &in))
	g.mu.Lock()
	defer g.mu.Unlock()
	if in.EnrollmentToken != g.token || g.tokenUsed {
		writeProblem(w, http.StatusUnauthorized, problem.EnrollmentTokenInvalid)
		return
	}
	g.tokenUsed = true
	writeJSON(w, g.issue(in.CsrPem, g.renewIn))
}

func (g *idGateway) handleRenew(w http.ResponseWriter, _ *http.Request, _ idRequest, body []byte) {
	var in apiclient.RenewRequest
	require.NoError(g.t, json.Unmarshal(body, &in))
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.renewErr != nil {
		writeProblem(w, g.renewErr.status, g.renewErr.code)
		return
	}
	g.previous = g.current
	writeJSON(w, g.issue(in.CsrPem, 3600))
}

func (g *idGateway) handleLeases(w http.ResponseWriter, r *http.Request, _ idRequest, _ []byte) {
	select {
	case <-time.After(g.pollHold):
		writeJSON(w, apiclient.LeaseResponse{Leases: []apiclient.Lease{}})
	case <-r.Context().Done():
	}
}

// bind registers an existing certificate as the worker's.
func (g *idGateway) bind(cert *x509.Certificate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.current = pki.Fingerprint(cert)
}

func (g *idGateway) snapshot() (reqs, refused []idRequest) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]idRequest(nil), g.requests...), append([]idRequest(nil), g.refused...)
}

func (g *idGateway) count(path string) int {
	reqs, _ := g.snapshot()
	n := 0
	for _, r := range reqs {
		if r.path == path {
			n++
		}
	}
	return n
}

func (g *idGateway) config(stateDir string) Config {
	return Config{
		GatewayURL:      g.srv.URL,
		StateDir:        stateDir,
		EnrollmentToken: g.token,
		CAFile:          g.caFile,
		WaitSeconds:     1,
		Handler:         func(context.Context, *LeasedTask) error { return nil },
		Logger:          slog.New(slog.DiscardHandler),
	}
}

// running is a Run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func startRun(t *testing.T, cfg Config) *running {
	t.Helper()
	w, err := NewWorker(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { _ = r.stop(t) }) // a test that cares calls stop itself
	return r
}

// stop cancels Run and returns its result.
func (r *running) stop(t *testing.T) error {
	r.cancel()
	return r.wait(t)
}

func (r *running) wait(t *testing.T) error {
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 15*time.Second, 10*time.Millisecond, what)
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Mode().Perm()
}

// keyMaterial is every form in which a PEM key could be leaked: the PEM
// and each line of its base64 body.
func keyMaterial(t *testing.T, keyPEM []byte) []string {
	t.Helper()
	block, _ := pem.Decode(keyPEM)
	require.NotNil(t, block)
	out := []string{string(keyPEM)}
	for _, line := range strings.Split(string(keyPEM), "\n") {
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
			out = append(out, line)
		}
	}
	return out
}

func assertNeverSent(t *testing.T, reqs []idRequest, keyPEM []byte) {
	t.Helper()
	for _, r := range reqs {
		for _, m := range keyMaterial(t, keyPEM) {
			// JSON escapes the PEM's newlines and '+' and '/' may be escaped too.
			raw := strings.NewReplacer(`\n`, "\n", `\u002b`, "+", `\/`, "/").Replace(string(r.raw))
			require.NotContains(t, raw, m, "the private key appeared in a request to %s", r.path)
		}
	}
}

func TestEnrollmentWritesTheIdentityAndNeverSendsTheKey(t *testing.T) {
	t.Parallel()
	g := newIDGateway(t)
	dir := filepath.Join(t.TempDir(), "state")
	run := startRun(t, g.config(dir))
	waitUntil(t, "a poll with the enrolled certificate", func() bool { return g.count("/v1/leases") > 0 })
	require.NoError(t, run.stop(t))

	reqs, refused := g.snapshot()
	require.Empty(t, refused)
	require.Equal(t, "/v1/enroll", reqs[0].path)
	assert.Empty(t, reqs[0].fingerprint, "enrollment presents no client certificate")
	assert.Equal(t, 1, g.count("/v1/enroll"))

	assert.Equal(t, os.FileMode(0o700), fileMode(t, dir))
	assert.Equal(t, os.FileMode(0o600), fileMode(t, filepath.Join(dir, StateKeyFile)))
	assert.Equal(t, os.FileMode(0o644), fileMode(t, filepath.Join(dir, StateCertFile)))
	assert.Equal(t, os.FileMode(0o644), fileMode(t, filepath.Join(dir, StateCAFile)))
	assert.NoFileExists(t, filepath.Join(dir, stateNextKeyFile))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 3, "no temporary file is left behind")
	caPEM, err := os.ReadFile(filepath.Join(dir, StateCAFile))
	require.NoError(t, err)
	assert.Equal(t, g.ca.CertPEM, caPEM)

	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, StateCertFile), filepath.Join(dir, StateKeyFile))
	require.NoError(t, err, "the certificate is for the key on disk")
	assert.Equal(t, g.workerID.String(), pair.Leaf.Subject.CommonName)
	for _, r := range reqs[1:] {
		assert.Equal(t, pki.Fingerprint(pair.Leaf), r.fingerprint, "%s presents the enrolled certificate", r.path)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, StateKeyFile))
	require.NoError(t, err)
	assertNeverSent(t, reqs, keyPEM)
}

func TestEnrolledIdentityIsReusedOnRestart(t *testing.T) {
	t.Parallel()
	g := newIDGateway(t)
	dir := t.TempDir()
	run := startRun(t, g.config(dir))
	waitUntil(t, "the first poll", func() bool { return g.count("/v1/leases") > 0 })
	require.NoError(t, run.stop(t))
	certPEM, err := os.ReadFile(filepath.Join(dir, StateCertFile))
	require.NoError(t, err)
	cert, err := pki.ParseCertificatePEM(certPEM)
	require.NoError(t, err)

	// No token, and no CAFile either: the gateway is trusted through the
	// ca.pem that enrollment saved.
	cfg := g.config(dir)
	cfg.EnrollmentToken, cfg.CAFile = "", ""
	polls := g.count("/v1/leases")
	run = startRun(t, cfg)
	waitUntil(t, "a poll after the restart", func() bool { return g.count("/v1/leases") > polls })
	require.NoError(t, run.stop(t))

	reqs, refused := g.snapshot()
	require.Empty(t, refused)
	assert.Equal(t, 1, g.count("/v1/enroll"), "no second enrollment")
	assert.Equal(t, pki.Fingerprint(cert), reqs[len(reqs)-1].fingerprint)
	again, err := os.ReadFile(filepath.Join(dir, StateCertFile))
	require.NoError(t, err)
	assert.Equal(t, certPEM, again, "the certificate was not replaced")

	// An empty StateDir without a token is refused at once.
	cfg.StateDir = t.TempDir()
	_, err = NewWorker(cfg)
	assert.ErrorContains(t, err, "ask the operator for an enrollment token")
}

func TestEnrollmentTokenRefused(t *testing.T) {
	t.Parallel()
	g := newIDGateway(t)
	dir := t.TempDir()
	cfg := g.config(dir)
	cfg.EnrollmentToken = "wge_used-or-unknown"
	run := startRun(t, cfg)
	err := run.wait(t)
	require.ErrorIs(t, err, ErrEnrollmentTokenInvalid)
	assert.ErrorContains(t, err, "ask the operator for a new enrollment token")
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusUnauthorized, apiErr.Status)
	assert.NotContains(t, err.Error(), cfg.EnrollmentToken, "the token is not echoed")
	assert.NoFileExists(t, filepath.Join(dir, StateCertFile))
	assert.NoFileExists(t, filepath.Join(dir, StateKeyFile))
	assert.Equal(t, 0, g.count("/v1/leases"))
}

func TestEnrollmentRefusesAnUntrustedGateway(t *testing.T) {
	t.Parallel()
	g := newIDGateway(t)
	cfg := g.config(t.TempDir())
	other, err := pki.NewCA("other CA")
	require.NoError(t, err)
	cfg.CAFile = filepath.Join(t.TempDir(), "other.pem")
	require.NoError(t, os.WriteFile(cfg.CAFile, other.CertPEM, 0o644))
	err = startRun(t, cfg).wait(t)
	assert.ErrorContains(t, err, "set CAFile")
	assert.Equal(t, 0, g.count("/v1/enroll"))
}

func TestRenewalSwitchesTheCertificateOnNewConnections(t *testing.T) {
	t.Parallel()
	g := newIDGateway(t)
	g.renewIn = 0.01             // renewed minRenewDelay after enrollment…
	g.pollHold = 2 * time.Second // …while a poll is in flight on the one HTTP/2 connection
	dir := t.TempDir()
	run := startRun(t, g.config(dir))
	waitUntil(t, "the renewal", func() bool { return g.count("/v1/certificates/renew") > 0 })
	g.mu.Lock()
	enrolledFP, newFP := g.issued[0], g.issued[1]
	g.mu.Unlock()
	var renewedPEM, renewedKey []byte
	waitUntil(t, "the renewed certificate on disk", func() bool {
		renewedPEM, renewedKey = readState(t, dir)
		pair, err := tls.X509KeyPair(renewedPEM, renewedKey)
		return err == nil && pki.Fingerprint(pair.Leaf) == newFP
	})
	waitUntil(t, "a poll with the renewed certificate", func() bool {
		reqs, _ := g.snapshot()
		return reqs[len(reqs)-1].path == "/v1/leases" && reqs[len(reqs)-1].fingerprint == newFP
	})
	require.NoError(t, run.stop(t))

	reqs, refused := g.snapshot()
	require.Empty(t, refused, "no request presented the old certificate after the new one was used")
	var renewal idRequest
	for _, r := range reqs {
		if r.path == "/v1/certificates/renew" {
			renewal = r
		}
	}
	assert.Equal(t, enrolledFP, renewal.fingerprint, "the renewal is authenticated with the current certificate")
	assert.NotEqual(t, enrolledFP, newFP)
	// Every request presented one of the two certificates, the old ones
	// all before the new one was first used (the stand-in would have refused
	// them after), and no connection carried both.
	oldConns, newConns := map[string]bool{}, map[string]bool{}
	for _, r := range reqs[1:] {
		switch r.fingerprint {
		case enrolledFP:
			oldConns[r.remote] = true
		case newFP:
			newConns[r.remote] = true
		default:
			t.Errorf("%s presented an unknown certificate", r.path)
		}
	}
	require.NotEmpty(t, newConns)
	for c := range newConns {
		assert.False(t, oldConns[c], "the renewed certificate is presented on new connections only")
	}
	// A poll was in flight during the renewal, on the connection the renewal
	// used (HTTP/2), and finished there.
	inFlight := false
	for _, r := range reqs {
		inFlight = inFlight || (r.path == "/v1/leases" && r.start.Before(renewal.start) && r.end.After(renewal.end) && r.remote == renewal.remote)
	}
	assert.True(t, inFlight, "the renewal happened while a poll was in flight on the same connection")

	pair, err := tls.X509KeyPair(renewedPEM, renewedKey)
	require.NoError(t, err, "the renewed pair on disk matches")
	assert.Equal(t, g.workerID.String(), pair.Leaf.Subject.CommonName)
	assert.Equal(t, os.FileMode(0o600), fileMode(t, filepath.Join(dir, StateKeyFile)))
	assert.NoFileExists(t, filepath.Join(dir, stateNextKeyFile))
	assertNeverSent(t, reqs, renewedKey)
}

func readState(t *testing.T, dir string) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, err := os.ReadFile(filepath.Join(dir, StateCertFile))
	require.NoError(t, err)
	keyPEM, err = os.ReadFile(filepath.Join(dir, StateKeyFile))
	require.NoError(t, err)
	return certPEM, keyPEM
}

// provision writes a certificate of g's CA for a new key into dir, bound at
// g, as an earlier run would have left it.
func provision(t *testing.T, g *idGateway, dir string, validity time.Duration) *x509.Certificate {
	t.Helper()
	issued, err := g.ca.IssueClient(g.workerID.String(), validity)
	require.NoError(t, err)
	require.NoError(t, writeState(dir, issued.KeyPEM, issued.CertPEM, g.ca.CertPEM))
	g.bind(issued.Cert)
	return issued.Cert
}

func TestALoadedCertificateIsRenewedAfterTwoThirdsOfItsLifetime(t *testing.T) {
	t.Parallel()
	g := newIDGateway(t)

	// NotBefore is backdated a minute: 20 s of validity is 80 s of
	// lifetime, two thirds of which passed 7 s ago.
	due := t.TempDir()
	provision(t, g, due, 20*time.Second)
	cfg := g.config(due)
	cfg.EnrollmentToken = ""
	run := startRun(t, cfg)
	waitUntil(t, "the renewal of a certificate due", func() bool { return g.count("/v1/certificates/renew") == 1 })
	require.NoError(t, run.stop(t))

	fresh := t.TempDir()
	provision(t, g, fresh, time.Hour)
	cfg.StateDir = fresh
	run = startRun(t, cfg)
	polls := g.count("/v1/leases")
	waitUntil(t, "polls", func() bool { return g.count("/v1/leases") > polls+1 })
	require.NoError(t, run.stop(t))
	assert.Equal(t, 1, g.count("/v1/certificates/renew"), "a fresh certificate is not renewed")
	assert.Equal(t, 0, g.count("/v1/enroll"))
}

func TestRevokedDuringRenewal(t *testing.T) {
	t.Parallel()
	g := newIDGateway(t)
	g.renewErr = &fault{status: http.StatusForbidden, code: problem.WorkerRevoked}
	dir := t.TempDir()
	provision(t, g, dir, 10*time.Second) // due at once
	cfg := g.config(dir)
	cfg.EnrollmentToken = ""
	err := startRun(t, cfg).wait(t)
	require.ErrorIs(t, err, ErrWorkerRevoked)
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusForbidden, apiErr.Status)
	assert.Equal(t, 1, g.count("/v1/certificates/renew"), "revocation is not retried")
}

func TestRenewalFailuresAreRetried(t *testing.T) {
	t.Parallel()
	g := newIDGateway(t)
	g.renewErr = &fault{status: http.StatusServiceUnavailable, code: "unavailable"}
	dir := t.TempDir()
	old := provision(t, g, dir, 10*time.Second)
	cfg := g.config(dir)
	cfg.EnrollmentToken = ""
	run := startRun(t, cfg)
	waitUntil(t, "a failed renewal", func() bool { return g.count("/v1/certificates/renew") == 1 })
	g.mu.Lock()
	g.renewErr = nil
	g.mu.Unlock()
	waitUntil(t, "the renewal retried", func() bool { return g.count("/v1/certificates/renew") == 2 })
	polls := g.count("/v1/leases")
	waitUntil(t, "a poll after the renewal", func() bool { return g.count("/v1/leases") > polls })
	require.NoError(t, run.stop(t))
	certPEM, _ := readState(t, dir)
	cert, err := pki.ParseCertificatePEM(certPEM)
	require.NoError(t, err)
	assert.NotEqual(t, pki.Fingerprint(old), pki.Fingerprint(cert))
	_, refused := g.snapshot()
	assert.Empty(t, refused)
}

func TestAnExpiredCertificateEndsRun(t *testing.T) {
	t.Parallel()
	g := newIDGateway(t)
	g.renewErr = &fault{status: http.StatusUnauthorized, code: problem.CertificateExpired}
	dir := t.TempDir()
	provision(t, g, dir, 10*time.Second)
	cfg := g.config(dir)
	cfg.EnrollmentToken = ""
	err := startRun(t, cfg).wait(t)
	require.ErrorIs(t, err, ErrCertificateExpired)
	assert.ErrorContains(t, err, "new enrollment token")
}

func TestLoadStateCompletesAnInterruptedReplacement(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("CA")
	require.NoError(t, err)
	a, err := ca.IssueClient("a", time.Hour)
	require.NoError(t, err)
	b, err := ca.IssueClient("b", time.Hour)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, writeState(dir, a.KeyPEM, a.CertPEM, nil))
	assert.NoFileExists(t, filepath.Join(dir, StateCAFile), "no CA given, none written")

	// A crash after the new key was written, before its certificate: the
	// old pair is used and the orphan key removed.
	require.NoError(t, atomicfile.Write(filepath.Join(dir, stateNextKeyFile), b.KeyPEM, 0o600))
	pair, err := loadState(dir)
	require.NoError(t, err)
	assert.Equal(t, "a", pair.Leaf.Subject.CommonName)
	assert.NoFileExists(t, filepath.Join(dir, stateNextKeyFile))

	// A crash after the new certificate was written, before the key's
	// rename: the new pair is used and the rename completed.
	require.NoError(t, atomicfile.Write(filepath.Join(dir, stateNextKeyFile), b.KeyPEM, 0o600))
	require.NoError(t, atomicfile.Write(filepath.Join(dir, StateCertFile), b.CertPEM, 0o644))
	pair, err = loadState(dir)
	require.NoError(t, err)
	assert.Equal(t, "b", pair.Leaf.Subject.CommonName)
	assert.NoFileExists(t, filepath.Join(dir, stateNextKeyFile))
	key, err := os.ReadFile(filepath.Join(dir, StateKeyFile))
	require.NoError(t, err)
	assert.Equal(t, b.KeyPEM, key)

	// A mismatched pair is an error that says what to do.
	require.NoError(t, atomicfile.Write(filepath.Join(dir, StateKeyFile), a.KeyPEM, 0o600))
	_, err = loadState(dir)
	assert.ErrorContains(t, err, "not a usable pair")

	empty, err := loadState(t.TempDir())
	require.NoError(t, err)
	assert.Nil(t, empty)
}

func TestRenewalTimeIsTwoThirdsOfTheLifetime(t *testing.T) {
	t.Parallel()
	nb := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: nb, NotAfter: nb.Add(90 * time.Hour)}
	assert.Equal(t, nb.Add(60*time.Hour), renewalTime(leaf))
}

func TestRenewRetryDelay(t *testing.T) {
	t.Parallel()
	bo := renewRetry.delays()
	for attempt := range 40 {
		ceiling := renewBackoffCap
		if attempt < 10 {
			ceiling = min(renewBackoffBase<<attempt, renewBackoffCap)
		}
		d := bo.next(errors.New("connection reset"))
		assert.GreaterOrEqual(t, d, ceiling/2, "equal jitter: never sooner than half")
		assert.LessOrEqual(t, d, ceiling)
	}
	assert.Equal(t, 9*time.Second, bo.next(&APIError{Status: 503, RetryAfter: 9 * time.Second}))
}

func TestEnrolledIdentityConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := Config{GatewayURL: "https://gw.example", Handler: func(context.Context, *LeasedTask) error { return nil }}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"state dir and cert files", func(c *Config) { c.StateDir, c.CertFile, c.KeyFile = dir, "c", "k" }, "cannot be combined"},
		{"token and TLS config", func(c *Config) { c.StateDir, c.EnrollmentToken, c.TLSConfig = dir, "t", &tls.Config{} }, "cannot be combined"},
		{"token without state dir", func(c *Config) { c.EnrollmentToken = "t" }, "needs a StateDir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.edit(&cfg)
			_, err := cfg.withDefaults()
			assert.ErrorContains(t, err, tc.want)
		})
	}
	cfg := base
	cfg.StateDir, cfg.EnrollmentToken = filepath.Join(dir, "new"), "t"
	w, err := NewWorker(cfg)
	require.NoError(t, err, "enrollment waits for Run")
	assert.False(t, w.id.enrolled())
	assert.DirExists(t, cfg.StateDir)
}

func TestNewHTTPClientUsesTheStateDir(t *testing.T) {
	t.Parallel()
	g := newIDGateway(t)
	dir := t.TempDir()
	cert := provision(t, g, dir, time.Hour)
	hc, err := NewHTTPClient(Config{StateDir: dir}) // trusts ca.pem
	require.NoError(t, err)
	t.Cleanup(hc.CloseIdleConnections)
	resp, err := hc.Post(g.srv.URL+"/v1/leases", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	reqs, _ := g.snapshot()
	assert.Equal(t, pki.Fingerprint(cert), reqs[0].fingerprint)
}
