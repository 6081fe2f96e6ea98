package lease

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// A lease ends by policy — not by its worker — in one statement,
// ReleaseAttempts: the attempts become superseded, their tasks leasable
// again at once without using up an attempt, or cancelled if a cancel was
// already requested. The engine releases leases a poll never received
// and leases whose critical capability a worker stopped advertising; the
// control plane releases them when it disables or unassigns a worker or
// takes a label away, in its own transaction.

// ReleaseLeases ends, by policy, leases that were granted but never reached
// their worker (its poll went away while the acquisition was written): the
// tasks are leasable again at once, without using up an attempt, instead
// of waiting for the leases to expire. Leases no longer active are left
// alone. Returns how many it released.
func (s *Engine) ReleaseLeases(ctx context.Context, workerID uuid.UUID, leases []Lease) (int, error) {
	ids := make([]uuid.UUID, len(leases))
	for i, l := range leases {
		ids[i] = l.AttemptID
	}
	var n int
	err := s.inTx(ctx, "release undelivered leases", func(tx pgx.Tx) error {
		var err error
		n, err = ReleaseAttempts(ctx, tx, workerID, ReleaseFilter{Attempts: ids}, "lease_undelivered")
		return err
	})
	return n, err
}

// releaseAttemptsLackingCritical ends, by policy, the worker's active
// attempts whose task marks as critical a capability the worker's new
// advertisement no longer has.
func releaseAttemptsLackingCritical(ctx context.Context, tx core.Executor, workerID uuid.UUID, capabilities []byte) (int, error) {
	return ReleaseAttempts(ctx, tx, workerID, ReleaseFilter{LackingCritical: capabilities}, "capability_lost")
}

// ReleaseFilter narrows which of a worker's active attempts are released;
// the zero value releases them all.
type ReleaseFilter struct {
	Organization    *uuid.UUID  // only this organization's
	LackingCritical []byte      // only those whose task needs a critical capability this advertisement lacks
	LackingLabels   []byte      // only those whose task's label selector these labels fail
	Attempts        []uuid.UUID // only these
}

// ReleaseAttempts ends a worker's active attempts that f names by policy,
// in the caller's transaction, and wakes the organizations whose tasks are
// leasable again. reason is the attempts' error code. Returns how many
// attempts it ended.
func ReleaseAttempts(ctx context.Context, tx core.Executor, workerID uuid.UUID, f ReleaseFilter, reason string) (int, error) {

	rows, err := tx.Query(ctx, `
		WITH ended AS (
			UPDATE worker_task_attempts a SET
				status = '`+string(core.AttemptSuperseded)+`', finished_at = now(), updated_at = now(),
				error_code = $3, error_message = 'attempt ended by policy'
			WHERE `+core.WorkerLiveAttempts("a", "$1")+`
				AND ($2::uuid IS NULL OR a.organization_id = $2)
				AND ($4::jsonb IS NULL OR EXISTS (SELECT 1 FROM worker_tasks ct
					WHERE ct.id = a.task_id AND NOT ($4::jsonb @> ct.critical_capabilities)))
				AND ($5::uuid[] IS NULL OR a.id = ANY($5::uuid[]))
				AND ($6::jsonb IS NULL OR EXISTS (SELECT 1 FROM worker_tasks lt
					WHERE lt.id = a.task_id AND lt.label_selector IS NOT NULL
						AND NOT worker_labels_match($6::jsonb, lt.label_selector)))
			RETURNING a.task_id
		), moved AS (
			UPDATE worker_tasks t SET
				state = CASE WHEN t.state = '`+string(core.TaskCancelling)+`' THEN '`+string(core.TaskTransitions[core.EventCancelDone].To)+`'
					ELSE '`+string(core.TaskTransitions[core.EventRelease].To)+`' END,
				attempt_count = CASE WHEN t.state = '`+string(core.TaskCancelling)+`' THEN t.attempt_count
					ELSE greatest(t.attempt_count - 1, 0) END,
				available_at = now(),
				completed_at = CASE WHEN t.state = '`+string(core.TaskCancelling)+`' THEN now() ELSE NULL END,
				updated_at = now()
			FROM ended e
			WHERE t.id = e.task_id AND t.state IN (`+core.FromStates(core.EventRelease)+`, `+core.FromStates(core.EventCancelDone)+`)
			RETURNING `+core.QueueSourceColumns("t")+`
		), enqueued AS (
			`+core.EnqueueSQL("moved")+`
		)
		SELECT organization_id, state FROM moved`, workerID, f.Organization, reason, core.NullJSON(f.LackingCritical), f.Attempts, core.NullJSON(f.LackingLabels))
	if err != nil {
		return 0, fmt.Errorf("release attempts: %w", err)
	}
	released := map[uuid.UUID]int{}
	n := 0
	for rows.Next() {
		var o uuid.UUID
		var state core.TaskState
		if err := rows.Scan(&o, &state); err != nil {
			rows.Close()
			return 0, err
		}
		n++
		if state == core.TaskPending {
			released[o]++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("release attempts: %w", err)
	}
	var wakeups []core.Wakeup
	for o, count := range released {
		wakeups = append(wakeups, core.Wakeup{Kind: core.WakeOrganization, Organization: o, Count: count})
	}
	return n, core.Notify(ctx, tx, wakeups...)
}
