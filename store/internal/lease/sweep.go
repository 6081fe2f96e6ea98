package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// SweepResult says what one sweep pass did and when the next one is due.
type SweepResult struct {
	ExpiredAttempts int
	DeadlinedTasks  int
	// NextDueIn is how long until the earliest lease expiry or execution
	// deadline still ahead, or nil when nothing is pending; the sweeper
	// sleeps that long.
	NextDueIn *time.Duration
	// More is true when a pass hit its limit and another should run at once.
	More bool
}

// lostAttemptNextState is where a task goes when its attempt ended without a
// completion (lease expired or attempt deadline passed). It is evaluated in
// the UPDATE's SET list, on the row version the UPDATE locked, so a cancel
// that committed meanwhile is honoured.
const lostAttemptNextState = `CASE
	WHEN t.state = '` + string(core.TaskCancelling) + `' THEN '` + string(core.TaskCancelled) + `'
	WHEN t.execution_deadline_at IS NOT NULL AND t.execution_deadline_at <= now() THEN '` + string(core.TaskFailedTerminal) + `'
	WHEN t.attempt_count < t.max_attempts THEN '` + string(core.TaskRetryWait) + `'
	ELSE '` + string(core.TaskFailedTerminal) + `' END`

// expireSQL ends up to $1 active attempts whose lease has expired (attempts
// past their deadline fail with a timeout code) and moves their tasks on.
// SKIP LOCKED lets every replica sweep at once without waiting or double work.
// A task failed terminally emits its event here (core.TaskEventsSQL).
var expireSQL = `
WITH ended AS (
	UPDATE worker_task_attempts a SET
		status = CASE WHEN a.deadline_at IS NOT NULL AND a.deadline_at <= now()
			THEN '` + string(core.AttemptFailed) + `' ELSE '` + string(core.AttemptExpired) + `' END,
		error_code = CASE WHEN a.deadline_at IS NOT NULL AND a.deadline_at <= now()
			THEN 'attempt_timeout' ELSE 'lease_expired' END,
		finished_at = now(), updated_at = now()
	WHERE a.id IN (
		SELECT id FROM worker_task_attempts
		WHERE status IN (` + core.ActiveStatuses + `) AND lease_expires_at <= now()
		ORDER BY lease_expires_at
		LIMIT $1
		FOR UPDATE SKIP LOCKED)
	RETURNING a.id, a.task_id, a.worker_id, a.error_code
), moved AS (
	UPDATE worker_tasks t SET
		state = ` + lostAttemptNextState + `,
		available_at = CASE WHEN (` + lostAttemptNextState + `) = '` + string(core.TaskRetryWait) + `'
			THEN now() + ` + retryDelaySQL + ` ELSE t.available_at END,
		completed_at = CASE WHEN (` + lostAttemptNextState + `) IN (` + core.SQLStates(core.TaskCancelled, core.TaskFailedTerminal) + `)
			THEN now() ELSE NULL END,
		last_error_code = e.error_code,
		last_error = CASE e.error_code WHEN 'attempt_timeout' THEN 'attempt exceeded its timeout'
			ELSE 'lease expired without a heartbeat' END,
		updated_at = now()
	FROM ended e
	WHERE t.id = e.task_id AND t.state IN (` + core.SQLStates(core.TaskLeased, core.TaskRunning, core.TaskCancelling) + `)
	RETURNING ` + core.QueueSourceColumns("t") + `, ` + core.TaskEventReturning("t") + `
), enqueued AS (
	` + core.EnqueueSQL("moved") + `
)` + core.TaskEventsSQL("moved") + `
SELECT e.worker_id, m.organization_id, m.state, extract(epoch FROM m.available_at - now())::float8
FROM ended e LEFT JOIN moved m ON m.id = e.task_id` + core.TaskEventsWritten

// deadlineSQL dead-letters queued tasks whose execution deadline passed.
// It starts from the queue rows, so (core/queue.go) it takes their tasks with
// SKIP LOCKED: one held by a transaction about to change it is left to it.
var deadlineSQL = `
WITH due AS (
	SELECT q.task_id AS id FROM worker_task_queue q
	WHERE q.execution_deadline_at IS NOT NULL AND q.execution_deadline_at <= now()
	ORDER BY q.execution_deadline_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
), ` + takeQueuedSQL("due", "id") + `, dead AS (
	UPDATE worker_tasks t SET
		state = '` + string(core.TaskTransitions[core.EventFailTerminal].To) + `',
		last_error_code = 'execution_deadline_exceeded',
		last_error = 'execution deadline passed before the task finished',
		completed_at = now(), updated_at = now()
	FROM taken k
	WHERE t.id = k.id
	RETURNING t.id, t.organization_id, t.task_type, t.state, ` + core.TaskEventReturning("t") + `
)` + core.TaskEventsSQL("dead") + `
SELECT count(*) FROM dead` + core.TaskEventsWritten

const nextDueSQL = `
SELECT extract(epoch FROM least(
	(SELECT min(lease_expires_at) FROM worker_task_attempts WHERE status IN (` + "'leased', 'running'" + `)),
	(SELECT min(execution_deadline_at) FROM worker_task_queue WHERE execution_deadline_at IS NOT NULL)) - now())::float8`

// SweepExpired expires leases and attempts past their deadline, dead-letters
// queued tasks past their execution deadline, and reports when the next
// sweep is due. Each pass handles at most limit rows of each kind.
func (s *Engine) SweepExpired(ctx context.Context, limit int) (SweepResult, error) {
	var res SweepResult
	err := s.inTx(ctx, "sweep expired", func(tx pgx.Tx) error {
		res = SweepResult{}
		if _, err := tx.Exec(ctx, core.OrderedScansSQL); err != nil {
			return fmt.Errorf("plan settings: %w", err)
		}
		rows, err := tx.Query(ctx, expireSQL, limit)
		if err != nil {
			return fmt.Errorf("expire leases: %w", err)
		}
		workers := map[uuid.UUID]bool{}
		retryIn := map[uuid.UUID]float64{}
		for rows.Next() {
			var (
				worker uuid.UUID
				org    *uuid.UUID
				state  *string
				delay  *float64
			)
			if err := rows.Scan(&worker, &org, &state, &delay); err != nil {
				rows.Close()
				return err
			}
			res.ExpiredAttempts++
			workers[worker] = true
			if state != nil && core.TaskState(*state) == core.TaskRetryWait {
				if d, ok := retryIn[*org]; !ok || *delay < d {
					retryIn[*org] = *delay
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("expire leases: %w", err)
		}
		if err := tx.QueryRow(ctx, deadlineSQL, limit).Scan(&res.DeadlinedTasks); err != nil {
			return fmt.Errorf("dead-letter past deadline: %w", err)
		}
		res.More = res.ExpiredAttempts >= limit || res.DeadlinedTasks >= limit
		var dueIn *float64
		if err := tx.QueryRow(ctx, nextDueSQL).Scan(&dueIn); err != nil {
			return fmt.Errorf("next due: %w", err)
		}
		res.NextDueIn = core.OptSeconds(dueIn)
		var wakeups []core.Wakeup
		for w := range workers {
			wakeups = append(wakeups, core.Wakeup{Kind: core.WakeCapacity, Worker: w})
		}
		for org, d := range retryIn {
			wakeups = append(wakeups, core.Wakeup{Kind: core.WakeOrganizationAt, Organization: org, Delay: core.Seconds(d)})
		}
		return core.Notify(ctx, tx, wakeups...)
	})
	return res, err
}

// NextLeasableIn returns, per organization, how long until its earliest
// queued task becomes leasable, so a hub that (re)connects can arm timers.
func (s *Engine) NextLeasableIn(ctx context.Context) (map[uuid.UUID]time.Duration, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT organization_id, extract(epoch FROM min(available_at) - now())::float8 FROM worker_task_queue
		WHERE available_at > now()
		GROUP BY organization_id`)
	if err != nil {
		return nil, fmt.Errorf("next leasable: %w", err)
	}
	defer rows.Close()
	out := map[uuid.UUID]time.Duration{}
	for rows.Next() {
		var org uuid.UUID
		var in float64
		if err := rows.Scan(&org, &in); err != nil {
			return nil, err
		}
		out[org] = core.Seconds(in)
	}
	return out, rows.Err()
}
