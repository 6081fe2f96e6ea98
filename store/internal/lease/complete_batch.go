package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/fencing"
)

// CompleteOutcome is one completion's answer within a batch: a result or
// the error that completion alone would have returned.
type CompleteOutcome struct {
	Result CompleteResult
	Err    error
}

// CompleteAttempts ends many attempts in one transaction with a fixed number
// of statements, whatever their number: the fencing of every attempt is the
// same WHERE clause (fencing.LeaseHeld), applied per row. Completions the fenced
// update does not match (a replay, a lost lease, an unpersisted result
// batch, someone else's attempt) are then explained one by one, by a read
// that writes nothing.
func (s *Engine) CompleteAttempts(ctx context.Context, ps []CompleteParams) []CompleteOutcome {
	out := make([]CompleteOutcome, len(ps))
	valid := make([]int, 0, len(ps))
	for i, p := range ps {
		switch p.Outcome {
		case core.AttemptSucceeded, core.AttemptFailed, core.AttemptCancelled:
			valid = append(valid, i)
		default:
			// The value stays in the log; the client sent it.
			out[i].Err = problem.Wrap(fmt.Errorf("%w: outcome %q", core.ErrInvalid, p.Outcome), "unknown outcome")
		}
	}
	if len(valid) == 0 {
		return out
	}
	ended, err := s.completeFenced(ctx, ps, valid)
	if err != nil {
		for _, i := range valid {
			out[i].Err = err
		}
		return out
	}
	for _, i := range valid {
		if res, ok := ended[i]; ok {
			out[i].Result = res
			continue
		}
		out[i].Result, out[i].Err = s.explainUnmatchedCompletion(ctx, ps[i])
		// A result batch the completion claims was persisted after the
		// fenced update looked: try it again, alone (rare, and bounded).
		for try := 0; errors.Is(out[i].Err, errCompletionRaced) && try < 3; try++ {
			again, err := s.completeFenced(ctx, ps, []int{i})
			switch res, ok := again[i]; {
			case err != nil:
				out[i].Err = err
			case ok:
				out[i].Result, out[i].Err = res, nil
			default:
				out[i].Result, out[i].Err = s.explainUnmatchedCompletion(ctx, ps[i])
			}
		}
		if errors.Is(out[i].Err, errCompletionRaced) {
			out[i].Err = problem.Wrap(core.ErrConflict, "the attempt kept changing while it was completed; retry")
		}
	}
	return out
}

// endedAttempt is an attempt the fenced update ended, with its task as
// locked afterwards.
type endedAttempt struct {
	index          int
	attemptID      uuid.UUID
	taskID         uuid.UUID
	workerID       uuid.UUID
	organizationID uuid.UUID
	finishedAt     time.Time
	state          core.TaskState
	canRetry       bool
}

// completeFencedSQL locks every listed attempt whose lease is still this
// worker's and live (and whose claimed last result batch was persisted),
// then locks their tasks in id order — attempts before tasks, the lock order
// of doc.go — and reads what the task's next state depends on. It writes
// nothing: moveTasksSQL then ends each attempt and moves its task in one
// update of each row. FOR UPDATE re-checks the fencing predicate on the
// newest version of a row a concurrent writer changed, as an UPDATE would.
var completeFencedSQL = `
WITH input AS (
	-- An attempt completed twice in one group is ended by the first
	-- completion; the other is then explained on its own (a replay).
	SELECT DISTINCT ON (attempt_id) *
	FROM unnest($1::int[], $2::uuid[], $3::uuid[], $4::bytea[], $5::text[], $6::text[], $7::text[], $8::bool[], $9::int[])
		AS i(idx, attempt_id, worker_id, lease_token_hash, outcome, error_code, error_message, retryable, last_seq)
	ORDER BY attempt_id, idx
), held AS MATERIALIZED (
	-- Each input row (in attempt id order, the lock order among attempts)
	-- looks its attempt up by id. OFFSET 0 keeps the lookup a subquery run
	-- per input row: joined freely, a generic plan made while the table was
	-- small walked the whole primary key and probed the input for each entry.
	SELECT i.idx, a.id, a.task_id, a.worker_id
	FROM input i CROSS JOIN LATERAL (
		SELECT a.id, a.task_id, a.worker_id FROM worker_task_attempts a
		WHERE ` + fencing.LeaseHeld("a", "i.attempt_id", "i.worker_id", "i.lease_token_hash") + `
			AND (i.last_seq IS NULL OR EXISTS (SELECT 1 FROM worker_result_batches b
				WHERE b.attempt_id = i.attempt_id AND b.sequence_number = i.last_seq AND b.status = 'persisted'))
		OFFSET 0
		FOR UPDATE OF a
	) a
)
SELECT e.idx, e.id, e.task_id, e.worker_id, now(), t.organization_id, t.state,
	t.attempt_count < t.max_attempts AND NOT coalesce(t.execution_deadline_at <= now(), false)
-- Tasks are locked in id order (the lock order among tasks): the lateral
-- lookup runs once per row of held, in the order it is sorted.
FROM (SELECT * FROM held ORDER BY task_id) e CROSS JOIN LATERAL (
	SELECT t.organization_id, t.state, t.attempt_count, t.max_attempts, t.execution_deadline_at
	FROM worker_tasks t WHERE t.id = e.task_id
	OFFSET 0
	FOR UPDATE OF t
) t`

// moveTasksSQL ends each locked attempt with its outcome and moves its
// locked task to the state its completion decided, queues the task again if
// that state is leasable (core/queue.go), and records the state on the attempt,
// so a replay can answer with it: one update of each row. A task that
// ended emits its event in the same statement (core.TaskEventsSQL).
//
// Moving a task's state fires the worker_tasks triggers (DatabaseTriggers,
// triggers.go), in this statement: a scan task's job mirrors its state and,
// when it ended, its scan advances — the next job's task is created, queued
// and woken, or the scan ends and records its history (advance_scan,
// core/scantransitions.go) — and a schedule's ended run wakes the schedule timer
// when a queued slot waits for it. Generic tasks fire neither (their WHEN
// clauses).
var moveTasksSQL = `
WITH input AS (
	SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::bool[], $6::text[], $7::text[], $8::text[], $9::bool[])
		AS i(task_id, attempt_id, observed_state, to_state, releases, error_code, error_message, outcome, retryable)
), moved AS (
	UPDATE worker_tasks t SET
		state = i.to_state,
		attempt_count = CASE WHEN i.releases THEN greatest(t.attempt_count - 1, 0) ELSE t.attempt_count END,
		available_at = CASE
			WHEN i.to_state = '` + string(core.TaskRetryWait) + `' THEN now() + ` + retryDelaySQL + `
			WHEN i.to_state = '` + string(core.TaskPending) + `' THEN now()
			ELSE t.available_at END,
		last_error_code = CASE WHEN i.error_code <> '' THEN i.error_code ELSE t.last_error_code END,
		last_error = CASE WHEN i.error_code <> '' THEN i.error_message ELSE t.last_error END,
		completed_at = CASE WHEN i.to_state IN (` + core.SQLStates(core.FinalTaskStates()...) + `) THEN now() ELSE NULL END,
		updated_at = now()
	FROM input i
	WHERE t.id = i.task_id AND t.state = i.observed_state
	-- The attempt's input travels with its task: joining moved back to input
	-- would be a nested loop over both (byIDPlanSQL), quadratic in the group.
	RETURNING ` + core.QueueSourceColumns("t") + `, ` + core.TaskEventReturning("t") + `,
		extract(epoch FROM t.available_at - now())::float8 AS delay,
		i.attempt_id, i.outcome, i.error_code, i.error_message, i.retryable
), enqueued AS (
	` + core.EnqueueSQL("moved") + `
)` + core.TaskEventsSQL("moved") + `, ended AS (
	UPDATE worker_task_attempts a SET
		status = m.outcome, finished_at = now(), updated_at = now(),
		error_code = m.error_code, error_message = m.error_message, error_retryable = m.retryable,
		result_task_state = m.state
	FROM moved m
	WHERE a.id = m.attempt_id
)
SELECT id, state, available_at, delay FROM moved` + core.TaskEventsWritten

// completeFenced runs the set-based part of CompleteAttempts for ps[valid]
// and returns the answers of the completions it ended, by index into ps.
func (s *Engine) completeFenced(ctx context.Context, ps []CompleteParams, valid []int) (map[int]CompleteResult, error) {
	var (
		idx                              = make([]int32, len(valid))
		attemptIDs, workerIDs            = make([]uuid.UUID, len(valid)), make([]uuid.UUID, len(valid))
		tokenHashes                      = make([][]byte, len(valid))
		outcomes, errorCodes, errorTexts = make([]string, len(valid)), make([]string, len(valid)), make([]string, len(valid))
		retryable                        = make([]bool, len(valid))
		lastSeq                          = make([]*int32, len(valid))
	)
	for k, i := range valid {
		p := ps[i]
		idx[k], attemptIDs[k], workerIDs[k], tokenHashes[k] = int32(i), p.AttemptID, p.WorkerID, TokenHash(p.LeaseToken)
		outcomes[k], errorCodes[k], errorTexts[k], retryable[k] = string(p.Outcome), p.ErrorCode, p.ErrorMessage, p.Retryable
		if p.LastSequenceNumber != nil {
			n := int32(*p.LastSequenceNumber)
			lastSeq[k] = &n
		}
	}

	var ended []endedAttempt
	queue := func(b *pgx.Batch) {
		// Generic plans: planning these for every group cost more than
		// running them (0.8 ms each, measured). Made on an empty table they
		// must stay right as it fills: the fencing predicate leaves one way
		// to find an attempt, by id (internal/fencing), and byIDPlanSQL keeps the
		// joins nested loops over the input.
		b.Queue(byIDPlanSQL)
		b.Queue(completeFencedSQL, idx, attemptIDs, workerIDs, tokenHashes, outcomes, errorCodes, errorTexts, retryable, lastSeq)
	}
	read := func(br pgx.BatchResults) error {
		ended = ended[:0]
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("plan mode: %w", err)
		}
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("fenced attempt update: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var e endedAttempt
			var i int32
			if err := rows.Scan(&i, &e.attemptID, &e.taskID, &e.workerID, &e.finishedAt, &e.organizationID, &e.state, &e.canRetry); err != nil {
				return err
			}
			e.index = int(i)
			ended = append(ended, e)
		}
		return rows.Err()
	}
	var answers map[int]CompleteResult
	finish := func(ex core.Executor) error {
		answers = make(map[int]CompleteResult, len(ended))
		if len(ended) == 0 {
			return nil
		}
		n := len(ended)
		taskIDs, ids := make([]uuid.UUID, n), make([]uuid.UUID, n)
		observed, to := make([]string, n), make([]string, n)
		releases := make([]bool, n)
		codes, texts, outcomes := make([]string, n), make([]string, n), make([]string, n)
		retryable := make([]bool, n)
		byTask := make(map[uuid.UUID]endedAttempt, n)
		for k, e := range ended {
			p := ps[e.index]
			event := completionEvent(p, e.state, e.canRetry)
			tr := core.TaskTransitions[event]
			if !tr.AllowsFrom(e.state) {
				return fmt.Errorf("complete attempt %s: task %s is %s, which %s does not leave", e.attemptID, e.taskID, e.state, event)
			}
			taskIDs[k], ids[k], observed[k], to[k] = e.taskID, e.attemptID, string(e.state), string(tr.To)
			releases[k], codes[k], texts[k] = event == core.EventRelease, p.ErrorCode, p.ErrorMessage
			outcomes[k], retryable[k] = string(p.Outcome), p.Retryable
			byTask[e.taskID] = e
		}
		rows, err := ex.Query(ctx, moveTasksSQL, taskIDs, ids, observed, to, releases, codes, texts, outcomes, retryable)
		if err != nil {
			return fmt.Errorf("move tasks: %w", err)
		}
		var wakeups []core.Wakeup
		freed := map[uuid.UUID]bool{}
		for rows.Next() {
			var (
				taskID      uuid.UUID
				state       core.TaskState
				availableAt time.Time
				delay       float64
			)
			if err := rows.Scan(&taskID, &state, &availableAt, &delay); err != nil {
				rows.Close()
				return err
			}
			e := byTask[taskID]
			res := CompleteResult{AttemptID: e.attemptID, TaskID: taskID, AttemptStatus: ps[e.index].Outcome, TaskState: state, FinishedAt: e.finishedAt}
			switch state {
			case core.TaskRetryWait:
				res.RetryAt = &availableAt
				wakeups = append(wakeups, core.Wakeup{Kind: core.WakeOrganizationAt, Organization: e.organizationID, Delay: core.Seconds(delay)})
			case core.TaskPending:
				wakeups = append(wakeups, core.Wakeup{Kind: core.WakeOrganization, Organization: e.organizationID, Count: 1})
			}
			if !freed[e.workerID] {
				freed[e.workerID] = true
				wakeups = append(wakeups, core.Wakeup{Kind: core.WakeCapacity, Worker: e.workerID})
			}
			answers[e.index] = res
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("move tasks: %w", err)
		}
		if len(answers) != n {
			// Cannot happen while the task rows are locked: refuse the
			// whole batch rather than end an attempt without its task.
			return errors.New("complete attempts: a locked task changed state")
		}
		return core.Notify(ctx, ex, wakeups...)
	}
	if err := s.inPipelinedTx(ctx, "complete attempts", queue, read, finish); err != nil {
		return nil, err
	}
	return answers, nil
}
