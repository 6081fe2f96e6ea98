// Package harness starts real gateways for black-box tests: an in-process
// replica serving TLS on a loopback port, or gateway processes built from
// source, each over its own cloned PostgreSQL database, plus helpers that
// create organizations, workers (with real client certificates) and tasks
// through the public API.
package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/server/objectstore"
	"github.com/worker-gateway/gateway/server/services/sweeper"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Gateway is a running test gateway and the means to drive it.
type Gateway struct {
	URL         string
	DatabaseURL string
	Pool        *pgxpool.Pool
	Store       *store.Store
	Server      *server.Server // nil for process gateways
	CA          *pki.CA
	CAPool      *x509.CertPool
	AdminToken  string
	// Control is a generated client authenticated as an unscoped admin.
	Control *apiclient.ClientWithResponses
	// serverFiles are the TLS certificate and key files of process gateways.
	serverFiles [2]string
	// database is how process gateways reach PostgreSQL, for StartProcess.
	database Database
}

// Options tune a test gateway.
type Options struct {
	Config func(*server.Config)
}

var (
	caOnce      sync.Once
	sharedCA    *pki.CA
	serverTLS   tls.Certificate
	serverIssue *pki.Issued
)

// serverPEM returns the shared server certificate and key as PEM.
func serverPEM() (certPEM, keyPEM []byte) { return serverIssue.CertPEM, serverIssue.KeyPEM }

// testPKI is one CA and server certificate per test binary: issuing keys is
// slow enough to matter across hundreds of tests.
func testPKI(t testing.TB) (*pki.CA, tls.Certificate) {
	caOnce.Do(func() {
		ca, err := pki.NewCA("test CA")
		if err != nil {
			panic(err)
		}
		srv, err := ca.IssueServer([]string{"localhost", "127.0.0.1", "::1"}, 24*time.Hour)
		if err != nil {
			panic(err)
		}
		cert, err := tls.X509KeyPair(srv.CertPEM, srv.KeyPEM)
		if err != nil {
			panic(err)
		}
		sharedCA, serverTLS, serverIssue = ca, cert, srv
	})
	return sharedCA, serverTLS
}

// secretsKeyText is the test gateways' key-encryption key of stored
// secrets (base64 of 32 bytes); process gateways read it from a file.
const secretsKeyText = "dGVzdCBrZXktZW5jcnlwdGlvbiBrZXkgb2YgMzIgYiE="

// SecretsKey is the key-encryption key in-process test gateways seal
// secrets with.
func SecretsKey(t testing.TB) secretbox.KEK {
	k, err := secretbox.ParseKEK(secretsKeyText)
	require.NoError(t, err)
	return k
}

// Logger returns a logger for gateways under test: quiet unless
// GATEWAY_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("GATEWAY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Start runs an in-process gateway over a fresh database, serving real TLS
// on a loopback port, with response validation against openapi.yaml on.
func Start(t testing.TB, opts ...Options) *Gateway {
	t.Helper()
	dbURL := storetest.NewDatabase(t)
	pool, err := store.OpenPool(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	cfg := testConfig(t)
	for _, o := range opts {
		if o.Config != nil {
			o.Config(&cfg)
		}
	}
	srv, err := server.New(pool, cfg)
	require.NoError(t, err)
	ca, cert := testPKI(t)
	g := newGateway(t, serve(t, srv, dbURL, cert), dbURL, pool, ca)
	g.Server = srv
	return g
}

// StartReplica runs one more in-process gateway over g's database: a second
// replica, sharing nothing with g but PostgreSQL (artifacts are stored
// apart). The answer is g as seen through the replica.
func (g *Gateway) StartReplica(t testing.TB) *Gateway {
	t.Helper()
	srv, err := server.New(g.Pool, testConfig(t))
	require.NoError(t, err)
	_, cert := testPKI(t)
	replica := *g
	replica.URL, replica.Server = serve(t, srv, g.DatabaseURL, cert), srv
	return &replica
}

// testConfig is the configuration of an in-process test gateway: logs to
// the test log, responses validated against openapi.yaml, artifacts in a
// temporary directory, the test PKI and secrets key.
func testConfig(t testing.TB) server.Config {
	cfg := server.DefaultConfig()
	cfg.Logger = Logger()
	cfg.ValidateResponses = true
	artifacts, err := objectstore.NewFS(t.TempDir())
	require.NoError(t, err)
	cfg.Artifacts.Backend = artifacts
	cfg.Identity.CA, _ = testPKI(t)
	cfg.Secrets = secretbox.NewKeyring(SecretsKey(t))
	// Tests fire schedules every second; the minimum's own tests set it.
	cfg.ScheduleMinInterval = time.Second
	return cfg
}

// serve runs srv's background work and HTTPS on a loopback port until the
// test ends and returns its base URL, once its LISTEN connection is up.
func serve(t testing.TB, srv *server.Server, dbURL string, cert tls.Certificate) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx, dbURL) })
	wg.Go(func() { _ = srv.Serve(ctx, ln, server.TLSConfig(cert), 5*time.Second) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	WaitFor(t, 10*time.Second, "LISTEN connection", func() bool { return srv.ListenerReady() })
	return "https://" + ln.Addr().String()
}

func newGateway(t testing.TB, url, dbURL string, pool *pgxpool.Pool, ca *pki.CA) *Gateway {
	st := store.New(pool)
	token, _, err := st.CreateAPIToken(context.Background(), store.EveryOrganization(), store.CreateAPITokenParams{Name: "test admin", Permissions: []string{"admin"}})
	require.NoError(t, err)
	caPool := x509.NewCertPool()
	caPool.AddCert(ca.Cert)
	g := &Gateway{URL: url, DatabaseURL: dbURL, Pool: pool, Store: st, CA: ca, CAPool: caPool, AdminToken: token}
	g.Control = g.ControlClient(t, token)
	return g
}

// HTTPClient returns a TLS 1.3 client trusting the test CA, presenting cert
// when given.
func (g *Gateway) HTTPClient(cert *tls.Certificate) *http.Client {
	tc := &tls.Config{RootCAs: g.CAPool, MinVersion: tls.VersionTLS13}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64}, Timeout: 60 * time.Second}
}

// ControlClient returns a generated client that sends the bearer token.
func (g *Gateway) ControlClient(t testing.TB, token string) *apiclient.ClientWithResponses {
	c, err := apiclient.NewClientWithResponses(g.URL,
		apiclient.WithHTTPClient(g.HTTPClient(nil)),
		apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	require.NoError(t, err)
	return c
}

// NewOrganization creates an organization through the API, with the
// unrestricted scope policy: tests that are not about scan scope scan
// loopback freely. NewOrganizationWithPolicy names the policy (nil: the
// API's default, allow_list).
func (g *Gateway) NewOrganization(t testing.TB, name string) uuid.UUID {
	t.Helper()
	unrestricted := apiclient.Unrestricted
	return g.NewOrganizationWithPolicy(t, name, &unrestricted)
}

// NewOrganizationWithPolicy creates an organization with a scope policy;
// nil leaves it to the API's default.
func (g *Gateway) NewOrganizationWithPolicy(t testing.TB, name string, policy *apiclient.ScopePolicy) uuid.UUID {
	t.Helper()
	res, err := g.Control.CreateOrganizationWithResponse(context.Background(),
		apiclient.CreateOrganizationRequest{Name: name, ScopePolicy: policy})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201.Id
}

// Worker is a worker identity with its client certificate.
type Worker struct {
	ID   uuid.UUID
	Cert tls.Certificate
	// CertPEM and KeyPEM are the certificate and key, for worker processes.
	CertPEM, KeyPEM []byte
	HTTP            *http.Client
	Client          *apiclient.ClientWithResponses
	g               *Gateway
}

// NewWorker creates a scanner worker with a fresh client certificate
// registered through the API, assigned to orgs.
func (g *Gateway) NewWorker(t testing.TB, name string, capacity int, orgs ...uuid.UUID) *Worker {
	t.Helper()
	issued, err := g.CA.IssueClient(name, time.Hour)
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	require.NoError(t, err)
	pemText := string(issued.CertPEM)
	typ := apiclient.WorkerType("scanner")
	res, err := g.Control.CreateWorkerWithResponse(context.Background(), apiclient.CreateWorkerRequest{
		Name: name, WorkerType: typ, MaxConcurrentTasks: &capacity, CertificatePem: &pemText})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	w := &Worker{ID: res.JSON201.Id, Cert: cert, CertPEM: issued.CertPEM, KeyPEM: issued.KeyPEM, HTTP: g.HTTPClient(&cert), g: g}
	w.Client, err = apiclient.NewClientWithResponses(g.URL, apiclient.WithHTTPClient(w.HTTP))
	require.NoError(t, err)
	for _, org := range orgs {
		g.Assign(t, org, w.ID)
	}
	return w
}

// Assign assigns a worker to an organization.
func (g *Gateway) Assign(t testing.TB, org, worker uuid.UUID) {
	t.Helper()
	res, err := g.Control.AssignWorkerWithResponse(context.Background(), org, worker)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
}

// TLSConfig returns the worker's TLS client configuration.
func (w *Worker) TLSConfig() *tls.Config {
	return &tls.Config{RootCAs: w.g.CAPool, Certificates: []tls.Certificate{w.Cert}, MinVersion: tls.VersionTLS13}
}

// Runtime starts the Go worker runtime for this worker; it stops (and
// drains) at test cleanup or when the returned stop is called.
func (w *Worker) Runtime(t testing.TB, slots int, handler workerclient.Handler, tune ...func(*workerclient.Config)) (stop func()) {
	t.Helper()
	cfg := workerclient.Config{
		GatewayURL:   w.g.URL,
		TLSConfig:    w.TLSConfig(),
		Slots:        slots,
		WaitSeconds:  5,
		Handler:      handler,
		Logger:       Logger(),
		DrainTimeout: 5 * time.Second,
	}
	for _, f := range tune {
		f(&cfg)
	}
	rt, err := workerclient.NewWorker(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rt.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// TaskSpec is a task to create; zero values take the API's defaults.
type TaskSpec struct {
	Payload              string
	RequiredCapabilities map[string]any
	MaxAttempts          int
	LeaseDurationSeconds int
	Priority             int
	// Retry, when set, is the task's retry backoff.
	Retry *apiclient.RetryPolicy
	// LabelSelector and PinnedWorkerID, when set, restrict which workers
	// may run the task.
	LabelSelector  *apiclient.LabelSelector
	PinnedWorkerID *uuid.UUID
}

// CreateTask creates a scanner_plugin task through the API.
func (g *Gateway) CreateTask(t testing.TB, org uuid.UUID, spec TaskSpec) uuid.UUID {
	t.Helper()
	if spec.Payload == "" {
		spec.Payload = `{"plugin": "echo", "input": {}}`
	}
	payload := apiclient.JSONObject(spec.Payload)
	req := apiclient.CreateTaskRequest{OrganizationId: org, TaskType: "scanner_plugin", Payload: &payload}
	if spec.RequiredCapabilities != nil {
		b := mustJSON(spec.RequiredCapabilities)
		caps := apiclient.Capabilities(b)
		req.RequiredCapabilities = &caps
	}
	if spec.MaxAttempts > 0 {
		req.MaxAttempts = &spec.MaxAttempts
	}
	if spec.LeaseDurationSeconds > 0 {
		req.LeaseDurationSeconds = &spec.LeaseDurationSeconds
	}
	if spec.Priority != 0 {
		req.Priority = &spec.Priority
	}
	req.Retry = spec.Retry
	req.LabelSelector, req.PinnedWorkerId = spec.LabelSelector, spec.PinnedWorkerID
	res, err := g.Control.CreateTaskWithResponse(context.Background(), nil, req)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201.Id
}

// Task reads a task through the API.
func (g *Gateway) Task(t testing.TB, id uuid.UUID) *apiclient.TaskDetail {
	t.Helper()
	res, err := g.Control.GetTaskWithResponse(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return res.JSON200
}

// WaitTaskState waits until a task reaches a state.
func (g *Gateway) WaitTaskState(t testing.TB, id uuid.UUID, state string) *apiclient.TaskDetail {
	t.Helper()
	var last *apiclient.TaskDetail
	WaitFor(t, 30*time.Second, fmt.Sprintf("task %s to become %s", id, state), func() bool {
		last = g.Task(t, id)
		return string(last.State) == state
	})
	return last
}

// ExpireLeases ends every active lease of a task now, as if its worker had
// gone silent, and runs a sweep.
func (g *Gateway) ExpireLeases(t testing.TB, task uuid.UUID) {
	t.Helper()
	_, err := g.Pool.Exec(context.Background(), `UPDATE worker_task_attempts SET lease_expires_at = now() - interval '1 second'
		WHERE task_id = $1 AND status IN ('leased', 'running')`, task)
	require.NoError(t, err)
	if g.Server != nil {
		g.Server.Kick(sweeper.Name)
	}
}

// EditTasks is storetest.EditTasks on the gateway's database.
func (g *Gateway) EditTasks(t testing.TB, update string, args ...any) {
	t.Helper()
	storetest.EditTasks(t, g.Pool, update, args...)
}

// WaitFor polls cond until it holds or the timeout passes: tests wait on
// conditions, never on fixed sleeps.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Process starts the reference worker binary as this worker, against url,
// with extra arguments; it is stopped (SIGTERM, drained) at cleanup.
func (w *Worker) Process(t testing.TB, url string, args ...string) *Process {
	t.Helper()
	return w.ProcessOf(t, Binary(t, "worker"), url, args...)
}

// ProcessOf is Process with another build of the reference worker (the
// previous release's, in tests/upgrade).
func (w *Worker) ProcessOf(t testing.TB, bin, url string, args ...string) *Process {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{"worker.pem": w.CertPEM, "worker-key.pem": w.KeyPEM, "ca.pem": w.g.CA.CertPEM}
	for name, data := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}
	cmd := exec.Command(bin, append([]string{"-gateway", url,
		"-cert", filepath.Join(dir, "worker.pem"), "-key", filepath.Join(dir, "worker-key.pem"),
		"-ca", filepath.Join(dir, "ca.pem"), "-wait", "5"}, args...)...)
	if os.Getenv("GATEWAY_TEST_LOG") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	require.NoError(t, cmd.Start())
	p := &Process{URL: url, Cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() { _ = p.Stop(syscall.SIGTERM) })
	return p
}
