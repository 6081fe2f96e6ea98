package store

import (
	"github.com/worker-gateway/gateway/store/internal/core"
)

// The closed set of outcomes a caller may need to tell apart, declared
// once in the store's core (store/internal/core/errors.go, where each is
// described) and named here for callers: each is the core's own value, so
// errors.Is matches an error the core or the lease engine returned. The
// HTTP layer maps each to one status and problem code (server/problem.go).
var (
	ErrNotFound              = core.ErrNotFound
	ErrLeaseLost             = core.ErrLeaseLost
	ErrAttemptFinished       = core.ErrAttemptFinished
	ErrTaskFinished          = core.ErrTaskFinished
	ErrTaskNotRetryable      = core.ErrTaskNotRetryable
	ErrIdempotencyKeyReused  = core.ErrIdempotencyKeyReused
	ErrWorkerRevoked         = core.ErrWorkerRevoked
	ErrWorkerDisabled        = core.ErrWorkerDisabled
	ErrConflict              = core.ErrConflict
	ErrInvalid               = core.ErrInvalid
	ErrIdempotencyInFlight   = core.ErrIdempotencyInFlight
	ErrSequenceUsed          = core.ErrSequenceUsed
	ErrScanFinished          = core.ErrScanFinished
	ErrScanBusy              = core.ErrScanBusy
	ErrOutOfScope            = core.ErrOutOfScope
	ErrForbidden             = core.ErrForbidden
	ErrUnpersistedBatch      = core.ErrUnpersistedBatch
	ErrEnrollmentToken       = core.ErrEnrollmentToken
	ErrParentTokenInactive   = core.ErrParentTokenInactive
	ErrScheduleTooFrequent   = core.ErrScheduleTooFrequent
	ErrQuotaExceeded         = core.ErrQuotaExceeded
	ErrScheduleRunInProgress = core.ErrScheduleRunInProgress
	ErrBatcherClosed         = core.ErrBatcherClosed
)

// Upload limits and failures.
var (
	ErrUploadTooLarge = core.ErrUploadTooLarge
	ErrUploadExpired  = core.ErrUploadExpired
	ErrUploadMismatch = core.ErrUploadMismatch
	ErrUploadMissing  = core.ErrUploadMissing
	ErrUploadState    = core.ErrUploadState
)

// Sentinels returns every sentinel of the package by name, for tests that
// check each one is answered.
func Sentinels() map[string]error { return core.Sentinels() }
