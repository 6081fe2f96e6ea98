package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/internal/pgcluster"
	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store"
)

// stackConfig says which system to benchmark: a private one this process
// starts (the default), or an existing deployment when gatewayURL is set.
type stackConfig struct {
	// External deployment.
	gatewayURL    string
	databaseURL   string
	caFile        string
	token         string
	workerCertDir string
	gatewayPID    int
	postgresData  string
	allowRemote   bool

	// Private stack.
	gatewayBin     string // prebuilt binary; empty: build ./server/cmd/gateway
	gatewayArgs    []string
	pollsPerWorker int
	maxPolls       int
	maxWait        time.Duration // -max-wait of the gateway when above 0
	keep           bool

	logf func(format string, args ...any)
}

// Stack is the system under test and the means to set it up: a pgx pool
// for setup and verification, the store's domain verbs, the CA the gateway's
// certificate chains to, and a producer token.
type Stack struct {
	cfg      stackConfig
	external bool

	GatewayURL  string
	DatabaseURL string
	Pool        *pgxpool.Pool
	Store       *store.Store
	Token       string
	roots       *x509.CertPool
	// issuer signs the client certificates of workers the benchmark
	// registers. The gateway identifies workers by certificate fingerprint
	// and does not check the issuer, so any CA does.
	issuer *pki.CA

	// Private stack only.
	dir         string
	cluster     *pgcluster.Cluster
	gateway     *exec.Cmd
	gatewayDone chan struct{}
	gatewayLog  string
	// launch starts one more gateway process (extra replicas).
	launch func(ctx context.Context, logName string) (*gatewayProc, error)
	// extras are gateway replicas beyond the first (SetReplicas), on the
	// same database; workers are spread over all of them.
	extras     []*gatewayProc
	nextWorker int

	// External deployment only.
	certPairs    []tls.Certificate // from -worker-certs, handed out in order
	nextCert     int
	tokenCreated *uuid.UUID

	closeOnce sync.Once

	ckptOnce sync.Once
	ckptSQL  string
}

// onlineWindow is only used by the store to compute a worker's "online"
// flag in what it returns; any value does.
const onlineWindow = 30 * time.Second

// bringUp prepares the stack. On error everything started so far is torn
// down again.
func bringUp(ctx context.Context, cfg stackConfig) (s *Stack, err error) {
	s = &Stack{cfg: cfg, external: cfg.gatewayURL != ""}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	if s.external {
		err = s.attach(ctx)
	} else {
		err = s.startPrivate(ctx)
	}
	if err != nil {
		return s, err
	}
	if s.issuer == nil {
		if s.issuer, err = pki.NewCA("worker-gateway bench CA"); err != nil {
			return s, err
		}
	}
	return s, nil
}

// startPrivate brings up PostgreSQL, migrations, PKI and a gateway process,
// all under one temporary directory.
func (s *Stack) startPrivate(ctx context.Context) error {
	logf := s.cfg.logf
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if s.dir, err = os.MkdirTemp("", "gateway-bench-"); err != nil {
		return err
	}
	logf("working directory %s", s.dir)

	// Build the gateway while PostgreSQL starts.
	bin := filepath.Join(s.dir, "gateway")
	buildErr := make(chan error, 1)
	go func() {
		if s.cfg.gatewayBin != "" {
			bin = s.cfg.gatewayBin
			buildErr <- nil
			return
		}
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./server/cmd/gateway")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build ./server/cmd/gateway: %w\n%s", err, out)
		}
		buildErr <- err
	}()

	logf("starting private PostgreSQL (durable: default fsync and synchronous_commit)")
	opts := pgcluster.Options{Dir: filepath.Join(s.dir, "postgres"), Durable: true}
	if pgStatements > 0 {
		opts.Settings = append(opts.Settings, "shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track_planning=on")
	}
	if pgSettings != "" {
		opts.Settings = append(opts.Settings, strings.Split(pgSettings, ",")...)
	}
	s.cluster, err = pgcluster.Start(ctx, opts)
	if err != nil {
		return errors.Join(err, <-buildErr)
	}
	if err := s.cluster.CreateDatabase(ctx, "gateway", ""); err != nil {
		return errors.Join(err, <-buildErr)
	}
	s.DatabaseURL = s.cluster.URL("gateway")
	if err := migrations.UpAll(ctx, s.DatabaseURL); err != nil {
		return errors.Join(err, <-buildErr)
	}
	if pgStatements > 0 {
		if err := createExtension(ctx, s.DatabaseURL, "pg_stat_statements"); err != nil {
			return errors.Join(err, <-buildErr)
		}
	}
	if err := <-buildErr; err != nil {
		return err
	}

	// PKI: one CA signs the server certificate and the workers' certificates.
	ca, err := pki.NewCA("worker-gateway bench CA")
	if err != nil {
		return err
	}
	srv, err := ca.IssueServer([]string{"127.0.0.1", "localhost"}, 24*time.Hour)
	if err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(s.dir, "server.pem"), filepath.Join(s.dir, "server-key.pem")
	if err := srv.WriteFiles(certFile, keyFile); err != nil {
		return err
	}
	s.issuer = ca
	s.roots = x509.NewCertPool()
	s.roots.AddCert(ca.Cert)

	if err := s.openPool(ctx); err != nil {
		return err
	}
	token, _, err := s.Store.CreateAPIToken(ctx, store.EveryOrganization(), store.CreateAPITokenParams{Name: "bench producer", Permissions: []string{"producer"}})
	if err != nil {
		return err
	}
	s.Token = token
	return s.startGateway(ctx, bin, certFile, keyFile)
}

// gatewayProc is one `gateway serve` process of the private stack.
type gatewayProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	url  string
	log  string
}

// startGateway runs the first `gateway serve` process and keeps what is
// needed to start more (SetReplicas).
func (s *Stack) startGateway(ctx context.Context, bin, certFile, keyFile string) error {
	s.launch = func(ctx context.Context, logName string) (*gatewayProc, error) {
		return s.launchGateway(ctx, bin, certFile, keyFile, filepath.Join(s.dir, logName))
	}
	p, err := s.launch(ctx, "gateway.log")
	if err != nil {
		return err
	}
	s.gateway, s.gatewayDone, s.GatewayURL, s.gatewayLog = p.cmd, p.done, p.url, p.log
	return nil
}

// launchGateway runs `gateway serve` as a separate process on a free
// loopback port and waits until /readyz answers 200.
func (s *Stack) launchGateway(ctx context.Context, bin, certFile, keyFile, logPath string) (*gatewayProc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor
	for attempt := 1; ; attempt++ {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return nil, err
		}
		args := []string{"serve",
			"-database-url", s.DatabaseURL,
			"-listen", addr,
			"-tls-cert", certFile, "-tls-key", keyFile,
			"-polls-per-worker", strconv.Itoa(s.cfg.pollsPerWorker),
			"-max-polls", strconv.Itoa(s.cfg.maxPolls),
			"-drain", "5s",
			"-artifacts-dir", s.ArtifactsDir(),
		}
		if s.cfg.maxWait > 0 {
			args = append(args, "-max-wait", s.cfg.maxWait.String())
		}
		args = append(args, s.cfg.gatewayArgs...)
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{
			// Its own process group: a terminal's Ctrl-C reaches only the
			// benchmark, which then stops the gateway in order.
			Setpgid: true,
			// Should the benchmark be killed outright, the gateway dies too.
			Pdeathsig: syscall.SIGKILL,
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start gateway: %w", err)
		}
		p := &gatewayProc{cmd: cmd, done: make(chan struct{}), url: "https://" + addr, log: logPath}
		go func() { _ = cmd.Wait(); close(p.done) }()
		s.cfg.logf("gateway process %d serving %s (extra flags: %q)", cmd.Process.Pid, p.url, s.cfg.gatewayArgs)
		err = s.waitReady(ctx, p.url, p.done, 30*time.Second)
		if err == nil {
			return p, nil
		}
		exited := false
		select {
		case <-p.done:
			exited = true
		default:
		}
		logTail := tailFile(logPath, 20)
		if exited && attempt < 3 && strings.Contains(logTail, "address already in use") {
			continue // someone took the port between choosing and binding
		}
		return nil, fmt.Errorf("%w\ngateway log (%s):\n%s", err, logPath, logTail)
	}
}

// SetReplicas runs n gateway processes on the private stack's database:
// it starts or stops extra replicas beside the first. Workers registered
// afterwards are spread over all of them, round-robin.
func (s *Stack) SetReplicas(ctx context.Context, n int) error {
	if s.launch == nil {
		return errors.New("replicas need the private stack")
	}
	for len(s.extras) > n-1 {
		last := s.extras[len(s.extras)-1]
		s.extras = s.extras[:len(s.extras)-1]
		stopGateway(last.cmd, last.done, s.cfg.logf)
	}
	for len(s.extras) < n-1 {
		p, err := s.launch(ctx, fmt.Sprintf("gateway-%d.log", len(s.extras)+2))
		if err != nil {
			return err
		}
		s.extras = append(s.extras, p)
	}
	s.nextWorker = 0
	return nil
}

// GatewayURLs is every replica's address, the first one's first.
func (s *Stack) GatewayURLs() []string {
	urls := []string{s.GatewayURL}
	for _, p := range s.extras {
		urls = append(urls, p.url)
	}
	return urls
}

// workerBase is the replica the next registered worker talks to.
func (s *Stack) workerBase() string {
	urls := s.GatewayURLs()
	base := urls[s.nextWorker%len(urls)]
	s.nextWorker++
	return base
}

// gatewayPIDs is every replica's process id (the first one's first).
func (s *Stack) gatewayPIDs() []int {
	pids := []int{}
	if pid := s.GatewayPID(); pid > 0 {
		pids = append(pids, pid)
	}
	for _, p := range s.extras {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return pids
}

// stopGateway stops a gateway process in order (SIGTERM), or kills it
// after 15 s.
func stopGateway(cmd *exec.Cmd, done chan struct{}, logf func(string, ...any)) {
	logf("stopping gateway %d (SIGTERM)", cmd.Process.Pid)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		logf("gateway did not stop in 15 s; killing it")
		_ = cmd.Process.Kill()
		<-done
	}
}

// waitReady polls /readyz: database reachable, schema current, LISTEN up.
func (s *Stack) waitReady(ctx context.Context, url string, done chan struct{}, timeout time.Duration) error {
	client := &http.Client{Transport: newTransport(s.roots, nil), Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if done != nil {
			select {
			case <-done:
				return errors.New("gateway exited during start-up")
			default:
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
		res, err := client.Do(req)
		if err == nil {
			drainClose(res)
			if res.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/readyz answered %d", res.StatusCode)
		}
		last = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("gateway not ready after %s: %w", timeout, last)
}

// attach prepares a benchmark of an existing deployment: nothing is started.
func (s *Stack) attach(ctx context.Context) error {
	if s.cfg.databaseURL == "" || s.cfg.caFile == "" {
		return errors.New("-gateway needs -database and -ca as well")
	}
	if !s.cfg.allowRemote {
		for _, u := range []string{s.cfg.gatewayURL, s.cfg.databaseURL} {
			if err := requireLoopback(u); err != nil {
				return fmt.Errorf("%w (pass -allow-remote to benchmark a remote deployment)", err)
			}
		}
	}
	s.GatewayURL = strings.TrimRight(s.cfg.gatewayURL, "/")
	s.DatabaseURL = s.cfg.databaseURL
	caPEM, err := os.ReadFile(s.cfg.caFile)
	if err != nil {
		return err
	}
	s.roots = x509.NewCertPool()
	if !s.roots.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s holds no PEM certificate", s.cfg.caFile)
	}
	if s.cfg.workerCertDir != "" {
		if s.certPairs, err = loadCertPairs(s.cfg.workerCertDir); err != nil {
			return err
		}
	}
	if err := s.openPool(ctx); err != nil {
		return err
	}
	s.Token = s.cfg.token
	if s.Token == "" {
		// A producer token just for this run, revoked at the end.
		token, id, err := s.Store.CreateAPIToken(ctx, store.EveryOrganization(), store.CreateAPITokenParams{
			Name: "bench producer", Permissions: []string{"producer"}, ExpiresIn: 24 * time.Hour})
		if err != nil {
			return err
		}
		s.Token, s.tokenCreated = token, &id
	}
	return s.waitReady(ctx, s.GatewayURL, nil, 10*time.Second)
}

func (s *Stack) openPool(ctx context.Context) error {
	cfg, err := pgxpool.ParseConfig(s.DatabaseURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = 4 // setup, verification and statistics only
	if s.Pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	if err := s.Pool.Ping(ctx); err != nil {
		return err
	}
	s.Store = store.New(s.Pool)
	return nil
}

// GatewayPID is the gateway's process id, or 0 when unknown.
func (s *Stack) GatewayPID() int {
	if s.gateway != nil && s.gateway.Process != nil {
		return s.gateway.Process.Pid
	}
	return s.cfg.gatewayPID
}

// ArtifactsDir is the private gateway's fs artifact directory (object keys
// are paths below it), or "" for an existing deployment.
func (s *Stack) ArtifactsDir() string {
	if s.external || s.dir == "" {
		return ""
	}
	return filepath.Join(s.dir, "artifacts")
}

// PostmasterPID is the PostgreSQL postmaster's process id, or 0 when unknown.
func (s *Stack) PostmasterPID() int {
	dataDir := s.cfg.postgresData
	if s.cluster != nil {
		dataDir = s.cluster.DataDir()
	}
	if dataDir == "" {
		return 0
	}
	pid, err := postmasterPID(dataDir)
	if err != nil {
		return 0
	}
	return pid
}

// Producer returns a producer (task creation with the stack's token) whose
// connection is open. Close it with close().
func (s *Stack) Producer(ctx context.Context) (*producer, error) {
	p := newProducer(s.GatewayURL, s.Token, s.roots)
	if err := p.warm(ctx); err != nil {
		p.close()
		return nil, fmt.Errorf("connect producer: %w", err)
	}
	return p, nil
}

// NewOrganization creates an organization for one scenario, so that its
// tasks and verification are isolated from anything else in the database.
func (s *Stack) NewOrganization(ctx context.Context, scenario string) (uuid.UUID, error) {
	o, err := s.Store.CreateOrganization(ctx, store.EveryOrganization(), fmt.Sprintf("bench %s %s", scenario, time.Now().Format(time.RFC3339)), store.ScopePolicyUnrestricted)
	return o.ID, err
}

// NewWorkers registers n scanner workers, each with its own client
// certificate and HTTP connection, able to hold capacity tasks at once, and
// assigns them to org. Workers that already exist (-worker-certs) need at
// least minCapacity. With -worker-certs the given certificates are used
// (registering those not known yet); they must not serve any other
// organization, or the benchmark would complete real tasks.
func (s *Stack) NewWorkers(ctx context.Context, prefix string, n, capacity, minCapacity int, org uuid.UUID) ([]*benchWorker, error) {
	workers := make([]*benchWorker, 0, n)
	s.nextCert = 0 // the previous scenario released its workers
	for i := range n {
		name := fmt.Sprintf("bench-%s-%d", prefix, i)
		w, err := s.newWorker(ctx, name, capacity, minCapacity)
		if err != nil {
			s.ReleaseWorkers(ctx, org, workers)
			return nil, fmt.Errorf("worker %s: %w", name, err)
		}
		workers = append(workers, w)
		if _, err := s.Store.AssignWorker(ctx, store.EveryOrganization(), org, w.ID); err != nil {
			s.ReleaseWorkers(ctx, org, workers)
			return nil, fmt.Errorf("assign %s: %w", name, err)
		}
	}
	return workers, nil
}

// InsertEchoTasks queues n echo tasks in org straight in SQL, each leased
// for leaseDuration seconds: one per worker of a scenario whose measured
// calls need a lease that outlives the run, without heartbeats.
func (s *Stack) InsertEchoTasks(ctx context.Context, org uuid.UUID, n, leaseDuration int) error {
	if _, err := s.Pool.Exec(ctx, `
		WITH created AS (
			INSERT INTO worker_tasks (task_type, organization_id, payload, lease_duration_seconds)
			SELECT 'scanner_plugin', $1, '{"plugin":"echo"}'::jsonb, $3 FROM generate_series(1, $2)
			RETURNING *)
		`+store.EnqueueSQL("created"),
		org, n, leaseDuration); err != nil {
		return fmt.Errorf("insert tasks: %w", err)
	}
	return nil
}

// AssignWorkers assigns workers (from NewWorkers) to one more organization.
func (s *Stack) AssignWorkers(ctx context.Context, org uuid.UUID, workers []*benchWorker) error {
	for _, w := range workers {
		if _, err := s.Store.AssignWorker(ctx, store.EveryOrganization(), org, w.ID); err != nil {
			return fmt.Errorf("assign %s: %w", w.Name, err)
		}
	}
	return nil
}

func (s *Stack) newWorker(ctx context.Context, name string, capacity, minCapacity int) (*benchWorker, error) {
	if s.certPairs != nil {
		return s.existingWorker(ctx, name, capacity, minCapacity)
	}
	issued, err := s.issuer.IssueClient(name, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	if err != nil {
		return nil, err
	}
	w, err := s.Store.CreateWorker(ctx, store.EveryOrganization(), store.CreateWorkerParams{
		Name: name, WorkerType: "scanner", MaxConcurrentTasks: capacity,
		CertificateFingerprint: pki.Fingerprint(issued.Cert), CertificateSubject: issued.Cert.Subject.String(),
	}, onlineWindow)
	if err != nil {
		return nil, err
	}
	return newBenchWorker(s.workerBase(), w.ID, name, s.roots, cert, true), nil
}

// existingWorker takes the next certificate from -worker-certs.
func (s *Stack) existingWorker(ctx context.Context, name string, capacity, minCapacity int) (*benchWorker, error) {
	if s.nextCert >= len(s.certPairs) {
		return nil, fmt.Errorf("-worker-certs holds %d certificate pairs; the scenario needs more", len(s.certPairs))
	}
	cert := s.certPairs[s.nextCert]
	s.nextCert++
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, err
	}
	fp := pki.Fingerprint(leaf)
	id, err := s.Store.WorkerByFingerprint(ctx, fp)
	if errors.Is(err, store.ErrNotFound) {
		w, err := s.Store.CreateWorker(ctx, store.EveryOrganization(), store.CreateWorkerParams{
			Name: name, WorkerType: "scanner", MaxConcurrentTasks: capacity,
			CertificateFingerprint: fp, CertificateSubject: leaf.Subject.String(),
		}, onlineWindow)
		if err != nil {
			return nil, err
		}
		// Left enabled at the end (only unassigned), so the next run can
		// use the same certificate again.
		return newBenchWorker(s.GatewayURL, w.ID, name, s.roots, cert, false), nil
	}
	if err != nil {
		return nil, err
	}
	w, err := s.Store.GetWorker(ctx, store.EveryOrganization(), id.ID, onlineWindow)
	switch {
	case err != nil:
		return nil, err
	case !w.Enabled || w.RevokedAt != nil:
		return nil, fmt.Errorf("certificate %s belongs to worker %s, which is disabled or revoked", leaf.Subject, w.ID)
	case w.WorkerType != "scanner":
		return nil, fmt.Errorf("worker %s is of type %q, the benchmark needs scanner workers", w.ID, w.WorkerType)
	case len(w.OrganizationIDs) > 0:
		return nil, fmt.Errorf("worker %s serves other organizations; benchmark workers must be dedicated", w.ID)
	case w.MaxConcurrentTasks < minCapacity:
		return nil, fmt.Errorf("worker %s has max_concurrent_tasks %d, the scenario needs %d", w.ID, w.MaxConcurrentTasks, minCapacity)
	}
	return newBenchWorker(s.GatewayURL, w.ID, w.Name, s.roots, cert, false), nil
}

// ReleaseWorkers ends a scenario's workers: their assignment to org is
// removed (cancelling anything still leased), workers the benchmark
// registered are disabled, and their connections are closed.
func (s *Stack) ReleaseWorkers(ctx context.Context, org uuid.UUID, workers []*benchWorker) {
	ctx = context.WithoutCancel(ctx)
	for _, w := range workers {
		w.close()
		if _, err := s.Store.UnassignWorker(ctx, store.EveryOrganization(), org, w.ID, true, "benchmark finished"); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.cfg.logf("unassign %s: %v", w.Name, err)
		}
		if w.created {
			if _, err := s.Store.UpdateWorker(ctx, store.EveryOrganization(), w.ID, store.UpdateWorkerParams{Enabled: ptr(false)}, onlineWindow); err != nil {
				s.cfg.logf("disable %s: %v", w.Name, err)
			}
		}
	}
}

// Close tears everything down: the gateway gets SIGTERM (SIGKILL after
// 15 s), PostgreSQL a fast shutdown, and the temporary directory is removed
// (unless -keep). For an external deployment it only revokes the token it
// created. Safe to call more than once.
func (s *Stack) Close() {
	s.closeOnce.Do(func() {
		logf := s.cfg.logf
		if s.tokenCreated != nil && s.Pool != nil {
			if _, err := s.Pool.Exec(context.Background(), `UPDATE api_tokens SET revoked_at = now() WHERE id = $1`, *s.tokenCreated); err != nil {
				logf("revoke benchmark token: %v", err)
			}
		}
		if s.Pool != nil {
			s.Pool.Close()
		}
		for _, p := range s.extras {
			stopGateway(p.cmd, p.done, logf)
		}
		if s.gateway != nil {
			stopGateway(s.gateway, s.gatewayDone, logf)
		}
		if s.cluster != nil {
			logf("stopping PostgreSQL")
			if err := s.cluster.Stop(); err != nil {
				logf("stop PostgreSQL: %v", err)
			}
		}
		if s.dir != "" {
			if s.cfg.keep {
				logf("kept %s (gateway.log, postgres/postgres.log, data directory)", s.dir)
			} else if err := os.RemoveAll(s.dir); err != nil {
				logf("remove %s: %v", s.dir, err)
			}
		}
	})
}

// moduleRoot finds the gateway module's root from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/worker-gateway/gateway\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run the benchmark from inside the gateway repository (go run ./scripts/bench)")
		}
		dir = parent
	}
}

// freeLoopbackAddr picks a free TCP port on 127.0.0.1.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// requireLoopback refuses URLs that point anywhere but this machine.
func requireLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s is not a loopback address", host)
}

// loadCertPairs reads NAME.pem + NAME-key.pem pairs from dir, in name order.
func loadCertPairs(dir string) ([]tls.Certificate, error) {
	keys, err := filepath.Glob(filepath.Join(dir, "*-key.pem"))
	if err != nil {
		return nil, err
	}
	sort.Strings(keys)
	var pairs []tls.Certificate
	for _, key := range keys {
		certFile := strings.TrimSuffix(key, "-key.pem") + ".pem"
		if b := filepath.Base(certFile); b == "ca.pem" || b == "server.pem" {
			continue // a dev PKI directory also holds the CA and server pairs
		}
		pair, err := tls.LoadX509KeyPair(certFile, key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", certFile, err)
		}
		pairs = append(pairs, pair)
	}
	if len(pairs) == 0 {
		return nil, fmt.Errorf("no NAME.pem + NAME-key.pem pairs in %s", dir)
	}
	return pairs, nil
}

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// createExtension creates a PostgreSQL extension in the database at url.
func createExtension(ctx context.Context, url, name string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS "+pgx.Identifier{name}.Sanitize())
	return err
}
