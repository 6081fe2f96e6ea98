package workerclient

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// ProtocolVersion is the worker protocol version this runtime speaks, sent
// with every poll.
const ProtocolVersion = "1"

// Causes of a Handler's context cancellation, as reported by context.Cause.
var (
	// ErrCancelRequested: the gateway asked to cancel the task. The attempt is
	// completed as cancelled.
	ErrCancelRequested = errors.New("workerclient: the gateway requested cancellation")
	// ErrLeaseLost: the lease is no longer held (the gateway said so, or it
	// expired without a renewal). Nothing more is reported for the attempt.
	ErrLeaseLost = errors.New("workerclient: lease lost")
	// ErrAttemptDeadline: the attempt's or the task's execution deadline is
	// about to pass.
	ErrAttemptDeadline = errors.New("workerclient: attempt deadline exceeded")
	// ErrDrainTimeout: Run is shutting down and DrainTimeout has passed. The
	// attempt is completed as cancelled, which gives the task back.
	ErrDrainTimeout = errors.New("workerclient: drain timeout")
	// ErrWorkerRevoked is returned by Run when the gateway answers
	// worker-revoked: the worker's identity is no longer accepted.
	ErrWorkerRevoked = errors.New("workerclient: worker revoked")
)

const (
	defaultSlots        = 1
	defaultWaitSeconds  = 20
	defaultDrainTimeout = 30 * time.Second
	maxSlots            = 1000 // LeaseRequest.max_tasks maximum
	maxWaitSeconds      = 3600 // LeaseRequest.wait_seconds maximum
	maxSoftwareVersion  = 200

	// Poll and call errors back off exponentially with full jitter.
	backoffBase = 100 * time.Millisecond
	backoffCap  = 5 * time.Second
	// A Retry-After beyond this is treated as this.
	maxRetryAfter = 5 * time.Minute

	// A long-poll may take wait_seconds plus this before it is abandoned.
	pollMargin = 15 * time.Second
	// An empty answer faster than this is the gateway not waiting (shutting
	// down, or a short wait): back off instead of polling in a tight loop.
	minEmptyPoll = time.Second
	// Timeout of one start, heartbeat or complete request.
	callTimeout = 15 * time.Second
	// How long start is retried before the handler runs anyway (a heartbeat
	// also starts the attempt).
	startRetryWindow = 10 * time.Second
	// How long a completion is retried on transport errors and 5xx.
	completeRetryWindow = time.Minute
	// The handler's deadline is this much (at most a tenth of the budget)
	// before the attempt deadline, so the failure is reported while the
	// lease still holds.
	deadlineMargin = time.Second
	// Renewals are never scheduled more often than this.
	minHeartbeatInterval = 100 * time.Millisecond

	maxErrorCode    = 100
	maxErrorMessage = 4000
)

// Error codes the runtime reports on its own behalf.
const (
	CodeHandlerError   = "handler-error"
	CodeHandlerPanic   = "handler-panic"
	CodeDeadline       = "attempt-deadline-exceeded"
	CodeWorkerShutdown = "worker-shutdown"
	CodeOverCapacity   = "worker-over-capacity"
	// CodeResultsUndelivered: the handler succeeded but the results it
	// emitted could not all be delivered, so the attempt is reported failed.
	CodeResultsUndelivered = "results-undelivered"
)

// Values of the contract the runtime branches on. Spelled out rather than
// taken from the generated constants, whose names depend on which other
// enums share a value.
const (
	codeWorkerRevoked                            = "worker-revoked"
	codeIdempotencyInFlight                      = "idempotency-in-flight"
	codeLeaseLost                                = "lease-lost"
	stateLost               apiclient.LeaseState = "lost"
	stateCancelRequested    apiclient.LeaseState = "cancel_requested"
)

// Config configures a Worker. GatewayURL and Handler are required, and so is
// a client identity: CertFile and KeyFile, StateDir (with EnrollmentToken on
// first start), TLSConfig or HTTPClient.
type Config struct {
	// GatewayURL is the gateway's base URL, e.g. https://127.0.0.1:8443.
	GatewayURL string
	// CertFile and KeyFile are the worker's PEM client certificate and key.
	// They are re-read when they change on disk, so a renewed certificate is
	// used for new connections without a restart. The runtime does not
	// renew them itself: use StateDir for that.
	CertFile, KeyFile string
	// StateDir is where an enrolled worker keeps its identity: worker.key
	// (0600, generated here and never sent), worker.pem and ca.pem (the CA
	// that signed it). It is created (0700) if missing. When it holds no
	// certificate, Run first enrolls with EnrollmentToken; an existing
	// certificate is reused on restart, without a token. The runtime renews
	// the certificate by itself and rewrites the files. One worker process
	// per StateDir. Not combined with CertFile, KeyFile, TLSConfig or
	// HTTPClient.
	StateDir string
	// EnrollmentToken is the one-time token an operator got when creating
	// the worker (or from POST /v1/workers/{id}/enrollment-token). It is used
	// only when StateDir holds no certificate, or one that has expired.
	// Requires StateDir.
	EnrollmentToken string
	// CAFile is the PEM bundle of CAs trusted to sign the gateway's
	// certificate; empty means the system roots (with StateDir: the system
	// roots plus StateDir/ca.pem, when a previous enrollment wrote it).
	CAFile string
	// TLSConfig, when set, is used instead of CertFile, KeyFile and CAFile.
	// Its MinVersion is raised to TLS 1.3.
	TLSConfig *tls.Config
	// HTTPClient, when set, is used as is for every call instead of one
	// built by NewHTTPClient (tests, proxies, custom transports). It must
	// allow a long-poll of WaitSeconds plus a margin.
	HTTPClient *http.Client
	// UploadHTTPClient, when set, is used for artifact uploads to URLs that
	// are not the gateway's (presigned object-storage URLs). By default
	// those go through a client without the worker's certificate that
	// trusts the system roots plus CAFile (with TLSConfig: its RootCAs, or
	// the system roots when it has none). Uploads to the gateway itself use
	// the worker's mTLS client.
	UploadHTTPClient *http.Client

	// Slots is how many tasks run at once (default 1, at most 1000). A poll
	// asks for as many tasks as there are free slots.
	Slots int
	// WaitSeconds is how long a poll waits for a task (default 20); the
	// gateway caps it (25 s by default).
	WaitSeconds int
	// Capabilities is advertised with every poll and heartbeat; a task's
	// required capabilities must be contained in it.
	Capabilities map[string]any
	// SoftwareVersion is advertised with every poll and heartbeat (default:
	// the main module's path and version).
	SoftwareVersion string

	// Handler runs one task. Required.
	Handler Handler
	// Logger receives the runtime's logs (default slog.Default()). Lease
	// tokens and idempotency keys are never logged.
	Logger *slog.Logger
	// DrainTimeout is how long running tasks may finish once Run's context
	// is cancelled (default 30s). After it their contexts are cancelled with
	// ErrDrainTimeout and they are completed as cancelled, which releases
	// them without using up an attempt.
	DrainTimeout time.Duration
	// ResultBatchSize is how many records LeasedTask.Emit buffers before it
	// sends them as one batch (default 100, at most 10000, the contract's
	// limit; a gateway refuses more than 1000 by default). A batch is also
	// sent early when its encoded body would pass 1 MiB.
	ResultBatchSize int
}

// Handler runs one task. Its result decides the attempt's outcome: see the
// package documentation. It must return once ctx is done.
type Handler func(ctx context.Context, task *LeasedTask) error

// LeasedTask is the snapshot of a leased task handed to a Handler. (The
// generated Task is the control plane's view of a task.)
type LeasedTask struct {
	ID             uuid.UUID
	AttemptID      uuid.UUID
	Type           string
	OrganizationID uuid.UUID
	ScanID         *uuid.UUID
	ScanJobID      *uuid.UUID
	Payload        json.RawMessage
	AttemptNumber  int
	MaxAttempts    int

	lease *lease
}

// TaskError is a handler failure with a stable code. Return it (or an error
// wrapping it) to choose the code, message and retryability reported to the
// gateway.
type TaskError struct {
	Code      string
	Message   string
	Retryable bool
}

func (e *TaskError) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Permanent returns a failure that must not be retried.
func Permanent(code, msg string) error {
	return &TaskError{Code: code, Message: msg}
}

// Retryable returns a failure after which the gateway may retry the task.
func Retryable(code, msg string) error {
	return &TaskError{Code: code, Message: msg, Retryable: true}
}

// APIError is an error answer (RFC 9457 problem) from the gateway.
type APIError struct {
	Op         string // the call, e.g. "acquire leases"
	Status     int
	Code       string // the problem's stable code, e.g. lease-lost
	Title      string
	Detail     string
	RequestID  string
	RetryAfter time.Duration // from Retry-After; 0 when absent
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: HTTP %d", e.Op, e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if msg := cmp.Or(e.Detail, e.Title); msg != "" {
		b.WriteString(": " + msg)
	}
	if e.RequestID != "" {
		b.WriteString(" (request " + e.RequestID + ")")
	}
	return b.String()
}

// Worker is one worker: it leases tasks from the gateway and runs them with
// its Handler. (The generated Worker is the control plane's view of a
// worker identity.)
type Worker struct {
	cfg        Config
	gatewayURL *url.URL
	client     *apiclient.ClientWithResponses
	caps       *apiclient.Capabilities
	log        *slog.Logger
	running    atomic.Bool

	// uploadHTTP PUTs artifacts to the gateway itself (mTLS);
	// foreignHTTP anywhere else, without the worker's certificate.
	uploadHTTP, foreignHTTP *http.Client
	// logChunkMax is the size of log chunks, lowered when the gateway
	// answers 413.
	logChunkMax atomic.Int64
	// id is the enrolled identity kept in StateDir; nil without StateDir.
	id *identity
	hc *http.Client // the client of calls to the gateway
}

// NewWorker returns the runtime of one worker. It validates cfg, applies its
// defaults and builds the HTTP client.
// It loads the certificate files at once, so a bad path fails here; so does a
// StateDir that holds no certificate when no EnrollmentToken is given.
// Enrollment itself, a call to the gateway, happens in Run.
func NewWorker(cfg Config) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var caps *apiclient.Capabilities
	if cfg.Capabilities != nil {
		raw, err := json.Marshal(cfg.Capabilities)
		if err != nil {
			return nil, fmt.Errorf("workerclient: capabilities: %w", err)
		}
		c := apiclient.Capabilities(raw)
		caps = &c
	}
	hc := cfg.HTTPClient
	var id *identity
	switch {
	case hc != nil:
	case cfg.StateDir != "":
		if id, err = newIdentity(cfg); err != nil {
			return nil, err
		}
		hc = &http.Client{Transport: id.tr, Timeout: clientTimeout(cfg.WaitSeconds)}
	default:
		if hc, err = NewHTTPClient(cfg); err != nil {
			return nil, err
		}
	}
	client, err := apiclient.NewClientWithResponses(cfg.GatewayURL, apiclient.WithHTTPClient(hc))
	if err != nil {
		return nil, fmt.Errorf("workerclient: %w", err)
	}
	foreign := cfg.UploadHTTPClient
	if foreign == nil {
		if foreign, err = newForeignHTTPClient(cfg); err != nil {
			return nil, err
		}
	}
	gatewayURL, err := url.Parse(cfg.GatewayURL)
	if err != nil {
		return nil, fmt.Errorf("workerclient: %w", err)
	}
	w := &Worker{cfg: cfg, gatewayURL: gatewayURL, client: client, caps: caps, log: cfg.Logger,
		uploadHTTP: uploadClient(hc), foreignHTTP: noRedirects(foreign), id: id, hc: hc}
	w.logChunkMax.Store(logChunkMax)
	return w, nil
}

// uploadClient is hc for uploads: no overall timeout (an upload's deadline is
// its session's), no redirects.
func uploadClient(hc *http.Client) *http.Client {
	c := *hc
	c.Timeout = 0
	return noRedirects(&c)
}

// noRedirects returns a copy of hc that follows no redirect: an upload goes
// where the session says or nowhere.
func noRedirects(hc *http.Client) *http.Client {
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// withDefaults returns cfg with its defaults applied, or why it is invalid.
func (cfg Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("workerclient: invalid config: "+format, args...)
	}
	if cfg.GatewayURL == "" {
		return bad("GatewayURL is required")
	}
	u, err := url.Parse(cfg.GatewayURL)
	if err != nil {
		return bad("GatewayURL: %v", err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return bad("GatewayURL %q must be an https:// URL with a host", cfg.GatewayURL)
	}
	if cfg.Handler == nil {
		return bad("Handler is required")
	}
	switch enrolled := cfg.StateDir != "" || cfg.EnrollmentToken != ""; {
	case enrolled && (cfg.CertFile != "" || cfg.KeyFile != "" || cfg.TLSConfig != nil || cfg.HTTPClient != nil):
		return bad("StateDir and EnrollmentToken (an enrolled identity) cannot be combined with CertFile, KeyFile, TLSConfig or HTTPClient")
	case cfg.EnrollmentToken != "" && cfg.StateDir == "":
		return bad("EnrollmentToken needs a StateDir to keep the certificate in")
	case !enrolled && cfg.HTTPClient == nil && cfg.TLSConfig == nil && (cfg.CertFile == "" || cfg.KeyFile == ""):
		return bad("CertFile and KeyFile (or StateDir with an EnrollmentToken, TLSConfig, or HTTPClient) are required")
	}
	switch {
	case cfg.Slots == 0:
		cfg.Slots = defaultSlots
	case cfg.Slots < 0 || cfg.Slots > maxSlots:
		return bad("Slots %d is outside 1..%d", cfg.Slots, maxSlots)
	}
	switch {
	case cfg.WaitSeconds == 0:
		cfg.WaitSeconds = defaultWaitSeconds
	case cfg.WaitSeconds < 0 || cfg.WaitSeconds > maxWaitSeconds:
		return bad("WaitSeconds %d is outside 1..%d", cfg.WaitSeconds, maxWaitSeconds)
	}
	switch {
	case cfg.DrainTimeout == 0:
		cfg.DrainTimeout = defaultDrainTimeout
	case cfg.DrainTimeout < 0:
		return bad("DrainTimeout %v is negative", cfg.DrainTimeout)
	}
	switch {
	case cfg.ResultBatchSize == 0:
		cfg.ResultBatchSize = defaultResultBatchSize
	case cfg.ResultBatchSize < 0 || cfg.ResultBatchSize > maxResultBatchSize:
		return bad("ResultBatchSize %d is outside 1..%d", cfg.ResultBatchSize, maxResultBatchSize)
	}
	if cfg.SoftwareVersion == "" {
		cfg.SoftwareVersion = defaultSoftwareVersion()
	}
	if len(cfg.SoftwareVersion) > maxSoftwareVersion {
		return bad("SoftwareVersion is longer than %d bytes", maxSoftwareVersion)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}

func defaultSoftwareVersion() string {
	v := "workerclient"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Path != "" {
		v = bi.Main.Path + "@" + bi.Main.Version
	}
	return truncate(v, maxSoftwareVersion)
}

// Run leases and runs tasks until ctx is cancelled, then drains: it stops
// polling at once, lets running tasks finish for up to DrainTimeout, cancels
// the rest, completes them all and returns. It returns nil after a drain,
// and an error wrapping ErrWorkerRevoked (and the *APIError) when the gateway
// revokes the worker. Run returns only after every goroutine it started has
// ended. A Worker runs at most one Run at a time.
//
// With a StateDir, Run first enrolls when the worker has no certificate yet
// (an error wrapping ErrEnrollmentTokenInvalid when the gateway refuses the
// token; nil when ctx is cancelled before enrollment succeeds), and renews
// the certificate while it runs (an error wrapping ErrWorkerRevoked or
// ErrCertificateExpired when the gateway refuses the renewal for good).
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("workerclient: Run is already running")
	}
	defer w.running.Store(false)
	if w.id != nil {
		// Connections of replaced certificates end with Run at the latest.
		defer w.hc.CloseIdleConnections()
		if err := w.id.ensure(ctx); err != nil {
			if ctx.Err() != nil {
				w.log.Info("worker stopped before enrolling")
				return nil
			}
			w.log.Error("worker stopped", "error", err)
			return err
		}
	}

	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	r := &runner{
		w:           w,
		base:        context.WithoutCancel(ctx),
		log:         w.log,
		leases:      make(map[uuid.UUID]*lease),
		hbWake:      make(chan struct{}, 1),
		slotFree:    make(chan struct{}, 1),
		stopPolling: stopPolling,
	}
	r.completions = &completionBatcher{client: w.client, base: r.base}

	hbCtx, stopHeartbeats := context.WithCancel(r.base)
	var hb sync.WaitGroup
	hb.Go(func() { r.heartbeatLoop(hbCtx) })
	args := []any{"gateway", w.cfg.GatewayURL, "slots", w.cfg.Slots,
		"wait_seconds", w.cfg.WaitSeconds, "software_version", w.cfg.SoftwareVersion}
	if w.id != nil {
		// Renewal goes on while draining: it stops with the heartbeats.
		hb.Go(func() { r.renewLoop(hbCtx) })
		workerID, renewAt, _ := w.id.state()
		args = append(args, "worker_id", workerID, "certificate_renew_in", max(time.Until(renewAt), 0).Round(time.Second).String())
	}

	r.log.Info("worker started", args...)
	r.pollLoop(pollCtx)
	r.drain()

	// Completions keep their leases alive, so heartbeats stop last.
	stopHeartbeats()
	hb.Wait()

	if err := r.fatalErr(); err != nil {
		r.log.Error("worker stopped", "error", err)
		return err
	}
	r.log.Info("worker stopped")
	return nil
}

// runner is the state of one Run.
type runner struct {
	w    *Worker
	base context.Context // Run's context without its cancellation: values only
	log  *slog.Logger

	mu     sync.Mutex
	leases map[uuid.UUID]*lease // held leases, from acquisition until completion ends
	fatal  error

	hbWake      chan struct{} // a lease was added: reschedule heartbeats
	slotFree    chan struct{} // a lease ended: a slot may be free
	stopPolling context.CancelFunc
	tasks       sync.WaitGroup
	// completions sends the slots' completions together.
	completions *completionBatcher
}

// lease is one held attempt. The fields from renewedAt on are guarded by
// runner.mu.
type lease struct {
	id      uuid.UUID
	token   string
	task    *LeasedTask
	log     *slog.Logger
	rt      *runner
	ctx     context.Context // the handler's context
	cancel  context.CancelCauseFunc
	stop    func()        // releases ctx's resources
	results *resultSender // the handler's result batches

	logMu      sync.Mutex
	logs       *logWriter // the attempt's log, from its first use
	logsCancel func()     // ends the log's sender
	logsClosed bool       // the handler returned: no new log

	renewedAt time.Time     // when the last renewal (or the poll) was sent
	expiresAt time.Time     // local, monotonic estimate of the lease's expiry
	interval  time.Duration // heartbeat interval
	lost      bool          // no longer held: not renewed, not completed
}

// notify wakes ch's reader without blocking.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (r *runner) fatalErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

// revoked stops the worker for good: the gateway no longer accepts it, so
// every lease is lost and polling stops.
func (r *runner) revoked(err error) {
	r.mu.Lock()
	if r.fatal == nil {
		r.fatal = fmt.Errorf("%w: %w", ErrWorkerRevoked, err)
		for _, ls := range r.leases {
			ls.lost = true
			ls.cancel(ErrLeaseLost)
		}
	}
	r.mu.Unlock()
	r.stopPolling()
}

// drain waits for the running tasks, cancelling them after DrainTimeout.
func (r *runner) drain() {
	done := make(chan struct{})
	go func() {
		r.tasks.Wait()
		close(done)
	}()
	r.mu.Lock()
	n := len(r.leases)
	r.mu.Unlock()
	if n > 0 {
		r.log.Info("draining running tasks", "tasks", n, "drain_timeout", r.w.cfg.DrainTimeout.String())
	}
	timer := time.NewTimer(r.w.cfg.DrainTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	r.mu.Lock()
	r.log.Warn("drain timeout: cancelling running tasks", "tasks", len(r.leases))
	for _, ls := range r.leases {
		ls.cancel(ErrDrainTimeout)
	}
	r.mu.Unlock()
	<-done
}

// ---- polling ----

// pollRequest is one poll, kept so that a retry repeats it exactly.
type pollRequest struct {
	key  string
	body apiclient.LeaseRequest
}

func (r *runner) newPoll(free int) *pollRequest {
	cfg := &r.w.cfg
	wait, sv, pv := cfg.WaitSeconds, cfg.SoftwareVersion, ProtocolVersion
	return &pollRequest{
		key: uuid.NewString(),
		body: apiclient.LeaseRequest{
			MaxTasks:        &free,
			WaitSeconds:     &wait,
			Capabilities:    r.w.caps,
			SoftwareVersion: &sv,
			ProtocolVersion: &pv,
		},
	}
}

func (r *runner) pollLoop(ctx context.Context) {
	var bo backoff
	var pending *pollRequest // a poll to repeat after a failure
	for {
		if pending == nil {
			free := r.waitForSlot(ctx)
			if free == 0 {
				return
			}
			pending = r.newPoll(free)
		}
		sent := time.Now()
		leases, err := r.acquire(ctx, pending)
		if err == nil {
			pending = nil
			r.startLeases(leases, sent)
			if len(leases) > 0 || time.Since(sent) >= minEmptyPoll {
				bo.reset()
				continue
			}
			if !sleep(ctx, bo.next()) {
				return
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if isRevoked(err) {
			r.revoked(err)
			return
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) && !isTransient(err) {
			switch apiErr.Status {
			case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
				// Our request is wrong; repeating it cannot help.
				r.abort(fmt.Errorf("workerclient: the gateway rejected the poll: %w", err))
				return
			}
			// 401/403 (an unknown certificate, a disabled worker) may be
			// fixed by an operator: keep trying, slowly, with a new poll.
			pending = nil
			r.log.Warn("poll refused", "error", err)
			if !sleep(ctx, backoffCap) {
				return
			}
			continue
		}
		delay := retryDelay(err, &bo)
		r.log.Warn("poll failed; retrying", "error", err, "retry_in", delay.String())
		if !sleep(ctx, delay) {
			return
		}
	}
}

// abort stops polling and makes Run return err once it has drained.
func (r *runner) abort(err error) {
	r.mu.Lock()
	if r.fatal == nil {
		r.fatal = err
	}
	r.mu.Unlock()
	r.stopPolling()
}

// waitForSlot returns the number of free slots once there is one, or 0 when
// ctx is done.
func (r *runner) waitForSlot(ctx context.Context) int {
	for {
		r.mu.Lock()
		free := r.w.cfg.Slots - len(r.leases)
		r.mu.Unlock()
		if free > 0 {
			return free
		}
		select {
		case <-ctx.Done():
			return 0
		case <-r.slotFree:
		}
	}
}

func (r *runner) acquire(ctx context.Context, p *pollRequest) ([]apiclient.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(*p.body.WaitSeconds)*time.Second+pollMargin)
	defer cancel()
	resp, err := r.w.client.AcquireLeasesWithResponse(ctx, &apiclient.AcquireLeasesParams{IdempotencyKey: &p.key}, p.body)
	if err != nil {
		return nil, fmt.Errorf("acquire leases: %w", err)
	}
	if err := checkResponse("acquire leases", resp.HTTPResponse, resp.Body); err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, fmt.Errorf("acquire leases: unexpected answer %s", resp.Status())
	}
	return resp.JSON200.Leases, nil
}

// startLeases registers the leases a poll sent at sent and runs each in its
// own goroutine.
func (r *runner) startLeases(leases []apiclient.Lease, sent time.Time) {
	for i := range leases {
		l := &leases[i]
		ls := r.newLease(l, sent)
		r.mu.Lock()
		_, dup := r.leases[ls.id]
		over := len(r.leases) >= r.w.cfg.Slots
		if !dup && !over {
			r.leases[ls.id] = ls
		}
		r.mu.Unlock()
		switch {
		case dup: // a replayed poll answer for a lease already running
			ls.stop()
		case over:
			// The gateway granted more than asked: give it back at once
			// rather than run more tasks than Slots.
			ls.log.Warn("lease beyond free slots; releasing it")
			r.tasks.Go(func() {
				defer ls.stop()
				r.complete(ls, apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcomeCancelled, Error: &apiclient.AttemptError{
					Code: CodeOverCapacity, Message: new("the worker has no free slot"), Retryable: new(true),
				}})
			})
		default:
			ls.log.Info("lease acquired", "attempt_number", ls.task.AttemptNumber,
				"max_attempts", ls.task.MaxAttempts, "lease_ttl", ls.expiresAt.Sub(sent).String())
			r.tasks.Go(func() { r.runTask(ls) })
		}
	}
	if len(leases) > 0 {
		notify(r.hbWake)
	}
}

func (r *runner) newLease(l *apiclient.Lease, sent time.Time) *lease {
	s := &l.Task
	task := &LeasedTask{
		ID:             s.Id,
		AttemptID:      l.AttemptId,
		Type:           string(s.TaskType),
		OrganizationID: s.OrganizationId,
		ScanID:         s.ScanId,
		ScanJobID:      s.ScanJobId,
		Payload:        s.Payload,
		AttemptNumber:  s.AttemptNumber,
		MaxAttempts:    s.MaxAttempts,
	}
	ttl := seconds(l.LeaseTtlSeconds)
	ls := &lease{
		rt:        r,
		id:        l.AttemptId,
		token:     l.LeaseToken,
		task:      task,
		renewedAt: sent,
		expiresAt: sent.Add(ttl),
		interval:  heartbeatInterval(seconds(l.HeartbeatIntervalSeconds), ttl),
		log: r.log.With("attempt_id", l.AttemptId, "task_id", s.Id,
			"task_type", s.TaskType, "organization_id", s.OrganizationId),
	}
	task.lease = ls
	ls.results = newResultSender(ls.id, r.w.cfg.ResultBatchSize, maxResultBatchBytes, r.resultDeliverer(ls))

	ctx, cancel := context.WithCancelCause(r.base)
	ls.ctx, ls.cancel, ls.stop = ctx, cancel, func() { cancel(context.Canceled) }
	if budget, ok := attemptBudget(s); ok {
		dctx, dcancel := context.WithDeadlineCause(ctx, sent.Add(budget), ErrAttemptDeadline)
		ls.ctx, ls.stop = dctx, func() { dcancel(); cancel(context.Canceled) }
	}
	return ls
}

// attemptBudget is how long the handler may run: the nearer of the attempt
// and execution deadlines, less a margin to report the failure in time.
func attemptBudget(s *apiclient.TaskSnapshot) (time.Duration, bool) {
	var budget time.Duration
	ok := false
	for _, d := range [...]*float64{s.AttemptDeadlineInSeconds, s.ExecutionDeadlineInSeconds} {
		if d == nil {
			continue
		}
		if v := seconds(*d); !ok || v < budget {
			budget, ok = v, true
		}
	}
	if !ok {
		return 0, false
	}
	budget -= min(deadlineMargin, budget/10)
	return max(budget, 0), true
}

// heartbeatInterval is the gateway's interval, or a third of the TTL when it
// gives none, never longer than half the TTL nor shorter than
// minHeartbeatInterval.
func heartbeatInterval(interval, ttl time.Duration) time.Duration {
	if interval <= 0 {
		interval = ttl / 3
	}
	if ttl > 0 && interval > ttl/2 {
		interval = ttl / 2
	}
	return max(interval, minHeartbeatInterval)
}

// ---- one task ----

func (r *runner) runTask(ls *lease) {
	defer r.release(ls)
	r.start(ls)
	var herr error
	if ls.ctx.Err() != nil {
		herr = context.Cause(ls.ctx) // cancelled, lost or out of time before it began
	} else {
		herr = callHandler(r.w.cfg.Handler, ls.ctx, ls.task)
	}
	// What a successful handler left buffered is sent before completing —
	// its last batch inside the completion itself; the completion claims
	// only batches the gateway acknowledged (or carries).
	var (
		lastSeq int
		final   *resultBatch
		ferr    error
	)
	if herr == nil {
		lastSeq, final, ferr = ls.results.finishInline(ls.ctx)
	} else {
		lastSeq, ferr = ls.results.finish(ls.ctx, false)
	}
	if ferr != nil && herr == nil {
		herr = undeliveredError(ferr)
		ls.log.Warn("results could not be delivered", "error", ferr)
	}
	// The end of the log goes out before the completion, whatever the
	// outcome, unless the lease is lost.
	r.finishLogs(ls)
	cause := context.Cause(ls.ctx)
	if r.isLost(ls) {
		cause = ErrLeaseLost
	}
	var perr *panicError
	if errors.As(herr, &perr) {
		ls.log.Error("handler panicked", "panic", perr.value, "stack", string(perr.stack))
	}
	req, ok := completionFor(herr, cause)
	if !ok {
		ls.log.Warn("lease lost; not completing the attempt", "handler_error", errString(herr))
		return
	}
	if final != nil {
		var b apiclient.ResultBatch
		if err := json.Unmarshal(final.body, &b); err == nil {
			req.FinalResults, lastSeq = &b, final.seq
		} else {
			ls.log.Error("final result batch unreadable; not sent", "error", err)
		}
	}
	if lastSeq > 0 {
		req.LastSequenceNumber = &lastSeq
	}
	r.complete(ls, req)
}

// release forgets a finished lease and frees its slot.
func (r *runner) release(ls *lease) {
	r.mu.Lock()
	delete(r.leases, ls.id)
	r.mu.Unlock()
	ls.stop()
	notify(r.slotFree)
}

func (r *runner) isLost(ls *lease) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ls.lost
}

// markLost records that the lease is no longer held and cancels its handler.
func (r *runner) markLost(ls *lease) {
	r.mu.Lock()
	ls.lost = true
	r.mu.Unlock()
	ls.cancel(ErrLeaseLost)
}

// start marks the attempt running. A cancellation or a lost lease it learns
// about cancels ls.ctx; when the gateway cannot be reached the handler runs
// anyway, since the next heartbeat starts the attempt too.
func (r *runner) start(ls *lease) {
	ctx, cancel := context.WithTimeout(ls.ctx, startRetryWindow)
	defer cancel()
	var bo backoff
	for {
		sent := time.Now()
		st, err := r.startOnce(ctx, ls)
		switch {
		case err == nil:
			r.applyStatus(ls, st, sent, false)
			return
		case ls.ctx.Err() != nil:
			return
		case isRevoked(err):
			r.revoked(err)
			return
		case !isTransient(err):
			ls.log.Warn("start refused; abandoning the attempt", "error", err)
			r.markLost(ls)
			return
		}
		delay := retryDelay(err, &bo)
		ls.log.Warn("start failed; retrying", "error", err, "retry_in", delay.String())
		if !sleep(ctx, delay) {
			if ls.ctx.Err() == nil {
				ls.log.Warn("could not start the attempt; running it anyway")
			}
			return
		}
	}
}

func (r *runner) startOnce(ctx context.Context, ls *lease) (*apiclient.LeaseStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := r.w.client.StartAttemptWithResponse(ctx, ls.id, &apiclient.StartAttemptParams{LeaseToken: ls.token})
	if err != nil {
		return nil, fmt.Errorf("start attempt: %w", err)
	}
	if err := checkResponse("start attempt", resp.HTTPResponse, resp.Body); err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, fmt.Errorf("start attempt: unexpected answer %s", resp.Status())
	}
	return resp.JSON200, nil
}

// complete reports the attempt's outcome, retrying transport errors, 429 and
// 5xx for up to completeRetryWindow. Completion is idempotent, so a repeat
// of a call whose answer was lost is answered 200 again.
func (r *runner) complete(ls *lease, req apiclient.CompleteRequest) {
	ctx, cancel := context.WithTimeout(r.base, completeRetryWindow)
	defer cancel()
	var bo backoff
	for {
		res, err := r.completeOnce(ctx, ls, req)
		if err == nil {
			args := []any{"outcome", req.Outcome, "attempt_status", res.AttemptStatus, "task_state", res.TaskState}
			if req.Error != nil {
				args = append(args, "error_code", req.Error.Code)
			}
			if req.LastSequenceNumber != nil {
				args = append(args, "last_sequence_number", *req.LastSequenceNumber)
			}
			ls.log.Info("attempt completed", args...)
			return
		}
		var apiErr *APIError
		switch {
		case isRevoked(err):
			r.revoked(err)
			return
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict:
			ls.log.Warn("completion refused", "outcome", req.Outcome, "error", err)
			return
		case !isTransient(err):
			ls.log.Error("completion refused", "outcome", req.Outcome, "error", err)
			return
		}
		delay := retryDelay(err, &bo)
		ls.log.Warn("completion failed; retrying", "error", err, "retry_in", delay.String())
		if !sleep(ctx, delay) {
			ls.log.Error("giving up completing the attempt; its lease will expire", "outcome", req.Outcome, "error", err)
			return
		}
	}
}

func (r *runner) completeOnce(ctx context.Context, ls *lease, req apiclient.CompleteRequest) (*apiclient.CompleteResponse, error) {
	return r.completions.complete(ctx, apiclient.CompletionItem{
		AttemptId: ls.id, LeaseToken: ls.token, Outcome: req.Outcome, Error: req.Error,
		LastSequenceNumber: req.LastSequenceNumber, FinalResults: req.FinalResults,
	})
}

// panicError is a recovered handler panic.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panic: %v", e.value) }

func callHandler(h Handler, ctx context.Context, task *LeasedTask) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: debug.Stack()}
		}
	}()
	return h(ctx, task)
}

// completionFor maps a handler's result and the cause of its context's
// cancellation (nil when not cancelled) to the completion to send; false
// means send none.
func completionFor(herr, cause error) (apiclient.CompleteRequest, bool) {
	switch {
	case errors.Is(cause, ErrLeaseLost):
		return apiclient.CompleteRequest{}, false
	case errors.Is(cause, ErrCancelRequested):
		return apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcomeCancelled}, true
	case errors.Is(cause, ErrDrainTimeout):
		return apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcomeCancelled, Error: &apiclient.AttemptError{
			Code: CodeWorkerShutdown, Message: new("the worker shut down before the task finished"), Retryable: new(true),
		}}, true
	case herr == nil:
		return apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcomeSucceeded}, true
	}
	ae := apiclient.AttemptError{Code: CodeHandlerError, Message: new(herr.Error()), Retryable: new(true)}
	var te *TaskError
	var pe *panicError
	switch {
	case errors.As(herr, &te):
		ae.Code, ae.Message, ae.Retryable = cmp.Or(te.Code, CodeHandlerError), new(te.Message), new(te.Retryable)
	case errors.As(herr, &pe):
		ae.Code = CodeHandlerPanic
	case errors.Is(cause, ErrAttemptDeadline):
		ae.Code = CodeDeadline
	}
	ae.Code = truncate(ae.Code, maxErrorCode)
	if *ae.Message == "" {
		ae.Message = nil
	} else {
		ae.Message = new(truncate(*ae.Message, maxErrorMessage))
	}
	return apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcomeFailed, Error: &ae}, true
}

// ---- heartbeats ----

// heartbeatLoop renews every held lease in one call whenever the earliest
// one is due, and gives up leases whose local expiry passes unrenewed.
func (r *runner) heartbeatLoop(ctx context.Context) {
	var bo backoff
	var retryAt time.Time // after a failed renewal, not before this
	var timer *time.Timer
	for {
		now := time.Now()
		renewAt, expireAt, ok := r.schedule(now)
		var wake <-chan time.Time
		if ok {
			at := renewAt
			if retryAt.After(at) {
				at = retryAt
			}
			if expireAt.Before(at) {
				at = expireAt
			}
			timer = time.NewTimer(at.Sub(now))
			wake = timer.C
		}
		fired := false
		select {
		case <-ctx.Done():
		case <-r.hbWake: // a new lease: its interval may be the shortest
		case <-wake:
			fired = true
		}
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		if ctx.Err() != nil {
			return
		}
		if !fired {
			continue
		}
		now = time.Now()
		if now.Before(renewAt) || now.Before(retryAt) {
			continue // woken to expire a lease, not to renew
		}
		if err := r.heartbeat(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			delay := retryDelay(err, &bo)
			retryAt = time.Now().Add(delay)
			r.log.Warn("heartbeat failed; retrying", "error", err, "retry_in", delay.String())
			continue
		}
		bo.reset()
		retryAt = time.Time{}
	}
}

// schedule marks the leases whose local expiry has passed as lost and
// returns when the next renewal is due and when the next lease expires;
// false when no lease is held.
func (r *runner) schedule(now time.Time) (renewAt, expireAt time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ls := range r.leases {
		if ls.lost {
			continue
		}
		if !now.Before(ls.expiresAt) {
			ls.lost = true
			ls.cancel(ErrLeaseLost)
			ls.log.Warn("lease expired without a renewal")
			continue
		}
		due := ls.renewedAt.Add(ls.interval)
		if !ok || due.Before(renewAt) {
			renewAt = due
		}
		if !ok || ls.expiresAt.Before(expireAt) {
			expireAt = ls.expiresAt
		}
		ok = true
	}
	return renewAt, expireAt, ok
}

// heartbeat renews every held lease with one call.
func (r *runner) heartbeat(ctx context.Context) error {
	r.mu.Lock()
	refs := make([]apiclient.LeaseRef, 0, len(r.leases))
	byID := make(map[uuid.UUID]*lease, len(r.leases))
	for id, ls := range r.leases {
		if !ls.lost {
			refs = append(refs, apiclient.LeaseRef{AttemptId: id, LeaseToken: ls.token})
			byID[id] = ls
		}
	}
	r.mu.Unlock()
	if len(refs) == 0 {
		return nil
	}

	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	sent := time.Now()
	sv := r.w.cfg.SoftwareVersion
	resp, err := r.w.client.HeartbeatWorkerWithResponse(ctx, apiclient.WorkerHeartbeatRequest{
		Leases: refs, Capabilities: r.w.caps, SoftwareVersion: &sv,
	})
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if err := checkResponse("heartbeat", resp.HTTPResponse, resp.Body); err != nil {
		if isRevoked(err) {
			r.revoked(err)
		}
		return err
	}
	if resp.JSON200 == nil {
		return fmt.Errorf("heartbeat: unexpected answer %s", resp.Status())
	}
	for i := range resp.JSON200.Leases {
		st := &resp.JSON200.Leases[i]
		if ls := byID[st.AttemptId]; ls != nil {
			r.applyStatus(ls, st, sent, true)
			delete(byID, st.AttemptId)
		}
	}
	// A lease the answer left out is not renewed, but its next renewal is
	// not due at once either: it expires locally unless a later answer
	// renews it.
	r.mu.Lock()
	for _, ls := range byID {
		ls.renewedAt = sent
	}
	r.mu.Unlock()
	return nil
}

// applyStatus records a lease's state as of a request sent at sent.
// renewal says whether the request renewed the lease (a heartbeat) or only
// reported on it (start).
func (r *runner) applyStatus(ls *lease, st *apiclient.LeaseStatus, sent time.Time, renewal bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ls.lost {
		return
	}
	switch {
	case st.State == stateLost:
		ls.lost = true
		ls.log.Warn("the gateway reports the lease lost")
		ls.cancel(ErrLeaseLost)
		return
	case st.State == stateCancelRequested || st.CancelRequested:
		if ls.ctx.Err() == nil {
			ls.log.Info("the gateway requested cancellation")
		}
		ls.cancel(ErrCancelRequested) // the lease is still renewed until completion
	}
	ttl := seconds(st.LeaseTtlSeconds)
	ls.expiresAt = sent.Add(ttl)
	if st.HeartbeatIntervalSeconds != nil {
		ls.interval = heartbeatInterval(seconds(*st.HeartbeatIntervalSeconds), ttl)
	}
	if renewal {
		ls.renewedAt = sent
	}
}

// ---- errors, backoff and small helpers ----

// checkResponse returns nil for a 2xx answer and an *APIError otherwise,
// with the problem's fields when the body is a problem document.
func checkResponse(op string, hr *http.Response, body []byte) error {
	if hr == nil {
		return fmt.Errorf("%s: no response", op)
	}
	if hr.StatusCode >= 200 && hr.StatusCode < 300 {
		return nil
	}
	e := &APIError{Op: op, Status: hr.StatusCode}
	if strings.Contains(hr.Header.Get("Content-Type"), "json") {
		var p struct {
			Code      string `json:"code"`
			Title     string `json:"title"`
			Detail    string `json:"detail"`
			RequestID string `json:"request_id"`
		}
		if json.Unmarshal(body, &p) == nil {
			e.Code, e.Title, e.Detail, e.RequestID = p.Code, p.Title, p.Detail, p.RequestID
		}
	}
	if e.Title == "" {
		e.Title = http.StatusText(hr.StatusCode)
	}
	if d, ok := parseRetryAfter(hr.Header.Get("Retry-After"), hr.Header.Get("Date")); ok {
		e.RetryAfter = d
	}
	return e
}

// isTransient reports whether repeating the call may succeed: a transport
// error, a timeout, 429, a 5xx, or a repeat of an idempotent request that
// arrived while the first one was still being served.
func isTransient(err error) bool {
	var e *APIError
	if !errors.As(err, &e) {
		return true
	}
	return e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests || e.Status >= 500 ||
		e.Code == codeIdempotencyInFlight
}

func isRevoked(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == codeWorkerRevoked
}

// retryDelay is the gateway's Retry-After when it sent one, else the next
// backoff step.
func retryDelay(err error, bo *backoff) time.Duration {
	var e *APIError
	if errors.As(err, &e) && e.RetryAfter > 0 {
		bo.attempt++ // keep growing in case the next answer has none
		return e.RetryAfter
	}
	return bo.next()
}

// parseRetryAfter reads a Retry-After header: delay-seconds, or an HTTP date
// measured against the answer's own Date header (never against our clock).
func parseRetryAfter(v, date string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return min(time.Duration(n)*time.Second, maxRetryAfter), true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	now, err := http.ParseTime(date)
	if err != nil {
		return 0, false
	}
	return min(max(at.Sub(now), 0), maxRetryAfter), true
}

// backoff is exponential backoff with full jitter: the n-th delay is uniform
// in [0, min(backoffCap, backoffBase·2ⁿ)].
type backoff struct{ attempt int }

func (b *backoff) next() time.Duration {
	d := jitter(backoffCeiling(b.attempt))
	b.attempt++
	return d
}

func (b *backoff) reset() { b.attempt = 0 }

func backoffCeiling(attempt int) time.Duration {
	if attempt >= 30 { // 2^30·base is far past the cap; avoid overflow
		return backoffCap
	}
	return min(backoffBase<<attempt, backoffCap)
}

func jitter(ceiling time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// sleep waits d or until ctx is done, reporting whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// seconds converts a duration in seconds from the contract.
func seconds[F ~float32 | ~float64](s F) time.Duration {
	return time.Duration(float64(s) * float64(time.Second))
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
