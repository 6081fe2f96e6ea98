package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/fencing"
)

// CompleteParams finishes an attempt.
type CompleteParams struct {
	AttemptRef
	// Outcome is AttemptSucceeded, AttemptFailed or AttemptCancelled.
	Outcome      core.AttemptStatus
	ErrorCode    string
	ErrorMessage string
	Retryable    bool
	// LastSequenceNumber, when set, claims that the result batch with this
	// sequence number was persisted; the completion is refused if it was not.
	LastSequenceNumber *int
}

// CompleteResult is the answer to a completion, the same on every repeat.
type CompleteResult struct {
	AttemptID     uuid.UUID
	TaskID        uuid.UUID
	AttemptStatus core.AttemptStatus
	TaskState     core.TaskState
	FinishedAt    time.Time
	RetryAt       *time.Time
	// Replayed is true when the attempt had already ended with this outcome.
	Replayed bool
}

// retryDelaySQL is exponential backoff with full jitter: a uniformly random
// delay between zero and min(max, base * 2^(attempts-1)).
const retryDelaySQL = `make_interval(secs => random() * least(t.retry_max_seconds,
	t.retry_base_seconds * power(2, greatest(t.attempt_count - 1, 0))))`

// CompleteAttempt ends an attempt with the worker's outcome and moves its
// task along the state machine, in one transaction. It is a batch of one:
// the same fenced statements as CompleteAttempts, so a single completion and
// a thousand share one path. A repeat of the same outcome on an attempt that
// already ended with it returns the original answer.
func (s *Engine) CompleteAttempt(ctx context.Context, p CompleteParams) (CompleteResult, error) {
	out := s.CompleteAttempts(ctx, []CompleteParams{p})[0]
	return out.Result, out.Err
}

// completionEvent decides which edge a completion takes from the task's
// current state. A success while cancelling still completes the task: the
// work was done and its results are in. A worker that gives a task back
// (cancelled without a cancel request) releases it without using an attempt.
func completionEvent(p CompleteParams, state core.TaskState, canRetry bool) core.TaskEvent {
	switch {
	case p.Outcome == core.AttemptSucceeded:
		return core.EventSucceed
	case state == core.TaskCancelling:
		return core.EventCancelDone
	case p.Outcome == core.AttemptCancelled:
		return core.EventRelease
	case p.Retryable && canRetry:
		return core.EventRetry
	default:
		return core.EventFailTerminal
	}
}

// errCompletionRaced says the fenced update missed a completion whose
// lease was live when looked at again: a result batch it claims was
// persisted in between. The completion is simply tried again.
var errCompletionRaced = errors.New("completion raced a concurrent write")

// explainUnmatchedCompletion answers a completion the fenced update did not
// match. It writes nothing and only decides which answer is right: a replay
// of the same outcome (the original answer), a lost lease, a different
// outcome on a finished attempt, a claimed result batch never persisted, or
// an attempt that is not this worker's.
func (s *Engine) explainUnmatchedCompletion(ctx context.Context, p CompleteParams) (CompleteResult, error) {
	res := CompleteResult{AttemptID: p.AttemptID, AttemptStatus: p.Outcome}
	var (
		tokenMatches, live, persisted bool
		status, resultState           string
		finishedAt                    *time.Time
		retryAt                       time.Time
	)
	var lastSeq *int32
	if p.LastSequenceNumber != nil {
		n := int32(*p.LastSequenceNumber)
		lastSeq = &n
	}
	err := s.pool.QueryRow(ctx, `
		SELECT a.lease_token_hash = $3, `+fencing.LeaseLive("a")+`,
			$4::int IS NULL OR EXISTS (SELECT 1 FROM worker_result_batches b
				WHERE b.attempt_id = a.id AND b.sequence_number = $4 AND b.status = 'persisted'),
			a.status, a.result_task_state, a.finished_at, a.task_id, t.available_at
		FROM worker_task_attempts a JOIN worker_tasks t ON t.id = a.task_id
		WHERE a.id = $1 AND a.worker_id = $2`, p.AttemptID, p.WorkerID, TokenHash(p.LeaseToken), lastSeq,
	).Scan(&tokenMatches, &live, &persisted, &status, &resultState, &finishedAt, &res.TaskID, &retryAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return CompleteResult{}, core.ErrNotFound
	case err != nil:
		return CompleteResult{}, fmt.Errorf("explain completion: %w", err)
	case !tokenMatches:
		return CompleteResult{}, core.ErrLeaseLost
	case live && !persisted:
		return CompleteResult{}, core.ErrUnpersistedBatch
	case live:
		return CompleteResult{}, errCompletionRaced
	case resultState == "":
		// Still active with an expired lease, or ended by expiry, timeout
		// or policy rather than by a completion: the lease is what was lost.
		return CompleteResult{}, core.ErrLeaseLost
	case core.AttemptStatus(status) == p.Outcome:
		res.Replayed = true
		res.TaskState = core.TaskState(resultState)
		res.FinishedAt = *finishedAt
		if res.TaskState == core.TaskRetryWait {
			res.RetryAt = &retryAt
		}
		return res, nil
	default:
		return CompleteResult{}, core.ErrAttemptFinished
	}
}
