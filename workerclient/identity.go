package workerclient

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/worker-gateway/gateway/internal/atomicfile"
	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// The files of an enrolled identity in Config.StateDir.
const (
	// StateKeyFile is the worker's private key (mode 0600). It is generated
	// on the worker and never sent anywhere.
	StateKeyFile = "worker.key"
	// StateCertFile is the worker's certificate, signed by the gateway's CA.
	StateCertFile = "worker.pem"
	// StateCAFile is the CA that signed StateCertFile, as the gateway last
	// sent it.
	StateCAFile = "ca.pem"
	// stateNextKeyFile holds a new key until its certificate is on disk:
	// see writeState.
	stateNextKeyFile = "worker.key.next"
)

var (
	// ErrEnrollmentTokenInvalid is wrapped by the error of Run when the
	// gateway refuses the enrollment token (unknown, already used or
	// expired): the operator must issue a new one.
	ErrEnrollmentTokenInvalid = errors.New("workerclient: enrollment token refused")
	// ErrCertificateExpired is wrapped by the error of Run when the gateway
	// refuses to renew the worker's certificate because it has expired: the
	// worker needs a new enrollment token.
	ErrCertificateExpired = errors.New("workerclient: certificate expired")
	// errNotEnrolled is what a call fails with before enrollment.
	errNotEnrolled = errors.New("workerclient: the worker has not enrolled yet")
)

const (

	// Renewals are never scheduled sooner than this after a certificate was
	// obtained, whatever the gateway says.
	minRenewDelay = time.Second
	// A failed renewal is retried with exponential backoff (equal jitter)
	// from renewBackoffBase up to renewBackoffCap.
	renewBackoffBase = time.Second
	renewBackoffCap  = time.Minute
	// How many replaced transports are remembered so that their lingering
	// connections can be closed.
	maxRetiredTransports = 4
	// The common name asked for in CSRs before the worker knows its id
	// (the gateway names the certificate itself anyway).
	enrollCommonName = "worker"
)

// identity is a worker identity obtained by enrollment and kept in a state
// directory: the certificate the runtime presents, renewed in place.
type identity struct {
	dir     string
	token   string
	gateway string
	roots   *x509.CertPool // trust of the gateway's certificate; nil: system roots
	log     *slog.Logger
	tr      *rotatingTransport

	mu       sync.Mutex
	workerID string    // the certificate's common name: the worker's id
	renewAt  time.Time // when to renew the current certificate
	expires  time.Time // the current certificate's expiry
}

// newIdentity opens the state directory, creating it, and loads the
// certificate it holds, if any. With none (or an expired one) and a token,
// the worker enrolls when it runs.
func newIdentity(cfg Config) (*identity, error) {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("workerclient: StateDir: %w", err)
	}
	roots, err := gatewayRoots(cfg)
	if err != nil {
		return nil, err
	}
	id := &identity{dir: cfg.StateDir, token: cfg.EnrollmentToken, gateway: cfg.GatewayURL, roots: roots,
		log: cfg.Logger, tr: &rotatingTransport{}}
	cert, err := loadState(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	switch {
	case cert == nil && id.token == "":
		return nil, fmt.Errorf("workerclient: StateDir %s holds no certificate (%s) and no EnrollmentToken was given: "+
			"ask the operator for an enrollment token", cfg.StateDir, StateCertFile)
	case cert == nil:
		// Run enrolls.
	case time.Now().After(cert.Leaf.NotAfter) && id.token != "":
		id.log.Warn("the certificate in StateDir has expired: enrolling again with the enrollment token",
			"state_dir", id.dir, "expired_at", cert.Leaf.NotAfter)
	default:
		if time.Now().After(cert.Leaf.NotAfter) {
			id.log.Warn("the certificate in StateDir appears expired; the gateway will refuse it unless this machine's clock is wrong: "+
				"ask the operator for a new enrollment token", "state_dir", id.dir, "expired_at", cert.Leaf.NotAfter)
		}
		id.use(cert, renewalTime(cert.Leaf), cert.Leaf.NotAfter)
	}
	return id, nil
}

// renewalTime is when a certificate loaded from disk is renewed: after two
// thirds of its lifetime, by the worker's clock, the only one it has for its
// own certificate.
func renewalTime(leaf *x509.Certificate) time.Time {
	return leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) * 2 / 3)
}

// enrolled reports whether the identity has a certificate to present.
func (id *identity) enrolled() bool { return id.tr.cur.Load() != nil }

func (id *identity) state() (workerID string, renewAt, expires time.Time) {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.workerID, id.renewAt, id.expires
}

// use makes cert the one presented from now on: new requests go through a
// new transport, hence new connections, so the gateway sees the new
// certificate at once; requests in flight finish on the old connections,
// which are closed once idle.
func (id *identity) use(cert *tls.Certificate, renewAt, expires time.Time) {
	tr := newWorkerTransport(&tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    id.roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert, nil
		},
	})
	id.tr.swap(tr)
	id.mu.Lock()
	id.workerID, id.renewAt, id.expires = cert.Leaf.Subject.CommonName, renewAt, expires
	id.mu.Unlock()
}

// ensure enrolls unless the identity already has a certificate.
func (id *identity) ensure(ctx context.Context) error {
	if id.enrolled() {
		return nil
	}
	return id.enroll(ctx)
}

// enroll generates a key, sends a CSR for it with the enrollment token over
// TLS without a client certificate, and installs the certificate the gateway
// answers. Transport errors, 429 and 5xx are retried until ctx is done.
func (id *identity) enroll(ctx context.Context) error {
	keyPEM, csrPEM, err := pki.NewCSR(enrollCommonName)
	if err != nil {
		return fmt.Errorf("workerclient: enrollment: %w", err)
	}
	hc := &http.Client{
		Transport: newWorkerTransport(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: id.roots}),
		Timeout:   callTimeout,
	}
	defer hc.CloseIdleConnections()
	client, err := apiclient.NewClientWithResponses(id.gateway, apiclient.WithHTTPClient(hc))
	if err != nil {
		return fmt.Errorf("workerclient: %w", err)
	}
	id.log.Info("enrolling with the gateway", "gateway", id.gateway, "state_dir", id.dir)
	maybeUsed := false // an earlier attempt may have reached the gateway
	policy := callRetry.withLog(func(err error, delay time.Duration) {
		maybeUsed = true
		id.log.Warn("enrollment failed; retrying", "error", err, "retry_in", delay.String())
	})
	policy.permanent = func(err error) bool {
		return errors.As(err, new(*tls.CertificateVerificationError)) || !isTransient(err)
	}
	var issued *apiclient.IssuedCertificate
	var sent time.Time
	err = retry(ctx, policy, func(ctx context.Context) (err error) {
		sent = time.Now()
		issued, err = enrollOnce(ctx, client, id.token, csrPEM)
		return err
	})
	var apiErr *APIError
	var verifyErr *tls.CertificateVerificationError
	isAPI := errors.As(err, &apiErr)
	switch {
	case err == nil:
		if err := id.install(keyPEM, issued, sent); err != nil {
			return err
		}
		workerID, renewAt, _ := id.state()
		id.log.Info("enrolled", "worker_id", workerID, "expires_at", issued.ExpiresAt,
			"renew_in", time.Until(renewAt).Round(time.Second).String())
		return nil
	case isInterrupted(err):
		return fmt.Errorf("workerclient: enrollment: %w", ctx.Err())
	case errors.As(err, &verifyErr):
		return fmt.Errorf("workerclient: enrollment: the gateway's certificate cannot be verified "+
			"(set CAFile to the CA that signed it): %w", err)
	case isAPI && apiErr.Code == problem.EnrollmentTokenInvalid:
		hint := "ask the operator for a new enrollment token"
		if maybeUsed {
			hint += " (an earlier attempt whose answer was lost may have used this one)"
		}
		return fmt.Errorf("%w: %w; %s", ErrEnrollmentTokenInvalid, err, hint)
	case isAPI && apiErr.Code == problem.EnrollmentDisabled:
		return fmt.Errorf("workerclient: enrollment: the gateway has no CA to enroll workers with; "+
			"give the worker a certificate (CertFile and KeyFile) instead: %w", err)
	default:
		return fmt.Errorf("workerclient: enrollment refused: %w", err)
	}
}

func enrollOnce(ctx context.Context, client *apiclient.ClientWithResponses, token string, csrPEM []byte) (*apiclient.IssuedCertificate, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := client.EnrollWithResponse(ctx, apiclient.EnrollRequest{EnrollmentToken: token, CsrPem: string(csrPEM)})
	if err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	if err := checkResponse("enroll", resp.HTTPResponse, resp.Body); err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, fmt.Errorf("enroll: unexpected answer %s", resp.Status())
	}
	return resp.JSON200, nil
}

// renew obtains a certificate for a new key with the current one and
// switches to it.
func (id *identity) renew(ctx context.Context, client *apiclient.ClientWithResponses) error {
	workerID, _, _ := id.state()
	keyPEM, csrPEM, err := pki.NewCSR(cmp.Or(workerID, enrollCommonName))
	if err != nil {
		return fmt.Errorf("renew certificate: %w", err)
	}
	// A renewal under way is not abandoned when Run stops: a lost answer
	// would leave the gateway with a certificate the worker never got.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := client.RenewCertificateWithResponse(ctx, apiclient.RenewRequest{CsrPem: string(csrPEM)})
	if err != nil {
		return fmt.Errorf("renew certificate: %w", err)
	}
	if err := checkResponse("renew certificate", resp.HTTPResponse, resp.Body); err != nil {
		return err
	}
	if resp.JSON200 == nil {
		return fmt.Errorf("renew certificate: unexpected answer %s", resp.Status())
	}
	if err := id.install(keyPEM, resp.JSON200, sent); err != nil {
		return err
	}
	workerID, renewAt, _ := id.state()
	id.log.Info("certificate renewed", "worker_id", workerID, "expires_at", resp.JSON200.ExpiresAt,
		"renew_in", time.Until(renewAt).Round(time.Second).String())
	return nil
}

// install checks that the issued certificate is for keyPEM, writes both to
// the state directory and presents the certificate from now on. Renewal is
// due renew_in_seconds after sent, when the request was sent; the worker's
// clock is not used to read the gateway's times.
func (id *identity) install(keyPEM []byte, issued *apiclient.IssuedCertificate, sent time.Time) error {
	certPEM := []byte(issued.CertificatePem)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("workerclient: the certificate the gateway issued is unusable: %w", err)
	}
	caPEM := []byte(issued.CaCertificatePem)
	if _, err := pki.ParseCertificatePEM(caPEM); err != nil {
		caPEM = nil // keep the last one rather than store something unusable
	}
	if err := writeState(id.dir, keyPEM, certPEM, caPEM); err != nil {
		return err
	}
	id.use(&pair, sent.Add(max(seconds(issued.RenewInSeconds), minRenewDelay)), sent.Add(seconds(issued.ExpiresInSeconds)))
	return nil
}

// loadState returns the certificate and key in dir, or nil when dir holds no
// certificate. It completes a replacement that a crash interrupted (see
// writeState).
func loadState(dir string) (*tls.Certificate, error) {
	certPath, keyPath, nextPath := filepath.Join(dir, StateCertFile), filepath.Join(dir, StateKeyFile), filepath.Join(dir, stateNextKeyFile)
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workerclient: StateDir: %w", err)
	}
	keyPEM, keyErr := os.ReadFile(keyPath)
	if keyErr == nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err == nil {
			_ = os.Remove(nextPath) // from a replacement that never got its certificate written
			return &pair, nil
		}
		keyErr = err
	}
	if nextPEM, err := os.ReadFile(nextPath); err == nil {
		if pair, err := tls.X509KeyPair(certPEM, nextPEM); err == nil {
			if err := os.Rename(nextPath, keyPath); err != nil {
				return nil, fmt.Errorf("workerclient: StateDir: %w", err)
			}
			atomicfile.SyncDir(dir)
			return &pair, nil
		}
	}
	return nil, fmt.Errorf("workerclient: StateDir %s: %s and %s are not a usable pair (remove them, and the worker "+
		"enrolls again with a new enrollment token): %w", dir, StateCertFile, StateKeyFile, keyErr)
}

// writeState replaces the identity in dir. Each file is written atomically
// (temporary file, fsync, rename); the key goes first to worker.key.next and
// is renamed over worker.key only once the certificate is in place, so that
// after a crash at any point loadState finds a matching pair: the old one,
// or the new certificate with worker.key.next.
func writeState(dir string, keyPEM, certPEM, caPEM []byte) error {
	if caPEM != nil {
		path := filepath.Join(dir, StateCAFile)
		if cur, err := os.ReadFile(path); err != nil || !bytes.Equal(cur, caPEM) {
			if err := atomicfile.Write(path, caPEM, 0o644); err != nil {
				return fmt.Errorf("workerclient: %w", err)
			}
		}
	}
	keyPath, nextPath := filepath.Join(dir, StateKeyFile), filepath.Join(dir, stateNextKeyFile)
	if err := atomicfile.Write(nextPath, keyPEM, 0o600); err != nil {
		return fmt.Errorf("workerclient: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, StateCertFile), certPEM, 0o644); err != nil {
		return fmt.Errorf("workerclient: %w", err)
	}
	if err := os.Rename(nextPath, keyPath); err != nil {
		return fmt.Errorf("workerclient: write %s: %w", keyPath, err)
	}
	atomicfile.SyncDir(dir)
	return nil
}

// rotatingTransport sends each request through the transport of the current
// certificate. Switching certificates switches transports, so no request
// after a switch can ride an old connection (with HTTP/2 a busy connection,
// say one carrying a long-poll, would otherwise take every new request and
// keep presenting the old certificate).
type rotatingTransport struct {
	cur atomic.Pointer[http.Transport]

	mu      sync.Mutex
	retired []*http.Transport // the last replaced transports, newest last
}

func (t *rotatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tr := t.cur.Load()
	if tr == nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, errNotEnrolled
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &retiringBody{ReadCloser: resp.Body, t: t, tr: tr}
	return resp, nil
}

// swap makes tr current, closes the idle connections of the transport it
// replaces and remembers it, so that its connections still busy can be
// closed when they are done.
func (t *rotatingTransport) swap(tr *http.Transport) {
	old := t.cur.Swap(tr)
	if old == nil {
		return
	}
	old.CloseIdleConnections()
	t.mu.Lock()
	t.retired = append(t.retired, old)
	var forget []*http.Transport
	if n := len(t.retired) - maxRetiredTransports; n > 0 {
		forget = append(forget, t.retired[:n]...)
		t.retired = append([]*http.Transport(nil), t.retired[n:]...)
	}
	t.mu.Unlock()
	for _, r := range forget {
		r.CloseIdleConnections()
	}
}

// CloseIdleConnections closes the idle connections of the current transport
// and of the replaced ones (http.Client.CloseIdleConnections calls it).
func (t *rotatingTransport) CloseIdleConnections() {
	if tr := t.cur.Load(); tr != nil {
		tr.CloseIdleConnections()
	}
	t.mu.Lock()
	retired := append([]*http.Transport(nil), t.retired...)
	t.mu.Unlock()
	for _, r := range retired {
		r.CloseIdleConnections()
	}
}

// retiringBody closes its transport's idle connections once read, when the
// transport has been replaced meanwhile.
type retiringBody struct {
	io.ReadCloser
	t  *rotatingTransport
	tr *http.Transport
}

func (b *retiringBody) Close() error {
	err := b.ReadCloser.Close()
	if b.t.cur.Load() != b.tr {
		b.tr.CloseIdleConnections()
	}
	return err
}

// ---- renewal ----

// renewLoop renews the certificate when it is due, retrying failures with
// backoff, until ctx is done. A revoked worker stops Run; so does an expired
// certificate, which nothing but a new enrollment token can fix.
func (r *runner) renewLoop(ctx context.Context) {
	id := r.w.id
	policy := renewRetry.withLog(func(err error, delay time.Duration) {
		args := []any{"error", err, "retry_in", delay.String()}
		if _, _, expires := id.state(); time.Now().After(expires) {
			r.log.Error("certificate renewal failed and the certificate has expired; retrying", args...)
		} else {
			r.log.Warn("certificate renewal failed; retrying", args...)
		}
	})
	// Only the gateway's refusal for good ends renewal; anything else may
	// pass while the certificate still works.
	policy.permanent = func(err error) bool { return isRevoked(err) || isCertificateExpired(err) }
	for {
		_, renewAt, _ := id.state()
		if !sleep(ctx, max(time.Until(renewAt), 0)) {
			return
		}
		err := retry(ctx, policy, func(ctx context.Context) error { return id.renew(ctx, r.w.client) })
		switch {
		case err == nil:
		case isRevoked(err):
			r.revoked(err)
			return
		case isCertificateExpired(err):
			r.abort(fmt.Errorf("%w before it was renewed; ask the operator for a new enrollment token "+
				"(the worker enrolls again when its certificate has expired): %w", ErrCertificateExpired, err))
			return
		default: // ctx ended
			return
		}
	}
}

func isCertificateExpired(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == problem.CertificateExpired
}
