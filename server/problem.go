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
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/worker-gateway/gateway/store"
)

// Problem is an RFC 9457 problem with a stable code. It is the only error
// shape that leaves the server.
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail,omitempty"`
	Code      string `json:"code"`
	RequestID string `json:"request_id,omitempty"`
	// ExpectedOffset is where a log chunk must start (log-offset-mismatch).
	ExpectedOffset *int64 `json:"expected_offset,omitempty"`
	// RetryAfter, when set, becomes the Retry-After header (seconds).
	RetryAfter int `json:"-"`
	// cause is logged, never shown.
	cause error
}

func (p *Problem) Error() string {
	if p.cause != nil {
		return p.Code + ": " + p.cause.Error()
	}
	return p.Code + ": " + p.Detail
}

func (p *Problem) Unwrap() error { return p.cause }

// statusClientClosedRequest answers a request whose client went away.
const statusClientClosedRequest = 499

// problemTypeBase prefixes problem type URIs; the code names the type.
const problemTypeBase = "https://worker-gateway.dev/problems/"

// newProblem builds a problem whose detail is safe to show.
func newProblem(status int, code, detail string) *Problem {
	return &Problem{Type: problemTypeBase + code, Title: http.StatusText(status), Status: status, Code: code, Detail: detail}
}

// problemFor decides what a client sees for an error. Sentinels from the
// store map one-to-one; anything unexpected is a 500 whose cause is only
// logged, except an unreachable or saturated database, which is a 503 the
// client should retry.
func problemFor(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &maxBytes):
		return newProblem(http.StatusRequestEntityTooLarge, "payload-too-large",
			fmt.Sprintf("the request body exceeds %d bytes", maxBytes.Limit))
	case errors.Is(err, store.ErrUnpersistedBatch):
		return newProblem(http.StatusConflict, "batch-not-persisted", "a result batch the completion claims was never persisted")
	case errors.Is(err, store.ErrNotFound):
		return newProblem(http.StatusNotFound, "not-found", "no such resource")
	case errors.Is(err, store.ErrLeaseLost):
		return newProblem(http.StatusConflict, "lease-lost", "the lease for this attempt is no longer held")
	case errors.Is(err, store.ErrAttemptFinished):
		return newProblem(http.StatusConflict, "attempt-finished", "the attempt already ended with another outcome")
	case errors.Is(err, store.ErrTaskFinished):
		return newProblem(http.StatusConflict, "task-finished", "the task already finished")
	case errors.Is(err, store.ErrTaskNotRetryable):
		return newProblem(http.StatusConflict, "task-not-retryable", "only failed_terminal and cancelled tasks can be retried")
	case errors.Is(err, store.ErrIdempotencyKeyReused):
		return newProblem(http.StatusUnprocessableEntity, "idempotency-key-reused", "this Idempotency-Key was used with a different request")
	case errors.Is(err, store.ErrWorkerRevoked):
		return newProblem(http.StatusForbidden, "worker-revoked", "this worker has been revoked")
	case errors.Is(err, store.ErrWorkerDisabled):
		return newProblem(http.StatusForbidden, "worker-disabled", "this worker is disabled")
	case errors.Is(err, store.ErrForbidden):
		return newProblem(http.StatusForbidden, "forbidden", err.Error())
	case errors.Is(err, store.ErrConflict):
		// The store's conflict messages name no other tenant's data.
		return withCause(newProblem(http.StatusConflict, "conflict", err.Error()), err)
	case errors.Is(err, store.ErrIdempotencyInFlight):
		p := newProblem(http.StatusConflict, "idempotency-in-flight", "a request with this Idempotency-Key is still being processed; retry it")
		p.RetryAfter = 1
		return p
	case errors.Is(err, store.ErrSequenceUsed):
		return newProblem(http.StatusConflict, "sequence-number-used", "another batch of this attempt already has this sequence number")
	case errors.Is(err, store.ErrScanFinished):
		return newProblem(http.StatusConflict, "scan-finished", "the scan already finished")
	case errors.Is(err, store.ErrUploadTooLarge):
		return newProblem(http.StatusRequestEntityTooLarge, "payload-too-large", err.Error())
	case errors.Is(err, store.ErrUploadExpired):
		return newProblem(http.StatusConflict, "upload-expired", "the upload session has expired")
	case errors.Is(err, store.ErrUploadState):
		return newProblem(http.StatusConflict, "upload-state", "the upload session is not open for this (already uploaded, committed, failed or expired)")
	case errors.Is(err, store.ErrUploadMismatch):
		return newProblem(http.StatusConflict, "upload-mismatch", "the uploaded object does not match the declared size or SHA-256")
	case errors.Is(err, store.ErrUploadMissing):
		return newProblem(http.StatusConflict, "upload-missing", "nothing was uploaded for this session")
	case errors.Is(err, store.ErrEnrollmentToken):
		return newProblem(http.StatusUnauthorized, "enrollment-token-invalid", "the enrollment token is unknown, already used or expired")
	case errors.Is(err, store.ErrInvalid):
		return newProblem(http.StatusBadRequest, "bad-request", err.Error())
	case isDataException(err):
		return withCause(newProblem(http.StatusBadRequest, "bad-request", "a value in the request cannot be stored (out of range or not representable)"), err)
	case errors.Is(err, store.ErrBatcherClosed):
		p := newProblem(http.StatusServiceUnavailable, "shutting-down", "this gateway replica is shutting down; retry")
		p.RetryAfter = 1
		return p
	case errors.Is(err, context.Canceled):
		// The client went away before its answer: nobody reads this one,
		// and it is not the server's failure (nginx's 499).
		return withCause(newProblem(statusClientClosedRequest, "client-closed-request", "the client closed the request"), err)
	case isUnavailable(err):
		p := withCause(newProblem(http.StatusServiceUnavailable, "unavailable", "the database is unavailable; retry later"), err)
		p.RetryAfter = 2
		return p
	}
	return withCause(newProblem(http.StatusInternalServerError, "internal", "an internal error occurred"), err)
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
	if p.Code == "worker-revoked" {
		// Close the revoked worker's connection after this answer (HTTP/2:
		// GOAWAY), whatever it was authenticated with before.
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
	if p.cause != nil {
		attrs = append(attrs, "cause", p.cause.Error())
	}
	logger.Log(r.Context(), level, "request refused", attrs...)
}
