// This file holds the Worker and Run: what a Handler is given, the state
// of one Run (its leases, its fatal error) and the drain on shutdown. The
// poll loop is in poll.go, one task's run in task.go, heartbeats in
// heartbeat.go and the retry of calls in retry.go.

package workerclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/protocol"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// ProtocolVersion is the worker protocol version this runtime speaks, sent
// with every poll (internal/protocol states it and the range a gateway
// serves).
const ProtocolVersion = protocol.Current

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
	stateLost            apiclient.LeaseState = "lost"
	stateCancelRequested apiclient.LeaseState = "cancel_requested"
)

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
	// Secrets are the values of the organization's secrets the task
	// references (its secret_refs), by name; nil when it references none.
	// Keep them out of what the task sends; the gateway redacts them from
	// everything it stores of the attempt (log, results, errors, artifact
	// names) as a safety net.
	Secrets map[string]string

	lease *lease
	sink  TaskSink // set instead of lease by NewDetachedTask
}

// SecretEnv returns the task's secrets as NAME=value environment entries,
// sorted by name, for a handler that runs a subprocess: append them to its
// cmd.Env (secret names have the shape of environment variables).
func (t *LeasedTask) SecretEnv() []string {
	env := make([]string, 0, len(t.Secrets))
	for name, value := range t.Secrets {
		env = append(env, name+"="+value)
	}
	slices.Sort(env)
	return env
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
		polling:     pollCtx,
		stopPolling: stopPolling,
	}
	r.completions = &completionBatcher{client: w.client, base: r.base, next: r}

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
	// pollParked is true while the poll loop waits for a free slot: it
	// has no poll out, so a completion call may lease the slots it frees.
	pollParked bool
	// nextReserved counts the slots completion calls in flight may lease;
	// the poll loop does not poll for them.
	nextReserved int
	// nextRefusedUntil: the gateway refused `next`; until then completion
	// calls do not ask for leases.
	nextRefusedUntil time.Time

	hbWake      chan struct{}   // a lease was added: reschedule heartbeats
	slotFree    chan struct{}   // a lease ended: a slot may be free
	polling     context.Context // ends when polling stops
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
