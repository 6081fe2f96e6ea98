// Package server is the gateway's HTTP layer: the generated strict-server
// interface implemented over the store, authentication (mTLS for workers,
// bearer tokens for the control plane), problem+json errors, the long-poll
// hub, and the list of the replica's background services (servicelist.go).
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/server/console"
	"github.com/worker-gateway/gateway/server/services"
	"github.com/worker-gateway/gateway/server/services/webhookdeliver"
	"github.com/worker-gateway/gateway/store"
)

// Config is everything a gateway replica needs besides its database.
type Config struct {
	// TracerProvider, when set, traces every request (a server span named
	// by route pattern, continuing an incoming traceparent); nil traces
	// nothing and costs nothing.
	TracerProvider trace.TracerProvider
	// MaxWait caps a long-poll's wait_seconds; DefaultWait applies when the
	// worker gives none. Both stay under common load-balancer idle timeouts.
	MaxWait     time.Duration
	DefaultWait time.Duration
	// RequestReadTimeout bounds reading a whole request, body included
	// (http.Server.ReadTimeout); artifact uploads are bound by
	// Artifacts.UploadIdleTimeout instead.
	RequestReadTimeout time.Duration
	// HeartbeatInterval is the longest interval workers are told to renew
	// at; a lease's own interval is a third of its duration when shorter.
	// A worker is online when seen within three intervals.
	HeartbeatInterval time.Duration
	// SweepIdleInterval and SweepDormantInterval are the sweeper's
	// intervals (sweeper.Config says what each is).
	SweepIdleInterval    time.Duration
	SweepDormantInterval time.Duration
	// SweepBatch bounds the rows one pass of the sweeper or the pruner
	// touches.
	SweepBatch int
	// QueueVacuumEvery is how many leases this replica grants between two
	// vacuums of the queue of leasable tasks (queuevacuum); 0 leaves the
	// queue to autovacuum.
	QueueVacuumEvery int
	// ScheduleTimer fires due schedules on this replica (scheduletimer).
	// Every replica may run it; off, this replica fires none.
	ScheduleTimer bool
	// ScheduleMinInterval is the shortest gap allowed between two slots of
	// a schedule, and ScheduleQuota how many schedules an organization may
	// have unless its own max_schedules says otherwise (store.ScheduleLimits).
	ScheduleMinInterval time.Duration
	ScheduleQuota       int
	// Webhooks is how this replica delivers webhooks (webhookdeliver), and
	// where targets may point.
	Webhooks webhookdeliver.Config
	// IdentityCacheTTL bounds how long a replica trusts what it looked up
	// about a worker certificate (see identityCache); 0 looks it up on
	// every request.
	IdentityCacheTTL time.Duration
	// OpsProfiling serves Go's pprof profiles under /debug/pprof/ on the
	// ops listener.
	OpsProfiling bool
	// GroupCommitWriters is how many groups of completions — and, apart, of
	// heartbeats — a replica writes at once, each group in one transaction
	// on its own connection; requests arriving meanwhile wait for the next
	// group (group commit). Two by default, by measurement: fewer, larger
	// groups cost the database less per task, as concurrent groups contend
	// for the same pages (32 workers × 32, PostgreSQL CPU per task: 0.093–
	// 0.098 ms with one writer, 0.094–0.117 with two, 0.110–0.137 with
	// four), but with one the wake-up latency's p99 rose to about 5 ms
	// (2.9 ms with four, 4.3 with two; medians of 3–6 runs). A group waiting
	// on a row lock holds back at most this many groups' worth of the
	// replica's completions (groupTimeout bounds it). Acquisitions always
	// have one writer (LeaseGroupCommit).
	GroupCommitWriters int
	// LeaseGroupCommit serves the polls waiting on a replica with one
	// acquisition at a time — River's one fetcher per process: a poll that
	// arrives while an acquisition is in flight joins the next one, which
	// walks the queue once per set of like workers for all of them. A poll
	// alone (an idle replica) is acquired at once, in one round trip, and a
	// poll woken by a wake-up always goes on its own. On by default; off
	// gives every poll its own acquisition transaction, each walking the
	// queue with SKIP LOCKED past the others' locked rows (batched
	// throughput 4,730 against 7,781–7,832 tasks/s with it, README).
	LeaseGroupCommit bool
	// PruneInterval is how often a replica deletes old terminal tasks, ended
	// upload rows and (with AuditRetention > 0) audit events (pruner); 0
	// disables it.
	PruneInterval   time.Duration
	TaskRetention   time.Duration
	UploadRetention time.Duration
	AuditRetention  time.Duration
	Limits          Limits
	Artifacts       ArtifactConfig
	Identity        IdentityConfig
	Logger          *slog.Logger
	// ValidateResponses checks every response against openapi.yaml and
	// turns a mismatch into a 500; tests turn it on.
	ValidateResponses bool
	// MetricsOnMain serves GET /metrics on the main listener, to bearer API
	// tokens without organization scope. Turn it off when the metrics are
	// served on a separate internal listener (OpsHandler).
	MetricsOnMain bool
	// SecurityAuditWindow is how long, after a refused request (a bad token,
	// an unknown certificate, a revoked worker, a refused enrollment) is
	// audited, further refusals of its kind from its source address are
	// only counted; then one row records their number. 0 audits each one.
	SecurityAuditWindow time.Duration
	// SecurityAuditSources bounds the (kind, source address) pairs counted
	// at once; refusals from further addresses are counted per kind under
	// the source "other".
	SecurityAuditSources int
	// ConsoleSessionTTL bounds a console session (/ui); 0 is
	// console.DefaultSessionTTL. A session never outlives its API token.
	ConsoleSessionTTL time.Duration
	// ConsoleRefresh is how often the console's overview refreshes itself;
	// 0 is five seconds.
	ConsoleRefresh time.Duration
	// Services is the list of background services this replica runs; nil
	// is DefaultServices. Tests add their own.
	Services []ServiceSpec
	// Secrets holds the key-encryption keys of stored secrets: the current
	// one seals, older ones still open during a rotation. Nil: secrets
	// cannot be created, and a task referencing one fails its attempt.
	Secrets *secretbox.Keyring
}

// Limits are the explicit bounds on what one request may ask of the server.
type Limits struct {
	// DefaultBody bounds request bodies of routes not listed below.
	DefaultBody int64
	// LeaseBody bounds POST /v1/leases and heartbeats (tiny requests).
	LeaseBody int64
	// TaskBody bounds task creation, and so a task's payload.
	TaskBody int64
	// ResultBody bounds one result batch; RecordsPerBatch its records.
	ResultBody      int64
	RecordsPerBatch int
	// LogBytesPerAttempt caps an attempt's stored log.
	LogBytesPerAttempt int64
	// PollsPerWorker bounds one worker's concurrent long-polls; MaxPolls
	// bounds them for the whole replica. Past either: 429 with Retry-After.
	PollsPerWorker int
	MaxPolls       int
	// WorkerRate and WorkerBurst bound each worker's requests: WorkerRate
	// per second on average, WorkerBurst at once; past it 429 with
	// Retry-After. 0 disables the limit.
	WorkerRate  float64
	WorkerBurst int
	// EnrollRefusalRate and EnrollRefusalBurst bound the refused
	// enrollments of one source address (an IPv4 address or an IPv6 /64):
	// EnrollRefusalBurst at once, EnrollRefusalRate per second on average;
	// past it every enrollment from there is 429 with Retry-After before
	// any database work. Successful enrollments do not count. 0 disables
	// the limit.
	EnrollRefusalRate  float64
	EnrollRefusalBurst int
	// FollowsPerToken bounds one API token's concurrent log follows
	// (GET /v1/tasks/{id}/logs?follow=true); MaxFollows bounds them for the
	// whole replica. Past either: 429 with Retry-After. 0 disables a bound.
	FollowsPerToken int
	MaxFollows      int
}

func (c Config) bodyLimitFor(method, path string) int64 {
	l := c.Limits
	switch {
	case isUpload(method, path):
		return c.Artifacts.MaxBytes
	case method == http.MethodPost && strings.HasPrefix(path, "/v1/attempts/") && strings.HasSuffix(path, "/logs"):
		return 2 << 20 // a 1 MiB chunk, JSON-escaped
	case method == http.MethodPost && strings.HasPrefix(path, "/v1/attempts/") &&
		(strings.HasSuffix(path, "/results") || strings.HasSuffix(path, "/complete")):
		return l.ResultBody // completions may carry their final result batch
	case method == http.MethodPost && (path == "/v1/leases" || path == "/v1/heartbeat" || strings.HasPrefix(path, "/v1/attempts/")):
		return l.LeaseBody
	case method == http.MethodPost && path == "/v1/tasks":
		return l.TaskBody
	}
	return l.DefaultBody
}

// isUpload reports whether a request streams an artifact's bytes to the
// gateway (the fs backend's upload URL).
func isUpload(method, path string) bool {
	return method == http.MethodPut && strings.HasPrefix(path, "/v1/uploads/")
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		MaxWait:              25 * time.Second,
		DefaultWait:          20 * time.Second,
		HeartbeatInterval:    10 * time.Second,
		SweepIdleInterval:    15 * time.Second,
		SweepDormantInterval: 5 * time.Minute,
		SweepBatch:           500,
		QueueVacuumEvery:     50000,
		GroupCommitWriters:   2,
		LeaseGroupCommit:     true,
		ScheduleTimer:        true,
		ScheduleMinInterval:  store.DefaultScheduleLimits.MinInterval,
		ScheduleQuota:        store.DefaultScheduleLimits.Quota,
		Webhooks:             webhookdeliver.DefaultConfig(),
		IdentityCacheTTL:     time.Minute,
		PruneInterval:        10 * time.Minute,
		TaskRetention:        store.DefaultTaskRetention,
		UploadRetention:      store.DefaultUploadRetention,
		AuditRetention:       store.DefaultAuditRetention,
		SecurityAuditWindow:  time.Minute,
		SecurityAuditSources: 1024,
		Limits: Limits{
			DefaultBody:        256 << 10,
			LeaseBody:          64 << 10,
			TaskBody:           1 << 20,
			ResultBody:         4 << 20,
			RecordsPerBatch:    1000,
			LogBytesPerAttempt: 1 << 20,
			PollsPerWorker:     8,
			MaxPolls:           20000,
			WorkerRate:         1000,
			WorkerBurst:        2000,
			EnrollRefusalRate:  0.1,
			EnrollRefusalBurst: 10,
			FollowsPerToken:    4,
			MaxFollows:         256,
		},
		Identity: IdentityConfig{
			CertificateValidity: 7 * 24 * time.Hour,
			RenewalGrace:        time.Hour,
			EnrollmentTokenTTL:  24 * time.Hour,
		},
		Artifacts: ArtifactConfig{
			SessionTTL:         15 * time.Minute,
			MaxBytes:           1 << 30,
			MaxBytesPerAttempt: 4 << 30,
			UploadIdleTimeout:  30 * time.Second,
		},
		RequestReadTimeout: 30 * time.Second,
		Logger:             slog.Default(),
		MetricsOnMain:      true,
	}
}

// Server is one gateway replica.
type Server struct {
	cfg    Config
	store  *store.Store
	pool   *pgxpool.Pool
	logger *slog.Logger
	hub    *Hub
	// services is every background service this replica runs
	// (DefaultServices, or Config.Services).
	services *services.Group
	polls    pollLimiter
	// follows shares one log reader per followed attempt and bounds follows.
	follows *logFollowers
	// secretRefs remembers which attempts' writes need redacting.
	secretRefs attemptSecretsCache
	// advertisements remembers workers' advertisements that needed no
	// redaction, so that repeated polls read nothing for it.
	advertisements advertisementCache
	handler        http.Handler
	metrics        *metrics
	// metricsHandler serves the metrics registry, unauthenticated.
	metricsHandler http.Handler
	// securityEvents throttles audit rows for refused requests.
	securityEvents *securityThrottle
	// acquisitions, completions and heartbeats group-commit those requests.
	acquisitions *store.AcquireBatcher
	completions  *store.CompletionBatcher
	heartbeats   *store.HeartbeatBatcher
	// workerRate bounds each worker's request rate.
	workerRate *rateLimiter[uuid.UUID]
	// enrollRefusals bounds each source address's refused enrollments.
	enrollRefusals *rateLimiter[string]
	// identities caches certificate → worker for the worker routes.
	identities *identityCache
	// lookupWorker resolves a certificate fingerprint on every worker
	// request; a benchmark swaps it to measure what the check costs.
	lookupWorker func(ctx context.Context, fingerprint string) (store.WorkerIdentity, error)
}

// New builds a replica over a database pool. Start its background work with
// Run.
func New(pool *pgxpool.Pool, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ScheduleMinInterval < 0 || cfg.ScheduleQuota < 0 {
		return nil, errors.New("schedule minimum interval and quota must not be negative")
	}
	s := &Server{cfg: cfg, store: store.New(pool), pool: pool, logger: cfg.Logger}
	s.hub = NewHub()
	s.follows = newLogFollowers(s.store, cfg.Logger)
	s.identities = newIdentityCache(s.store.WorkerByFingerprint, s.hub.Connected, cfg.IdentityCacheTTL)
	s.lookupWorker = s.identities.get
	s.workerRate = newRateLimiter[uuid.UUID](cfg.Limits.WorkerRate, cfg.Limits.WorkerBurst, 0)
	s.enrollRefusals = newRateLimiter[string](cfg.Limits.EnrollRefusalRate, cfg.Limits.EnrollRefusalBurst, maxEnrollSources)
	s.securityEvents = newSecurityThrottle(cfg.SecurityAuditWindow, cfg.SecurityAuditSources, func(ctx context.Context, e securityEvent) {
		s.recordAudit(ctx, e.actorType, e.actorID, e.action, "", "", nil, e.details)
	})
	if cfg.LeaseGroupCommit {
		// One writer: the replica's single fetcher (concurrent walks of the
		// same queue head wade through each other's locked rows).
		s.acquisitions = store.NewAcquireBatcher(s.store, 1, groupMax, groupTimeout, s.hub.Seq, s.undeliveredReleased)
	}
	s.completions = store.NewCompletionBatcher(s.store, max(cfg.GroupCommitWriters, 1), groupMax, groupTimeout)
	s.heartbeats = store.NewHeartbeatBatcher(s.store, max(cfg.GroupCommitWriters, 1), groupMax, groupTimeout)
	s.store.SetScheduleLimits(store.ScheduleLimits{MinInterval: cfg.ScheduleMinInterval, Quota: cfg.ScheduleQuota})
	var err error
	if s.services, err = s.buildServices(); err != nil {
		return nil, err
	}
	s.metrics = newMetrics(s)
	s.metricsHandler = s.metrics.handler(s)
	h, err := s.buildHandler()
	if err != nil {
		return nil, err
	}
	s.handler = h
	return s, nil
}

// Handler is the replica's whole HTTP surface.
func (s *Server) Handler() http.Handler { return s.handler }

// Store exposes the store (for the admin commands and tests).
func (s *Server) Store() *store.Store { return s.store }

// Hub exposes the long-poll hub (for tests and metrics).
func (s *Server) Hub() *Hub { return s.hub }

// LogFollowers is how many follow requests wait on this replica's shared
// log readers, and how many readers run (tests and metrics).
func (s *Server) LogFollowers() (waiting, readers int) {
	return s.follows.Waiting(), s.follows.Readers()
}

// Services names the background services this replica runs, in list
// order (tests).
func (s *Server) Services() []string { return s.services.Names() }

// Kick asks the named background service for a pass now (tests that move
// the database's clock by hand); false when it does not run here or
// cannot be kicked.
func (s *Server) Kick(service string) bool { return s.services.Kick(service) }

// onlineWindow is how recently a worker must have been seen to be online.
func (s *Server) onlineWindow() time.Duration { return 3 * s.cfg.HeartbeatInterval }

func (s *Server) buildHandler() (http.Handler, error) {
	spec, err := loadSpec()
	if err != nil {
		return nil, err
	}
	// No route ships without its permission decided in the contract.
	if err := checkPermissions(spec); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	validate, err := s.requestValidator(false)
	if err != nil {
		return nil, err
	}
	impl := &handlers{s}
	if err := checkWorkerTextRules(workerTextRules); err != nil {
		return nil, err
	}
	strict := api.NewStrictHandlerWithOptions(impl, []api.StrictMiddlewareFunc{s.redactWorkerText(impl), s.auditGuard}, api.StrictHTTPServerOptions{
		RequestErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			writeProblem(w, r, withCause(newProblem(http.StatusBadRequest, problem.BadRequest, "the request body could not be decoded"), err), s.logger)
		},
		ResponseErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			p := problemFor(err)
			s.securityProblem(r, p)
			writeProblem(w, r, p, s.logger)
		},
	})
	apiMux := http.NewServeMux()
	routes := api.HandlerWithOptions(strict, api.StdHTTPServerOptions{
		BaseRouter: apiMux,
		ErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			writeProblem(w, r, withCause(newProblem(http.StatusBadRequest, problem.BadRequest, "invalid request parameters"), err), s.logger)
		},
	})
	apiHandler := validate(routes)
	// Artifact bytes are streamed straight to storage: that route's
	// validator leaves the body unread.
	validateNoBody, err := s.requestValidator(true)
	if err != nil {
		return nil, err
	}
	uploads := validateNoBody(routes)
	if s.cfg.ValidateResponses {
		if apiHandler, err = s.responseValidator(apiHandler); err != nil {
			return nil, err
		}
	}

	root := http.NewServeMux()
	root.HandleFunc("GET /openapi.yaml", serveSpecYAML)
	root.HandleFunc("GET /openapi.json", serveSpecJSON)
	docs, err := docsHandler()
	if err != nil {
		return nil, err
	}
	root.Handle("GET /docs", docs)
	root.Handle("GET /docs/", docs)
	// A browser opening the gateway's address lands on the API docs.
	root.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, docsPath, http.StatusFound)
	})
	root.Handle("/", apiHandler)
	ui, err := s.consoleHandler(impl)
	if err != nil {
		return nil, err
	}
	root.Handle(console.Prefix, ui)
	root.Handle(console.Prefix+"/", ui)
	root.Handle("PUT /v1/uploads/{upload_id}", uploads)
	if s.cfg.MetricsOnMain {
		root.HandleFunc("GET /metrics", s.serveMetricsAuthenticated)
	}
	s.metrics.routes = routeMux(strict)
	h := s.metrics.withMetrics(s.withRequestContext(s.bodyLimits(root)))
	if s.cfg.TracerProvider != nil {
		h = otelhttp.NewHandler(h, "http",
			otelhttp.WithTracerProvider(s.cfg.TracerProvider),
			otelhttp.WithPropagators(otel.GetTextMapPropagator()),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return s.metrics.route(r) }))
	}
	return h, nil
}

// registerFormats makes kin-openapi check format: uuid, by RFC 9562 (its
// RFC 4122 pattern would refuse the UUIDv7s clients may send).
var registerFormats = sync.OnceFunc(func() {
	openapi3.DefineStringFormatValidator("uuid", openapi3.NewRegexpFormatValidator(openapi3.FormatOfStringForUUIDOfRFC9562))
})

// loadSpec returns the embedded contract ready for validation: one
// document per process, parsed on first use and read-only after, which every
// router, validator and permission check of every Server shares. Parsing it
// is the most expensive step of New (190 kB of YAML), and New runs
// once per gateway a test starts.
//
// The contract is OpenAPI 3.1 (for the mutualTLS security scheme), but its
// schemas use nothing 3.1 added. kin-openapi validates a 3.1 document by
// compiling a JSON Schema 2020-12 validator on every request, with no cache,
// which cost about a third of the gateway's CPU per request; labelled 3.0 it
// validates the same schemas with its own validator.
var loadSpec = sync.OnceValues(func() (*openapi3.T, error) {
	registerFormats()
	spec, err := api.GetSpec()
	if err != nil {
		return nil, fmt.Errorf("load embedded openapi spec: %w", err)
	}
	spec.Servers = nil // validate paths whatever host the gateway is reached by
	spec.OpenAPI = "3.0.3"
	return spec, nil
})

// Run runs the replica's background work — the LISTEN connection feeding the
// hub and waking the services, and every service of the list
// (DefaultServices) — until ctx ends. databaseURL opens the dedicated
// LISTEN connection.
func (s *Server) Run(ctx context.Context, databaseURL string) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.runListener(ctx, databaseURL) })
	wg.Go(func() { s.services.Run(ctx) })
	<-ctx.Done()
	s.hub.Close()
	wg.Wait()
	if s.acquisitions != nil {
		s.acquisitions.Close()
	}
	s.completions.Close()
	s.heartbeats.Close()
	return nil
}

const (
	// groupMax bounds how many requests one group-commit transaction writes.
	groupMax = 256
	// groupTimeout bounds one group's transaction.
	groupTimeout = 30 * time.Second
)

// ListenerReady reports whether the LISTEN connection is up (readiness).
func (s *Server) ListenerReady() bool { return s.hub.Connected() }

// ListenerConnects counts how often the LISTEN connection was established.
func (s *Server) ListenerConnects() int64 { return s.hub.connects.Load() }

// TLSConfig is the gateway's TLS server configuration: TLS 1.3 only, and a
// client certificate requested (not required: enrollment and the control
// plane come without one). Certificates are not verified against a CA here:
// a worker is whoever holds the private key of a certificate whose SHA-256
// fingerprint is registered, which also lets operators bring their own PKI.
func TLSConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequestClientCert,
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

// NewHTTPServer wraps the handler with the timeouts a long-poll server needs.
func (s *Server) NewHTTPServer(tlsConfig *tls.Config) *http.Server {
	return HTTPServer(s.handler, tlsConfig, s.cfg, slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug))
}

// HTTPServer is the http.Server a replica configured by cfg serves h with:
// the timeouts a long-poll server needs (the benchmark's floor server
// serves with the same).
func HTTPServer(h http.Handler, tlsConfig *tls.Config, cfg Config, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       cfg.RequestReadTimeout,
		WriteTimeout:      cfg.MaxWait + 30*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          errorLog,
	}
}

// Serve serves TLS on ln until ctx ends, then answers every waiting poll at
// once and drains in-flight requests for up to drain.
func (s *Server) Serve(ctx context.Context, ln net.Listener, tlsConfig *tls.Config, drain time.Duration) error {
	s.metrics.noteServingCertificate(tlsConfig)
	srv := s.NewHTTPServer(tlsConfig)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tls.NewListener(ln, tlsConfig)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.hub.Close()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if serveErr := <-errc; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return err
}
