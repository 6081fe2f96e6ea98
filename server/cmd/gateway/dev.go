//go:build devstack

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/internal/envfile"
	"github.com/worker-gateway/gateway/internal/pgcluster"
	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store"
)

// devCommand starts a complete development system in the foreground: a
// private PostgreSQL data directory, migrations, a dev CA and certificates,
// a demo organization, worker and admin token, the gateway, and the
// reference worker. It writes $STATE_DIR/env for scripts and people, and
// stops everything it started — PostgreSQL included — when interrupted.
func devCommand(a *cli) *command {
	return &command{name: "dev", short: devShort, setup: func(fs *flagSet) execFunc {
		d := devFlags(fs, a.level)
		return func(ctx context.Context, _ []string) error {
			d.serve.s3Credentials()
			a.useLogFormat(&d.serve.logFormat)
			return runDev(ctx, d.serve, d.stateDir, d.workerBin, a.logger)
		}
	}}
}

func runDev(ctx context.Context, c *serveConfig, stateDir, workerBin string, logger *slog.Logger) error {
	dir, err := filepath.Abs(stateDir)
	if err != nil {
		return err
	}
	// Taken before anything else: a second `gateway dev` on this directory
	// must leave the first's PostgreSQL and env file alone.
	lock, err := lockDevState(dir)
	if err != nil {
		return err
	}
	defer lock.release()

	logger.Info("starting private PostgreSQL", "dir", filepath.Join(dir, "postgres"))
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(dir, "postgres"), Durable: true,
		Logf: func(f string, a ...any) { logger.Info(fmt.Sprintf(f, a...)) }})
	if err != nil {
		return err
	}
	defer func() {
		logger.Info("stopping PostgreSQL")
		if err := cluster.Stop(); err != nil {
			logger.Error("stop PostgreSQL", "error", err.Error())
		}
	}()
	if err := cluster.CreateDatabase(ctx, "gateway", ""); err != nil && !isDuplicateDatabase(err) {
		return err
	}
	c.databaseURL = cluster.URL("gateway")
	if err := migrations.UpAll(ctx, c.databaseURL); err != nil {
		return err
	}

	certs := devPKI{filepath.Join(dir, "pki")}
	if err := issueDevCerts(certs.dir, "demo-worker", []string{"localhost", "127.0.0.1", "::1"}); err != nil {
		return err
	}
	c.tlsCert, c.tlsKey = certs.ServerCert(), certs.ServerKey()
	if c.artifacts.dir == "" {
		c.artifacts.dir = filepath.Join(dir, "artifacts")
	}
	if c.caCert == "" {
		c.caCert, c.caKey = certs.CACert(), certs.CAKey()
	}
	if c.secretsKeys.keyFile == "" && os.Getenv("GATEWAY_SECRETS_KEY") == "" {
		if c.secretsKeys.keyFile, err = ensureDevSecretsKey(filepath.Join(dir, "secrets.key")); err != nil {
			return err
		}
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	gatewayURL := "https://" + ln.Addr().String()
	if c.server.Artifacts.PublicURL == "" {
		c.server.Artifacts.PublicURL = gatewayURL
	}
	targetAddr, stopTarget, err := startDemoTarget(logger)
	if err != nil {
		return err
	}
	defer stopTarget()
	envFile := filepath.Join(dir, "env")
	latePort, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	demo, err := seedDemo(ctx, c.databaseURL, certs, []string{portOf(targetAddr), portOf(ln.Addr().String()), latePort}, previousToken(envFile))
	if err != nil {
		return err
	}
	vars := envfile.Vars{
		{Key: "GATEWAY_URL", Value: gatewayURL},
		{Key: "GATEWAY_TOKEN", Value: demo.token},
		{Key: "ORGANIZATION_ID", Value: demo.organization},
		{Key: "WORKER_ID", Value: demo.worker},
		{Key: "CA_CERT", Value: certs.CACert()},
		{Key: "WORKER_CERT", Value: certs.WorkerCert()},
		{Key: "WORKER_KEY", Value: certs.WorkerKey()},
		{Key: "MANUAL_WORKER_ID", Value: demo.manualWorker},
		{Key: "MANUAL_WORKER_CERT", Value: certs.ManualWorkerCert()},
		{Key: "MANUAL_WORKER_KEY", Value: certs.ManualWorkerKey()},
		{Key: "DATABASE_URL", Value: c.databaseURL},
	}
	if err := writeEnvFile(envFile, vars); err != nil {
		return err
	}
	if err := lock.record(devRecord{PID: os.Getpid(), URL: gatewayURL, EnvFile: envFile}); err != nil {
		return err
	}

	var wg sync.WaitGroup
	serveCtx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	serveErr := make(chan error, 1)
	wg.Go(func() { serveErr <- serve(serveCtx, c, ln, logger) })

	if workerBin != "" {
		wg.Go(func() { runChildWorker(serveCtx, workerBin, vars, logger) })
	}
	wg.Go(func() { demoRescan(serveCtx, c.databaseURL, demo, latePort, logger) })
	fmt.Fprint(os.Stderr, devBanner(gatewayURL, envFile, certs.CACert(), workerBin != ""))

	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	stopServe()
	wg.Wait()
	return err
}

// devBanner is what `make run` prints once everything is up: where the
// gateway is and the first steps. It names files, never their secrets.
func devBanner(gatewayURL, envFile, caFile string, worker bool) string {
	env, ca := shortPath(envFile), shortPath(caFile)
	binDir := "<dir of gateway>"
	if exe, err := os.Executable(); err == nil {
		binDir = shortPath(filepath.Dir(exe))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nWorker Gateway is running at %s", gatewayURL)
	if worker {
		b.WriteString(", with the reference worker")
	}
	fmt.Fprintf(&b, `

Next steps:
  Console:                %[1]s/ui/
      Sign in with the admin token (GATEWAY_TOKEN in %[3]s).
  API docs (Swagger UI):  %[1]s/docs/
      The certificate is from the dev CA %[2]s: import it into your browser's
      certificate authorities, or use curl --cacert %[2]s %[1]s/readyz
  Settings (URL, admin token, certificates): %[3]s
  The binaries are in %[4]s; list the demo tasks:
      . %[3]s && %[4]s/gateway ctl tasks list
  Walkthrough: README.md, "One task by hand, with curl"

Press Ctrl-C to stop everything.

`, gatewayURL, ca, env, binDir)
	return b.String()
}

func isDuplicateDatabase(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DuplicateDatabase
}

type demoIDs struct {
	organization, worker, manualWorker, token string
	// scan is the demo scan seeded, firstScan the one created by this run.
	scan      store.CreateScanParams
	firstScan uuid.UUID
}

// ensureWorker finds the worker registered with a certificate, or creates
// it, and assigns it to the organization.
func ensureWorker(ctx context.Context, st *store.Store, name, certFile string, org uuid.UUID) (string, error) {
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		return "", err
	}
	cert, err := pki.ParseCertificatePEM(pemBytes)
	if err != nil {
		return "", err
	}
	identity, err := st.WorkerByFingerprint(ctx, pki.Fingerprint(cert))
	if errors.Is(err, store.ErrNotFound) {
		w, err := st.CreateWorker(ctx, store.EveryOrganization(), store.CreateWorkerParams{Name: name, WorkerType: "scanner", MaxConcurrentTasks: 4,
			CertificateFingerprint: pki.Fingerprint(cert), CertificateSubject: cert.Subject.String()}, time.Minute)
		if err != nil {
			return "", err
		}
		identity.ID = w.ID
	} else if err != nil {
		return "", err
	}
	if _, err := st.AssignWorker(ctx, store.EveryOrganization(), org, identity.ID); err != nil {
		return "", err
	}
	return identity.ID.String(), nil
}

// seedDemo creates (or finds, on a restart) the demo organization and
// worker, assigns them, keeps the previous run's admin token while the
// database still accepts it (or mints one), and queues a few demo
// tasks and a demo scan of loopback (the demo target and the gateway
// itself, on ports) so the reference worker has something to do.
func seedDemo(ctx context.Context, databaseURL string, certs devPKI, ports []string, oldToken string) (demoIDs, error) {
	pool, err := store.OpenPool(ctx, databaseURL)
	if err != nil {
		return demoIDs{}, err
	}
	defer pool.Close()
	st := store.New(pool)

	var ids demoIDs
	err = pool.QueryRow(ctx, `SELECT id::text FROM organizations WHERE name = 'Demo' ORDER BY created_at LIMIT 1`).Scan(&ids.organization)
	if err != nil {
		o, err := st.CreateOrganization(ctx, store.EveryOrganization(), "Demo", store.ScopePolicyAllowList)
		if err != nil {
			return demoIDs{}, err
		}
		ids.organization = o.ID.String()
	}
	orgID := uuid.MustParse(ids.organization)
	ids.worker, err = ensureWorker(ctx, st, "demo-worker", certs.WorkerCert(), orgID)
	if err != nil {
		return demoIDs{}, err
	}
	ids.manualWorker, err = ensureWorker(ctx, st, "manual-worker", certs.ManualWorkerCert(), orgID)
	if err != nil {
		return demoIDs{}, err
	}
	if ids.token, err = devAdminToken(ctx, st, oldToken); err != nil {
		return demoIDs{}, err
	}
	for _, payload := range []string{
		`{"plugin": "echo", "input": {"message": "hello from make run"}}`,
		`{"plugin": "sleep", "input": {"seconds": 2}}`,
	} {
		if _, _, err := st.CreateTask(ctx, store.EveryOrganization(), store.CreateTaskParams{OrganizationID: orgID, TaskType: "scanner_plugin",
			Payload: []byte(payload), RequiredCapabilities: []byte(`{}`)}); err != nil {
			return demoIDs{}, err
		}
	}
	// The demo organization may scan loopback only (localhost resolves to
	// 127.0.0.1 and ::1); the demo workers and the README's examples report
	// names under the reserved .example and .internal domains.
	for _, t := range []store.ScopeTargetParams{
		{Kind: store.ScopeCIDR, Value: "127.0.0.0/8", Note: "loopback"},
		{Kind: store.ScopeIP, Value: "::1", Note: "loopback"},
		{Kind: store.ScopeDomain, Value: "localhost", Note: "loopback"},
		{Kind: store.ScopeDomain, Value: "example", IncludeSubdomains: true, Note: "names the demo workers report (RFC 2606)"},
		{Kind: store.ScopeDomain, Value: "internal", IncludeSubdomains: true, Note: "private-use names the README's examples report"},
	} {
		if _, _, err := st.AddScopeTarget(ctx, store.EveryOrganization(), orgID, t); err != nil {
			return demoIDs{}, err
		}
	}
	ids.scan = store.CreateScanParams{OrganizationID: orgID, Targets: []string{"localhost"}, Plugins: []store.ScanPlugin{
		{Name: "dns-resolve"},
		{Name: "tcp-connect", Input: []byte(`{"ports": [` + strings.Join(ports, ", ") + `], "timeout_ms": 1000}`)},
		{Name: "http-probe"},
	}}
	first, _, err := st.CreateScan(ctx, store.EveryOrganization(), ids.scan)
	if err != nil {
		return demoIDs{}, err
	}
	ids.firstScan = first.ID
	if err := ensureDemoSchedule(ctx, st, pool, orgID, ports); err != nil {
		return demoIDs{}, err
	}
	return ids, nil
}

// freeLoopbackPort is a loopback port nothing listens on (yet): the demo
// opens it between its two scans.
func freeLoopbackPort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := portOf(ln.Addr().String())
	return port, ln.Close()
}

// demoRescan shows what changed between two scans: once the demo scan has
// finished, it opens latePort (a small HTTP server) and scans loopback
// again with the same definition. The second scan's changes
// (`gateway ctl scans changes ID`) show the port opened, and its URL
// appeared.
func demoRescan(ctx context.Context, databaseURL string, demo demoIDs, latePort string, logger *slog.Logger) {
	log := logger.With("component", "demo")
	pool, err := store.OpenPool(ctx, databaseURL)
	if err != nil {
		log.Warn("demo rescan: no database", "error", err)
		return
	}
	defer pool.Close()
	st := store.New(pool)
	// The reference worker runs the first scan; a demo may poll for it.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		scan, err := st.GetScan(ctx, store.EveryOrganization(), demo.firstScan)
		if err != nil {
			log.Warn("demo rescan: first scan unreadable", "error", err)
			return
		}
		if scan.State == "completed" || scan.State == "failed" || scan.State == "cancelled" {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", latePort))
	if err != nil {
		log.Warn("demo rescan: the late port is taken", "port", latePort, "error", err)
		return
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "<!doctype html><title>opened between scans</title>")
	})}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	second, _, err := st.CreateScan(ctx, store.EveryOrganization(), demo.scan)
	if err != nil {
		log.Warn("demo rescan: second scan refused", "error", err)
		return
	}
	log.Info("demo: port opened between two scans of loopback; see what changed with `gateway ctl scans changes "+second.ID.String()+"`",
		"port", latePort, "first_scan", demo.firstScan, "second_scan", second.ID)
	<-ctx.Done()
}

// demoScheduleName names the demo schedule, found by it on a restart.
const demoScheduleName = "demo: loopback scan every minute"

// ensureDemoSchedule creates, once, a schedule that scans loopback (the
// demo's listening ports) every minute, for the reference worker to run.
func ensureDemoSchedule(ctx context.Context, st *store.Store, pool *pgxpool.Pool, org uuid.UUID, ports []string) error {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schedules WHERE organization_id = $1 AND name = $2)`,
		org, demoScheduleName).Scan(&exists); err != nil || exists {
		return err
	}
	_, err := st.CreateSchedule(ctx, store.EveryOrganization(), org, store.ScheduleParams{Name: demoScheduleName,
		Timing: store.ScheduleTiming{Cron: "* * * * *"},
		Definition: store.ScheduleDefinition{Kind: store.ScheduleScan, Scan: &store.ScheduledScan{
			Targets: []string{"127.0.0.1"},
			Plugins: []store.ScheduledPlugin{{Name: "tcp-connect",
				Input: []byte(`{"ports": [` + strings.Join(ports, ", ") + `], "timeout_ms": 1000}`)}}}}})
	return err
}

// devAdminToken returns oldToken when the database still authenticates it as
// an unrestricted admin token, so that each run does not pile up another;
// otherwise (revoked, expired, a new database) it mints one.
func devAdminToken(ctx context.Context, st *store.Store, oldToken string) (string, error) {
	if oldToken != "" {
		p, err := st.AuthenticateToken(ctx, oldToken)
		switch {
		case err == nil && p.OrganizationID == nil && slices.Contains(p.Permissions, "admin"):
			return oldToken, nil
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return "", err
		}
	}
	token, _, err := st.CreateAPIToken(ctx, store.EveryOrganization(), store.CreateAPITokenParams{Name: "dev admin", Permissions: []string{"admin"}})
	return token, err
}

// previousToken is GATEWAY_TOKEN from the env file an earlier run wrote, or
// "" when there is none.
func previousToken(envFile string) string {
	vars, err := envfile.Read(envFile)
	if err != nil {
		return ""
	}
	return vars.Get("GATEWAY_TOKEN")
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// writeEnvFile writes the variables for `make run`'s shell and the
// commands run after it (gateway ctl, the workers, k6) to source.
func writeEnvFile(path string, vars envfile.Vars) error {
	lines, err := envfile.Encode(vars)
	if err != nil {
		return err
	}
	header := "# Written by `make run` (gateway dev). Source it: . " + envfile.Quote(path) + "\n"
	return os.WriteFile(path, append([]byte(header), lines...), 0o600)
}

// runChildWorker runs the reference worker until ctx ends, then asks it to
// drain (SIGTERM) and waits for it.
func runChildWorker(ctx context.Context, bin string, vars envfile.Vars, logger *slog.Logger) {
	cmd := exec.Command(bin)
	cmd.Env = os.Environ()
	for _, v := range vars {
		cmd.Env = append(cmd.Env, v.Key+"="+v.Value)
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		logger.Error("start reference worker", "error", err.Error())
		return
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		logger.Error("reference worker exited", "error", fmt.Sprint(err))
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var err error
		select {
		case err = <-done:
		case <-time.After(40 * time.Second):
			_ = cmd.Process.Kill()
			err = <-done
		}
		logger.Info("reference worker stopped", "status", fmt.Sprint(err))
	}
}

// ensureDevSecretsKey makes the development key-encryption key of stored
// secrets once, kept beside the dev PKI (a production key lives elsewhere).
func ensureDevSecretsKey(path string) (string, error) {
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	k, err := secretbox.GenerateKEK()
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, []byte(k.Encode()+"\n"), 0o600)
}
