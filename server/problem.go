package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store"
)

// Problem is an RFC 9457 problem with a stable code. It is the only error
// shape that leaves the server.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	// Detail is problem.Text, so nothing else can be assigned to it.
	Detail    problem.Text `json:"detail,omitempty"`
	Code      string       `json:"code"`
	RequestID string       `json:"request_id,omitempty"`
	// ExpectedOffset is where a log chunk must start (log-offset-mismatch).
	ExpectedOffset *int64 `json:"expected_offset,omitempty"`
	// OutOfScopeTargets are a scan's targets outside its organization's
	// scan scope (target-out-of-scope).
	OutOfScopeTargets []string `json:"out_of_scope_targets,omitempty"`
	// RetryAfter, when set, becomes the Retry-After header (seconds).
	RetryAfter int `json:"-"`
	// closeConnection sends Connection: close with the answer.
	closeConnection bool
	// cause is logged, never shown.
	cause error
}

func (p *Problem) Error() string {
	if p.cause != nil {
		return p.Code + ": " + p.cause.Error()
	}
	return p.Code + ": " + string(p.Detail)
}

func (p *Problem) Unwrap() error { return p.cause }

// statusClientClosedRequest answers a request whose client went away.
const statusClientClosedRequest = 499

// problemTypeBase prefixes problem type URIs; the code names the type.
const problemTypeBase = "https://worker-gateway.dev/problems/"

// newProblem builds a problem. detail is problem.Text: a constant converts
// implicitly, anything built at run time needs a conversion a reviewer sees.
func newProblem(status int, code string, detail problem.Text) *Problem {
	return &Problem{Type: problemTypeBase + code, Title: http.StatusText(status), Status: status, Code: code, Detail: detail}
}

// sentinelAnswer is what a client sees for a sentinel error.
type sentinelAnswer struct {
	status int
	code   string
	// detail is shown unless the error carries problem.Text of its own
	// (problem.Wrap(store.ErrInvalid, "why")).
	detail problem.Text
	// retryAfter, in seconds, becomes Retry-After.
	retryAfter int
	// closeConnection ends the connection after the answer (HTTP/2:
	// GOAWAY), so a revoked worker keeps nothing it authenticated before.
	closeConnection bool
}

// sentinelAnswers is the one mapping of sentinel errors to answers. Order
// does not matter: sentinelFor takes the sentinel nearest the outside of the
// error's chain, so one that wraps another wins (store.ErrUnpersistedBatch
// wraps ErrConflict, store.ErrUploadTooLarge wraps ErrInvalid).
// TestSentinelAnswers checks every store sentinel is here with a non-500
// answer and every code is in openapi.yaml.
var sentinelAnswers = map[error]sentinelAnswer{
	store.ErrNotFound:             {status: http.StatusNotFound, code: problem.NotFound, detail: "no such resource"},
	store.ErrLeaseLost:            {status: http.StatusConflict, code: problem.LeaseLost, detail: "the lease for this attempt is no longer held"},
	store.ErrAttemptFinished:      {status: http.StatusConflict, code: problem.AttemptFinished, detail: "the attempt already ended with another outcome"},
	store.ErrTaskFinished:         {status: http.StatusConflict, code: problem.TaskFinished, detail: "the task already finished"},
	store.ErrTaskNotRetryable:     {status: http.StatusConflict, code: problem.TaskNotRetryable, detail: "only failed_terminal and cancelled tasks can be retried"},
	store.ErrIdempotencyKeyReused: {status: http.StatusUnprocessableEntity, code: problem.IdempotencyKeyReused, detail: "this Idempotency-Key was used with a different request"},
	store.ErrIdempotencyInFlight: {status: http.StatusConflict, code: problem.IdempotencyInFlight,
		detail: "a request with this Idempotency-Key is still being processed; retry it", retryAfter: 1},
	store.ErrWorkerRevoked:       {status: http.StatusForbidden, code: problem.WorkerRevoked, detail: "this worker has been revoked", closeConnection: true},
	store.ErrWorkerDisabled:      {status: http.StatusForbidden, code: problem.WorkerDisabled, detail: "this worker is disabled"},
	store.ErrForbidden:           {status: http.StatusForbidden, code: problem.Forbidden, detail: "this operation is not allowed for this caller"},
	store.ErrConflict:            {status: http.StatusConflict, code: problem.Conflict, detail: "the request conflicts with existing data"},
	store.ErrInvalid:             {status: http.StatusBadRequest, code: problem.BadRequest, detail: "the request is invalid"},
	store.ErrUnpersistedBatch:    {status: http.StatusConflict, code: problem.BatchNotPersisted, detail: "a result batch the completion claims was never persisted"},
	store.ErrSequenceUsed:        {status: http.StatusConflict, code: problem.SequenceNumberUsed, detail: "another batch of this attempt already has this sequence number"},
	store.ErrScanFinished:        {status: http.StatusConflict, code: problem.ScanFinished, detail: "the scan already finished"},
	store.ErrScanBusy:            {status: http.StatusConflict, code: problem.ScanBusy, detail: "another job of the scan is in flight; a scan runs one job at a time"},
	store.ErrOutOfScope:          {status: http.StatusBadRequest, code: problem.TargetOutOfScope, detail: "scan targets lie outside the organization's scan scope"},
	store.ErrUploadTooLarge:      {status: http.StatusRequestEntityTooLarge, code: problem.PayloadTooLarge, detail: "the artifact exceeds the size limit"},
	store.ErrUploadExpired:       {status: http.StatusConflict, code: problem.UploadExpired, detail: "the upload session has expired"},
	store.ErrUploadState:         {status: http.StatusConflict, code: problem.UploadState, detail: "the upload session is not open for this (already uploaded, committed, failed or expired)"},
	store.ErrUploadMismatch:      {status: http.StatusConflict, code: problem.UploadMismatch, detail: "the uploaded object does not match the declared size or SHA-256"},
	store.ErrUploadMissing:       {status: http.StatusConflict, code: problem.UploadMissing, detail: "nothing was uploaded for this session"},
	store.ErrEnrollmentToken:     {status: http.StatusUnauthorized, code: problem.EnrollmentTokenInvalid, detail: "the enrollment token is unknown, already used or expired"},
	store.ErrParentTokenInactive: {status: http.StatusUnauthorized, code: problem.Unauthenticated, detail: "the API token is unknown, revoked or expired"},
	store.ErrScheduleTooFrequent: {status: http.StatusBadRequest, code: problem.ScheduleTooFrequent,
		detail: "the schedule would fire more often than this gateway allows"},
	store.ErrQuotaExceeded: {status: http.StatusForbidden, code: problem.QuotaExceeded,
		detail: "the organization has reached its quota"},
	store.ErrScheduleRunInProgress: {status: http.StatusConflict, code: problem.ScheduleRunning,
		detail: "the schedule's previous run is still active and its overlap policy is not allow"},
	store.ErrBatcherClosed: {status: http.StatusServiceUnavailable, code: problem.ShuttingDown,
		detail: "this gateway replica is shutting down; retry", retryAfter: 1},
	errBodyStalled: {status: http.StatusRequestTimeout, code: problem.RequestTimeout,
		detail: "the request body stopped arriving; send it again"},
	// The client went away before its answer: nobody reads this one, and
	// it is not the server's failure (nginx's 499).
	context.Canceled: {status: statusClientClosedRequest, code: problem.ClientClosedRequest, detail: "the client closed the request"},
}

// sentinelFor finds the answer for the outermost sentinel in err's tree
// (depth first, like errors.Is; an error's own Is method counts too).
func sentinelFor(err error) (sentinelAnswer, bool) {
	if err == nil {
		return sentinelAnswer{}, false
	}
	// A map lookup hashes its key, which panics for an uncomparable type.
	if reflect.TypeOf(err).Comparable() {
		if a, ok := sentinelAnswers[err]; ok {
			return a, true
		}
	}
	if is, ok := err.(interface{ Is(error) bool }); ok {
		for sentinel, a := range sentinelAnswers {
			// TestSentinelAnswers checks no sentinel claims another, so at
			// most one matches here and map order cannot change the answer.
			if is.Is(sentinel) {
				return a, true
			}
		}
	}
	switch u := err.(type) { //nolint:errorlint // it walks the chain itself, one link at a time
	case interface{ Unwrap() error }:
		return sentinelFor(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if a, ok := sentinelFor(e); ok {
				return a, true
			}
		}
	}
	return sentinelAnswer{}, false
}

// problemFor decides what a client sees for an error: a *Problem as it is,
// a sentinel by sentinelAnswers, then the few errors recognised by type;
// anything unexpected is a 500 whose cause is only logged. The detail is
// never an error's own text: only problem.Text reaches a client.
func problemFor(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var outOfScope *store.OutOfScopeError
	if errors.As(err, &outOfScope) {
		return outOfScopeProblem(err, outOfScope)
	}
	var maxBytes *http.MaxBytesError
	if errors.As(err, &maxBytes) {
		return newProblem(http.StatusRequestEntityTooLarge, problem.PayloadTooLarge,
			problem.Text(fmt.Sprintf("the request body exceeds %d bytes", maxBytes.Limit)))
	}
	if a, ok := sentinelFor(err); ok {
		p := withCause(newProblem(a.status, a.code, a.detail), err)
		if text, ok := problem.PublicText(err); ok {
			p.Detail = text
		}
		p.RetryAfter = a.retryAfter
		p.closeConnection = a.closeConnection
		return p
	}
	switch {
	case isDataException(err):
		return withCause(newProblem(http.StatusBadRequest, problem.BadRequest, "a value in the request cannot be stored (out of range or not representable)"), err)
	case isUnavailable(err):
		// An unreachable or saturated database: the client should retry.
		p := withCause(newProblem(http.StatusServiceUnavailable, problem.Unavailable, "the database is unavailable; retry later"), err)
		p.RetryAfter = 2
		return p
	}
	return withCause(newProblem(http.StatusInternalServerError, problem.Internal, "an internal error occurred"), err)
}

// publicTextOr is the problem.Text err carries, or fallback.
func publicTextOr(err error, fallback problem.Text) problem.Text {
	if text, ok := problem.PublicText(err); ok {
		return text
	}
	return fallback
}

func withCause(p *Problem, err error) *Problem {
	p.cause = err
	return p
}

// isDataException recognises PostgreSQL refusing a value from the request.
func isDataException(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && len(pgErr.Code) == 5 && pgErr.Code[:2] == "22"
}

// isUnavailable recognises a database that cannot be reached or refuses
// work for now: connection failures, shutdowns, exhausted connection slots,
// and a pool that could not hand out a connection in time.
func isUnavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "22": // data exception: a value PostgreSQL cannot represent
			return false
		case "08", "57", "53": // connection exception, operator intervention, insufficient resources
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	// ErrConnClosed: a pooled connection that died with the server (a
	// restart) — not "safe to retry" for pgx because a COMMIT may have
	// been in flight, which is why the answer is a 503: the client repeats
	// its idempotent request and learns the outcome.
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded)
}

// writeProblem writes a problem as application/problem+json and logs it:
// 4xx at Info, 5xx at Error with the cause.
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem, logger *slog.Logger) {
	p.RequestID = requestIDFrom(r.Context())
	noteProblem(r.Context(), p.Code)
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	if p.closeConnection {
		w.Header().Set("Connection", "close")
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
	level := slog.LevelInfo
	if p.Status >= 500 {
		level = slog.LevelError
	}
	attrs := []any{"status", p.Status, "code", p.Code, "request_id", p.RequestID, "method", r.Method, "path", r.URL.Path}
	if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
		attrs = append(attrs, "trace_id", sc.TraceID().String())
	}
	if p.cause != nil {
		attrs = append(attrs, "cause", p.cause.Error())
	}
	logger.Log(r.Context(), level, "request refused", attrs...)
}
