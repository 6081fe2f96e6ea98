package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// CompleteParams finishes an attempt.
type CompleteParams struct {
	AttemptRef
	// Outcome is AttemptSucceeded, AttemptFailed or AttemptCancelled.
	Outcome      AttemptStatus
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
	AttemptStatus AttemptStatus
	TaskState     TaskState
	FinishedAt    time.Time
	RetryAt       *time.Time
	// Replayed is true when the attempt had already ended with this outcome.
	Replayed bool
}

// ErrUnpersistedBatch refuses a completion that claims a result batch the
// gateway never persisted.
var ErrUnpersistedBatch = fmt.Errorf("%w: claimed result batch was never persisted", ErrConflict)

// retryDelaySQL is exponential backoff with full jitter: a uniformly random
// delay between zero and min(max, base * 2^(attempts-1)).
const retryDelaySQL = `make_interval(secs => random() * least(t.retry_max_seconds,
	t.retry_base_seconds * power(2, greatest(t.attempt_count - 1, 0))))`

// CompleteAttempt ends an attempt with the worker's outcome and moves its task
// along the state machine, in one transaction. The attempt update is fenced;
// a repeat of the same outcome on an attempt that already ended with it
// returns the original answer.
func (s *Store) CompleteAttempt(ctx context.Context, p CompleteParams) (CompleteResult, error) {
	switch p.Outcome {
	case AttemptSucceeded, AttemptFailed, AttemptCancelled:
	default:
		return CompleteResult{}, fmt.Errorf("%w: outcome %q", ErrInvalid, p.Outcome)
	}
	var res CompleteResult
	err := s.inTx(ctx, "complete attempt", func(tx pgx.Tx) error {
		res = CompleteResult{AttemptID: p.AttemptID, AttemptStatus: p.Outcome}
		var workerID uuid.UUID
		err := tx.QueryRow(ctx, `
			UPDATE worker_task_attempts SET
				status = $4, finished_at = now(), updated_at = now(),
				error_code = $5, error_message = $6, error_retryable = $7
			WHERE id = $1 AND worker_id = $2 AND lease_token_hash = $3
				AND status IN (`+activeStatuses+`) AND lease_expires_at > now()
			RETURNING task_id, worker_id, finished_at`,
			p.AttemptID, p.WorkerID, leaseTokenHash(p.LeaseToken), string(p.Outcome), p.ErrorCode, p.ErrorMessage, p.Retryable,
		).Scan(&res.TaskID, &workerID, &res.FinishedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return replayCompletion(ctx, tx, p, &res)
		}
		if err != nil {
			return fmt.Errorf("fenced attempt update: %w", err)
		}
		if p.LastSequenceNumber != nil {
			if err := checkPersisted(ctx, tx, p.AttemptID, *p.LastSequenceNumber); err != nil {
				return err
			}
		}

		var (
			state          TaskState
			attempts, max  int
			deadlinePassed bool
			org            uuid.UUID
		)
		err = tx.QueryRow(ctx, `
			SELECT state, attempt_count, max_attempts,
				coalesce(execution_deadline_at <= now(), false), organization_id
			FROM worker_tasks WHERE id = $1 FOR UPDATE`, res.TaskID).Scan(&state, &attempts, &max, &deadlinePassed, &org)
		if err != nil {
			return fmt.Errorf("lock task: %w", err)
		}
		event := completionEvent(p, state, attempts < max && !deadlinePassed)
		tr := TaskTransitions[event]
		var (
			retryAt    time.Time
			retryDelay float64
		)
		err = tx.QueryRow(ctx, `
			UPDATE worker_tasks t SET
				state = $2,
				attempt_count = CASE WHEN $3 THEN greatest(t.attempt_count - 1, 0) ELSE t.attempt_count END,
				available_at = CASE
					WHEN $2 = '`+string(TaskRetryWait)+`' THEN now() + `+retryDelaySQL+`
					WHEN $2 = '`+string(TaskPending)+`' THEN now()
					ELSE t.available_at END,
				last_error_code = CASE WHEN $4 <> '' THEN $4 ELSE t.last_error_code END,
				last_error = CASE WHEN $4 <> '' THEN $5 ELSE t.last_error END,
				completed_at = CASE WHEN $6 THEN now() ELSE NULL END,
				updated_at = now()
			WHERE t.id = $1 AND t.state = ANY($7::text[])
			RETURNING t.available_at, extract(epoch FROM t.available_at - now())::float8`,
			res.TaskID, string(tr.To), event == EventRelease, p.ErrorCode, p.ErrorMessage, tr.To.IsFinal(), statesOf(tr.From),
		).Scan(&retryAt, &retryDelay)
		if err != nil {
			return fmt.Errorf("move task %s → %s: %w", state, tr.To, err)
		}
		res.TaskState = tr.To
		if tr.To == TaskRetryWait {
			res.RetryAt = &retryAt
		}
		if _, err := tx.Exec(ctx, `UPDATE worker_task_attempts SET result_task_state = $2 WHERE id = $1`,
			p.AttemptID, string(res.TaskState)); err != nil {
			return fmt.Errorf("record answer: %w", err)
		}
		wakeups := []Wakeup{{Kind: WakeCapacity, Worker: workerID}}
		switch tr.To {
		case TaskRetryWait:
			wakeups = append(wakeups, Wakeup{Kind: WakeOrganizationAt, Organization: org, Delay: seconds(retryDelay)})
		case TaskPending:
			wakeups = append(wakeups, Wakeup{Kind: WakeOrganization, Organization: org, Count: 1})
		}
		return notify(ctx, tx, wakeups...)
	})
	if err != nil {
		return CompleteResult{}, err
	}
	return res, nil
}

// completionEvent decides which edge a completion takes from the task's
// current state. A success while cancelling still completes the task: the
// work was done and its results are in. A worker that gives a task back
// (cancelled without a cancel request) releases it without using an attempt.
func completionEvent(p CompleteParams, state TaskState, canRetry bool) TaskEvent {
	switch {
	case p.Outcome == AttemptSucceeded:
		return EventSucceed
	case state == TaskCancelling:
		return EventCancelDone
	case p.Outcome == AttemptCancelled:
		return EventRelease
	case p.Retryable && canRetry:
		return EventRetry
	default:
		return EventFailTerminal
	}
}

// replayCompletion runs when the fenced update matched nothing and decides
// between a replay of the same outcome, a lost lease, a different outcome on
// a finished attempt, and an attempt that is not this worker's.
func replayCompletion(ctx context.Context, tx pgx.Tx, p CompleteParams, res *CompleteResult) error {
	var (
		tokenMatches        bool
		status, resultState string
		finishedAt          *time.Time
		retryAt             time.Time
	)
	err := tx.QueryRow(ctx, `
		SELECT a.lease_token_hash = $3, a.status, a.result_task_state, a.finished_at, a.task_id, t.available_at
		FROM worker_task_attempts a JOIN worker_tasks t ON t.id = a.task_id
		WHERE a.id = $1 AND a.worker_id = $2`, p.AttemptID, p.WorkerID, leaseTokenHash(p.LeaseToken),
	).Scan(&tokenMatches, &status, &resultState, &finishedAt, &res.TaskID, &retryAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNotFound
	case err != nil:
		return fmt.Errorf("classify completion: %w", err)
	case !tokenMatches:
		return ErrLeaseLost
	case resultState == "":
		// Still active with an expired lease, or ended by expiry, timeout
		// or policy rather than by a completion: the lease is what was lost.
		return ErrLeaseLost
	case AttemptStatus(status) == p.Outcome:
		res.Replayed = true
		res.TaskState = TaskState(resultState)
		res.FinishedAt = *finishedAt
		if res.TaskState == TaskRetryWait {
			res.RetryAt = &retryAt
		}
		return nil
	default:
		return ErrAttemptFinished
	}
}

func checkPersisted(ctx context.Context, tx pgx.Tx, attemptID uuid.UUID, seq int) error {
	var ok bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM worker_result_batches
		WHERE attempt_id = $1 AND sequence_number = $2 AND status = 'persisted')`, attemptID, seq).Scan(&ok)
	if err != nil {
		return fmt.Errorf("check persisted batch: %w", err)
	}
	if !ok {
		return ErrUnpersistedBatch
	}
	return nil
}

func statesOf(states []TaskState) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}
