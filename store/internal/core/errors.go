package core

import (
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/worker-gateway/gateway/internal/groupcommit"
	"github.com/worker-gateway/gateway/problem"
)

// The closed set of outcomes a caller may need to tell apart; every
// sentinel of the package is declared here. The HTTP layer maps each to one
// status and problem code (server/problem.go). A reason a client may read
// travels with problem.Wrap(ErrX, "reason"); the sentinel's own text is
// only logged.
var (
	ErrNotFound             = errors.New("not found")
	ErrLeaseLost            = errors.New("lease lost")
	ErrAttemptFinished      = errors.New("attempt already finished with another outcome")
	ErrTaskFinished         = errors.New("task already finished")
	ErrTaskNotRetryable     = errors.New("task is not in a retryable state")
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with a different request")
	ErrWorkerRevoked        = errors.New("worker revoked")
	ErrWorkerDisabled       = errors.New("worker disabled")
	ErrConflict             = errors.New("conflict with existing data")
	ErrInvalid              = errors.New("invalid request")
	ErrIdempotencyInFlight  = errors.New("a request with this idempotency key is still being processed")
	ErrSequenceUsed         = errors.New("sequence number already used by another batch of this attempt")
	ErrScanFinished         = errors.New("scan already finished")
	// ErrScanBusy refuses redriving a job of a scan while another of its
	// jobs is in flight: a scan runs one job at a time.
	ErrScanBusy = errors.New("another job of the scan is in flight")
	// ErrOutOfScope refuses a scan naming targets outside its
	// organization's scan scope; the error is an *OutOfScopeError listing
	// them.
	ErrOutOfScope = errors.New("scan targets outside the organization's scope")
	// ErrForbidden is an operation on something the caller may see but not
	// change: a worker assigned to its organization but owned by another,
	// or an assignment an unscoped admin removed.
	ErrForbidden = errors.New("forbidden")
	// ErrUnpersistedBatch refuses a completion that claims a result batch
	// the gateway never persisted.
	ErrUnpersistedBatch = fmt.Errorf("%w: claimed result batch was never persisted", ErrConflict)
	// ErrEnrollmentToken refuses an unknown, used or expired enrollment
	// token alike, so the answer reveals nothing about which.
	ErrEnrollmentToken = errors.New("enrollment token is unknown, already used or expired")
	// ErrParentTokenInactive: the minting token was revoked or expired
	// after it authenticated the request.
	ErrParentTokenInactive = errors.New("the minting token is revoked or expired")
	// ErrScheduleTooFrequent refuses a schedule whose slots would come
	// closer together than the gateway's minimum (ScheduleLimits).
	ErrScheduleTooFrequent = errors.New("schedule fires more often than the minimum interval")
	// ErrQuotaExceeded refuses creating past an organization's quota.
	ErrQuotaExceeded = errors.New("organization quota exceeded")
	// ErrScheduleRunInProgress refuses a manual run of a schedule whose
	// previous run is still active while its overlap policy forbids
	// overlapping runs.
	ErrScheduleRunInProgress = errors.New("the schedule's previous run is still active")
	// ErrBatcherClosed is returned for a request submitted to a batcher
	// after Close.
	ErrBatcherClosed = groupcommit.ErrClosed
)

// Upload limits and failures. ErrUploadMismatch refuses a commit whose
// object differs from what the session declared; ErrUploadMissing one whose
// object is not there.
var (
	ErrUploadTooLarge = fmt.Errorf("%w: artifact exceeds the size limit", ErrInvalid)
	ErrUploadExpired  = errors.New("upload session expired")
	ErrUploadState    = errors.New("upload session is not open for this")
	ErrUploadMismatch = errors.New("uploaded object does not match the declared size or checksum")
	ErrUploadMissing  = errors.New("no object was uploaded for this session")
)

// sentinels names every Err above: wrapOp leaves them as they are, and the
// HTTP layer's tests check that each has a non-500 answer. A test parses
// this file so that a new sentinel cannot be left out.
var sentinels = []struct {
	name string
	err  error
}{
	{"ErrNotFound", ErrNotFound},
	{"ErrLeaseLost", ErrLeaseLost},
	{"ErrAttemptFinished", ErrAttemptFinished},
	{"ErrTaskFinished", ErrTaskFinished},
	{"ErrTaskNotRetryable", ErrTaskNotRetryable},
	{"ErrIdempotencyKeyReused", ErrIdempotencyKeyReused},
	{"ErrWorkerRevoked", ErrWorkerRevoked},
	{"ErrWorkerDisabled", ErrWorkerDisabled},
	{"ErrConflict", ErrConflict},
	{"ErrInvalid", ErrInvalid},
	{"ErrIdempotencyInFlight", ErrIdempotencyInFlight},
	{"ErrSequenceUsed", ErrSequenceUsed},
	{"ErrScanFinished", ErrScanFinished},
	{"ErrScanBusy", ErrScanBusy},
	{"ErrOutOfScope", ErrOutOfScope},
	{"ErrForbidden", ErrForbidden},
	{"ErrUnpersistedBatch", ErrUnpersistedBatch},
	{"ErrEnrollmentToken", ErrEnrollmentToken},
	{"ErrParentTokenInactive", ErrParentTokenInactive},
	{"ErrBatcherClosed", ErrBatcherClosed},
	{"ErrScheduleTooFrequent", ErrScheduleTooFrequent},
	{"ErrQuotaExceeded", ErrQuotaExceeded},
	{"ErrScheduleRunInProgress", ErrScheduleRunInProgress},
	{"ErrUploadTooLarge", ErrUploadTooLarge},
	{"ErrUploadExpired", ErrUploadExpired},
	{"ErrUploadState", ErrUploadState},
	{"ErrUploadMismatch", ErrUploadMismatch},
	{"ErrUploadMissing", ErrUploadMissing},
}

// Sentinels returns every sentinel of the package by name, for tests that
// check each one is answered.
func Sentinels() map[string]error {
	m := make(map[string]error, len(sentinels))
	for _, s := range sentinels {
		m[s.name] = s.err
	}
	return m
}

func IsUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation
}

func IsForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ForeignKeyViolation
}

// InvalidBecause files a reason a pure package gave (a problem.Public
// error of internal/scanscope, internal/slots or internal/labels) under
// ErrInvalid: errors.Is matches the sentinel, and a client reads the
// reason, as with problem.Wrap(ErrInvalid, reason).
func InvalidBecause(reason error) error { return fmt.Errorf("%w: %w", ErrInvalid, reason) }

// Invalid is ErrInvalid with a reason a client may read.
func Invalid(msg problem.Text) error { return problem.Wrap(ErrInvalid, msg) }
