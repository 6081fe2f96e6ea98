package store

import (
	"errors"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// The closed set of outcomes a caller may need to tell apart. The HTTP layer
// maps each to one status and problem code.
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
	// ErrForbidden is an operation on something the caller may see but not
	// change: a worker assigned to its organization but owned by another,
	// or an assignment an unscoped admin removed.
	ErrForbidden = errors.New("forbidden")
)

// domainErrors are the sentinels callers tell apart; wrapOp leaves them as
// they are.
var domainErrors = []error{ErrNotFound, ErrLeaseLost, ErrAttemptFinished, ErrTaskFinished, ErrTaskNotRetryable,
	ErrIdempotencyKeyReused, ErrWorkerRevoked, ErrWorkerDisabled, ErrConflict, ErrInvalid,
	ErrIdempotencyInFlight, ErrSequenceUsed, ErrScanFinished, ErrForbidden}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation
}

func isForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ForeignKeyViolation
}
