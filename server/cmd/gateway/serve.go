package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/server/objectstore"
	"github.com/worker-gateway/gateway/store"
)

// serveConfig is what `gateway serve` (and `gateway dev`) need to run a
// replica.
type serveConfig struct {
	databaseURL string
	// listenDatabaseURL is the direct connection for LISTEN and
	// migrations, which a pooler in transaction mode cannot carry; "" is
	// databaseURL.
	listenDatabaseURL string
	// execMode is -database-exec-mode (store.ChooseExecMode).
	execMode  string
	listen    string
	opsListen string
	tlsCert   string
	tlsKey    string
	migrate   bool
	server    server.Config
	drain     time.Duration
	maxConns  int
	artifacts artifactFlags
	caCert    string
	caKey     string
	// secretsKeys are the key-encryption keys of stored secrets.
	secretsKeys *secretsKeyFlags
	logFormat   logFormatFlag
}

// artifactFlags choose where artifact bytes live.
type artifactFlags struct {
	backend string
	dir     string
	s3      objectstore.S3Config
}

// open builds the configured storage backend.
func (a artifactFlags) open(ctx context.Context) (objectstore.Backend, error) {
	switch a.backend {
	case "fs":
		if a.dir == "" {
			return nil, fmt.Errorf("the fs artifact backend needs -artifacts-dir")
		}
		return objectstore.NewFS(a.dir)
	case "s3":
		return objectstore.NewS3(ctx, a.s3)
	}
	return nil, fmt.Errorf("unknown artifact backend %q (fs or s3)", a.backend)
}

// serveFlags defines the flags of a replica; dev takes them too.
func serveFlags(fs *flagSet, level *slog.LevelVar) *serveConfig {
	c := &serveConfig{server: server.DefaultConfig()}
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL URL")
	fs.alias("database-url", "DATABASE_URL")
	fs.StringVar(&c.listenDatabaseURL, "listen-database-url", "",
		"PostgreSQL URL of a direct connection (not through a pooler in transaction mode) for the replica's LISTEN connection and for -migrate; empty: -database-url")
	fs.StringVar(&c.execMode, "database-exec-mode", store.ExecModeAuto,
		"how queries are sent: "+store.ExecModeNames()+"; auto uses named prepared statements on a direct connection and cache_describe (unnamed statements) behind a pooler such as PgBouncer")
	fs.Var(levelFlag{level}, "log-level", "DEBUG, INFO, WARN or ERROR; DEBUG logs every request")
	fs.alias("log-level", "LOG_LEVEL")
	fs.Var(&c.logFormat, "log-format", "auto (text when stderr is a terminal, JSON otherwise), json or text")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8443", "TLS listen address, or fd:N for a listening socket the process inherits as file descriptor N (systemd socket activation passes fd:3)")
	fs.StringVar(&c.opsListen, "ops-listen", "",
		"plain-HTTP, unauthenticated listener for /metrics, /healthz and /readyz, e.g. 127.0.0.1:9090; keep it internal. "+
			"When empty, /metrics is served on the main listener to API tokens without organization scope")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "server certificate PEM")
	fs.StringVar(&c.tlsKey, "tls-key", "", "server key PEM")
	fs.BoolVar(&c.migrate, "migrate", false, "apply migrations before serving")
	fs.DurationVar(&c.server.MaxWait, "max-wait", c.server.MaxWait, "longest long-poll wait")
	fs.DurationVar(&c.server.DefaultWait, "default-wait", c.server.DefaultWait, "long-poll wait when the worker gives none")
	fs.BoolVar(&c.server.OpsProfiling, "ops-pprof", false, "serve Go's CPU, heap and goroutine profiles under /debug/pprof/ on the ops listener (needs -ops-listen)")
	fs.IntVar(&c.server.GroupCommitWriters, "group-commit-writers", c.server.GroupCommitWriters, "groups of completions (and, separately, of heartbeats) written at once, each group in one transaction; requests arriving meanwhile join the next group (more writers: smaller groups, more database CPU per task)")
	fs.BoolVar(&c.server.LeaseGroupCommit, "lease-group-commit", c.server.LeaseGroupCommit, "serve the polls waiting on this replica with one acquisition at a time: polls arriving meanwhile join the next one, one commit and one queue walk per set of like workers (a poll alone, or woken, keeps its one-statement path); -lease-group-commit=false gives every poll its own transaction")
	fs.DurationVar(&c.server.IdentityCacheTTL, "identity-cache-ttl", c.server.IdentityCacheTTL, "how long a replica trusts a looked-up worker certificate while its LISTEN connection is up (changes notify every replica); 0 looks it up on every request")
	fs.DurationVar(&c.server.HeartbeatInterval, "heartbeat-interval", c.server.HeartbeatInterval, "longest heartbeat interval told to workers; online = seen within 3 intervals")
	server.RegisterServiceFlags(fs.FlagSet, &c.server) // each background service's own flags
	fs.DurationVar(&c.server.ScheduleMinInterval, "schedule-min-interval", c.server.ScheduleMinInterval, "shortest gap allowed between two slots of a schedule (interval, or a cron's closest slots), on create and edit")
	fs.IntVar(&c.server.ScheduleQuota, "schedule-quota", c.server.ScheduleQuota, "schedules an organization may have, unless its organizations.max_schedules says otherwise")
	fs.BoolVar(&c.server.Webhooks.AllowPrivate, "webhooks-allow-private", c.server.Webhooks.AllowPrivate, "let webhook targets resolve to loopback, link-local and private addresses (refused by default, at creation and on every dial)")
	fs.Float64Var(&c.server.Limits.WorkerRate, "worker-rate", c.server.Limits.WorkerRate, "requests per second one worker may send on average (0: unlimited); past it 429 with Retry-After")
	fs.IntVar(&c.server.Limits.WorkerBurst, "worker-burst", c.server.Limits.WorkerBurst, "requests one worker may send at once before -worker-rate applies")
	fs.Float64Var(&c.server.Limits.EnrollRefusalRate, "enroll-refusal-rate", c.server.Limits.EnrollRefusalRate,
		"refused enrollments per second one source address (IPv4 address, IPv6 /64) may make on average (0: unlimited); past it every enrollment from there is 429 with Retry-After")
	fs.IntVar(&c.server.Limits.EnrollRefusalBurst, "enroll-refusal-burst", c.server.Limits.EnrollRefusalBurst,
		"refused enrollments one source address may make at once before -enroll-refusal-rate applies")
	fs.IntVar(&c.server.Limits.PollsPerWorker, "polls-per-worker", c.server.Limits.PollsPerWorker, "concurrent long-polls per worker")
	fs.IntVar(&c.server.Limits.MaxPolls, "max-polls", c.server.Limits.MaxPolls, "concurrent long-polls per replica")
	fs.IntVar(&c.server.Limits.FollowsPerToken, "follows-per-token", c.server.Limits.FollowsPerToken, "concurrent log follows per API token (0: unlimited); past it 429 with Retry-After")
	fs.IntVar(&c.server.Limits.MaxFollows, "max-follows", c.server.Limits.MaxFollows, "concurrent log follows per replica (0: unlimited)")
	fs.Int64Var(&c.server.Limits.TaskBody, "max-task-body", c.server.Limits.TaskBody, "largest task creation body (bounds a task's payload), bytes")
	fs.Int64Var(&c.server.Limits.ResultBody, "max-result-body", c.server.Limits.ResultBody, "largest result batch body, bytes")
	fs.IntVar(&c.server.Limits.RecordsPerBatch, "max-batch-records", c.server.Limits.RecordsPerBatch, "most records in one result batch")
	fs.DurationVar(&c.drain, "drain", 30*time.Second, "how long in-flight requests may finish on shutdown")
	// Tests run process gateways with every response checked against the
	// contract; it costs CPU, so it is off unless asked for.
	fs.BoolVar(&c.server.ValidateResponses, "validate-responses", false, "check every response against openapi.yaml (for tests; costs CPU)")
	fs.IntVar(&c.maxConns, "db-max-conns", 20, "database pool size")
	fs.StringVar(&c.artifacts.backend, "artifacts-backend", "fs", "where artifact bytes live: fs or s3")
	fs.StringVar(&c.artifacts.dir, "artifacts-dir", "", "fs backend directory")
	fs.StringVar(&c.artifacts.s3.Endpoint, "s3-endpoint", "", "S3 endpoint host[:port] or URL")
	fs.alias("s3-endpoint", "S3_ENDPOINT")
	fs.StringVar(&c.artifacts.s3.Region, "s3-region", "", "S3 region")
	fs.alias("s3-region", "S3_REGION")
	fs.StringVar(&c.artifacts.s3.Bucket, "s3-bucket", "", "S3 bucket")
	fs.alias("s3-bucket", "S3_BUCKET")
	fs.BoolVar(&c.artifacts.s3.UseSSL, "s3-tls", true, "reach S3 over TLS")
	fs.alias("s3-tls", "S3_TLS")
	fs.BoolVar(&c.artifacts.s3.TrustStoreChecksums, "s3-trust-checksums", false,
		"take an object's SHA-256 from the store at commit instead of reading it whole; only for stores that verify x-amz-checksum-sha256 on PUT (AWS S3, MinIO)")
	fs.alias("s3-trust-checksums", "S3_TRUST_CHECKSUMS")
	fs.BoolVar(&c.artifacts.s3.PathStyle, "s3-path-style", false, "path-style bucket addressing, for MinIO and the like")
	fs.alias("s3-path-style", "S3_PATH_STYLE")
	fs.StringVar(&c.server.Artifacts.PublicURL, "public-url", "", "the gateway's URL as workers reach it, for upload URLs; empty: the address each worker connection was accepted on, never the Host header")
	fs.DurationVar(&c.server.Artifacts.SessionTTL, "upload-ttl", c.server.Artifacts.SessionTTL, "how long an upload session stays open")
	fs.Int64Var(&c.server.Artifacts.MaxBytes, "max-artifact-bytes", c.server.Artifacts.MaxBytes, "largest artifact")
	fs.Int64Var(&c.server.Artifacts.MaxBytesPerAttempt, "max-attempt-artifact-bytes", c.server.Artifacts.MaxBytesPerAttempt, "most artifact bytes per attempt")
	fs.Int64Var(&c.server.Limits.LogBytesPerAttempt, "max-log-bytes", c.server.Limits.LogBytesPerAttempt, "log cap per attempt")
	fs.StringVar(&c.caCert, "ca-cert", "", "CA certificate that signs enrolled workers' certificates; empty disables enrollment")
	fs.StringVar(&c.caKey, "ca-key", "", "that CA's private key; read from this file only, never stored")
	fs.DurationVar(&c.server.Identity.CertificateValidity, "cert-validity", c.server.Identity.CertificateValidity, "lifetime of enrolled certificates")
	fs.DurationVar(&c.server.Identity.RenewalGrace, "renewal-grace", c.server.Identity.RenewalGrace, "how long a renewed certificate's predecessor keeps working if the new one is not used")
	fs.DurationVar(&c.server.Identity.EnrollmentTokenTTL, "enrollment-ttl", c.server.Identity.EnrollmentTokenTTL, "how long an enrollment token stays usable")
	c.secretsKeys = defineSecretsKeyFlags(fs)
	return c
}

// levelFlag sets the level of the running logger.
type levelFlag struct{ v *slog.LevelVar }

func (f levelFlag) String() string {
	if f.v == nil {
		return slog.LevelInfo.String()
	}
	return f.v.Level().String()
}

func (f levelFlag) Set(s string) error { return f.v.UnmarshalText([]byte(s)) }

// s3Credentials are read from the environment only, never from flags
// (visible in ps) — at run time, so -h never reads them.
func (c *serveConfig) s3Credentials() {
	c.artifacts.s3.AccessKeyID = os.Getenv("S3_ACCESS_KEY_ID")
	c.artifacts.s3.SecretAccessKey = os.Getenv("S3_SECRET_ACCESS_KEY")
}

const serveLong = `S3 credentials come only from the environment, never from flags (visible in ps):
S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY. The secrets key is read from -secrets-key-file or,
as base64, from $GATEWAY_SECRETS_KEY (see gateway secrets -h).`

func serveCommand(a *cli) *command {
	return &command{name: "serve", short: "serve one replica (TLS)", long: serveLong,
		setup: func(fs *flagSet) execFunc {
			c := serveFlags(fs, a.level)
			return func(ctx context.Context, _ []string) error {
				if c.databaseURL == "" || c.tlsCert == "" || c.tlsKey == "" {
					return usageError{"serve needs -database-url, -tls-cert and -tls-key"}
				}
				a.useLogFormat(&c.logFormat)
				c.s3Credentials()
				ln, err := listen(c.listen)
				if err != nil {
					return err
				}
				return serve(ctx, c, ln, a.logger)
			}
		}}
}

// serve runs one replica on ln until ctx ends.
func serve(ctx context.Context, c *serveConfig, ln net.Listener, logger *slog.Logger) error {
	listenURL := cmp.Or(c.listenDatabaseURL, c.databaseURL)
	if c.migrate {
		// golang-migrate holds a session-level advisory lock, which only
		// a direct connection keeps.
		if err := migrations.Up(ctx, listenURL); err != nil {
			return err
		}
	}
	cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
	if err != nil {
		return fmt.Errorf("load TLS key pair: %w", err)
	}
	tracer, stopTracing, err := startTracing(ctx, os.Getenv, logger)
	if err != nil {
		return err
	}
	defer func() {
		// Spans still queued are sent before the process exits.
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := stopTracing(flushCtx); err != nil {
			logger.Warn("tracing: flush on shutdown", "error", err.Error())
		}
	}()
	c.server.TracerProvider = tracer
	mode, err := store.ChooseExecMode(ctx, c.databaseURL, c.execMode)
	if err != nil {
		return err
	}
	logger.Info("database exec mode", "mode", mode.Mode.String(), "reason", mode.Reason)
	pool, err := store.OpenPool(ctx, c.databaseURL, func(cfg *pgxpool.Config) {
		cfg.MaxConns = int32(c.maxConns)
		cfg.ConnConfig.DefaultQueryExecMode = mode.Mode
		store.WarmConnections(cfg)
		if tracer != nil {
			cfg.ConnConfig.Tracer = store.NewQueryTracer(tracer)
		}
	})
	if err != nil {
		return err
	}
	defer pool.Close()

	c.server.Logger = logger
	c.server.MetricsOnMain = c.opsListen == ""
	var opsLn net.Listener
	if c.opsListen != "" {
		if opsLn, err = net.Listen("tcp", c.opsListen); err != nil {
			return fmt.Errorf("ops listener: %w", err)
		}
		defer opsLn.Close()
	}
	if c.server.Artifacts.Backend, err = c.artifacts.open(ctx); err != nil {
		return err
	}
	if c.caCert != "" {
		if c.server.Identity.CA, err = pki.LoadCA(c.caCert, c.caKey); err != nil {
			return fmt.Errorf("load enrollment CA: %w", err)
		}
	}
	if c.server.Secrets, err = c.secretsKeys.keyring(); err != nil {
		return err
	}
	if err := checkSecretsKey(ctx, store.New(pool), c.server.Secrets); err != nil {
		return err
	}
	srv, err := server.New(pool, c.server)
	if err != nil {
		return err
	}
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(bgCtx, listenURL) })
	var ops *http.Server
	if opsLn != nil {
		ops = &http.Server{
			Handler:           srv.OpsHandler(),
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    16 << 10,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
		}
		wg.Go(func() {
			if err := ops.Serve(opsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("ops listener failed", "error", err.Error())
			}
		})
		logger.Info("ops listener serving /metrics, /healthz and /readyz (plain HTTP, no authentication: keep it internal)",
			"address", opsLn.Addr().String())
	}
	if c.server.Artifacts.PublicURL == "" {
		logger.Info("no -public-url: fs upload URLs name the address each worker connection was accepted on",
			"address", ln.Addr().String())
	}
	logger.Info("gateway serving", "address", ln.Addr().String())
	err = srv.Serve(ctx, ln, server.TLSConfig(cert), c.drain)
	if ops != nil {
		// After the main listener drained: the ops listener answers
		// readiness probes until the end.
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = ops.Shutdown(shutdownCtx)
		cancel()
	}
	stopBackground()
	wg.Wait()
	logger.Info("gateway stopped")
	return err
}
