package core

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Webhook events have one emitter: the database function webhook_emit
// (migration 000020, the one writer of webhook_events and
// webhook_deliveries; TestOutboxHasOneWriter keeps it so). Every event
// reaches it in the transaction of the change it describes:
//
//   - from Go, through EmitEvent, which decides the recipients (an
//     Audience) from the rows as they are in that transaction;
//   - on the hot path (a task completed or failed terminally), through
//     TaskEventsSQL: a CTE of the statement that ends the tasks, which
//     calls webhook_emit only for the tasks of an organization with a
//     subscribed target, so it adds no round trip;
//   - when a scan ends (advance_scan, inside the statement that ended its
//     last task) and when a schedule slot is skipped, through the triggers
//     of migration 000020, which call webhook_emit for the subject's
//     organization.
//
// An event goes only to organizations entitled to see its subject at the
// time of the change: an organization's own tasks, scans and schedules to
// it, and a worker's events to the organizations that may see the worker
// then (WorkerAudience).

// Event is a change a webhook may announce.
type Event struct {
	Type string
	// Data is the event's "data" object.
	Data map[string]any
	// Audience is who hears it, decided when it is emitted.
	Audience Audience
	// At, when set, limits deliveries to targets that existed by then: a
	// condition noticed late is not announced to a target created since.
	At *time.Time
}

// Audience is a statement of the organizations (column org) that hear an
// event, with its subject as $1.
type Audience struct {
	sql     string
	subject uuid.UUID
}

// OrganizationAudience is the subject's own organization.
func OrganizationAudience(org uuid.UUID) Audience {
	return Audience{sql: `SELECT $1::uuid AS org`, subject: org}
}

// WorkerAudience is the organizations that may see the worker now
// (WorkerVisibleTo): its owner, the organizations assigned it and those
// its owner granted it. The grants and assignments are read FOR SHARE,
// grants first as a withdrawal and an assignment take them, so a
// withdrawal either commits before the event (and its organization does
// not hear it) or waits for the event's transaction.
func WorkerAudience(worker uuid.UUID) Audience {
	return Audience{subject: worker, sql: `
		WITH granted AS (
			SELECT g.organization_id FROM worker_grants g WHERE g.worker_id = $1 FOR SHARE
		), assigned AS (
			SELECT ow.organization_id FROM organization_workers ow
			WHERE ow.worker_id = $1 AND ow.revoked_at IS NULL FOR SHARE
		)
		SELECT w.owner_organization_id AS org FROM workers w WHERE w.id = $1 AND w.owner_organization_id IS NOT NULL
		UNION SELECT organization_id FROM granted
		UNION SELECT organization_id FROM assigned`}
}

// EmitEvent writes an event to the outbox for each organization of its
// audience, in the caller's transaction, and returns how many deliveries
// it wrote (none when no target of theirs subscribes).
func EmitEvent(ctx context.Context, ex Executor, e Event) (int, error) {
	data, err := json.Marshal(e.Data)
	if err != nil {
		return 0, fmt.Errorf("emit %s: %w", e.Type, err)
	}
	var n int
	err = ex.QueryRow(ctx, `
		WITH audience AS (`+e.Audience.sql+`)
		SELECT coalesce(sum(webhook_emit(a.org, $2, $3::jsonb, coalesce($4::timestamptz, now()))), 0)
		FROM audience a`, e.Audience.subject, e.Type, string(data), e.At).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("emit %s: %w", e.Type, err)
	}
	return n, nil
}

// TaskEventsSQL is the CTE that emits task.completed and
// task.failed_terminal for the tasks in rel (a relation of ended
// worker_tasks with id, organization_id, task_type, state, last_error_code
// and attempt_count). It starts with a comma: append it to a WITH list,
// and join TaskEventsWritten into the statement's result so it runs.
func TaskEventsSQL(rel string) string {
	return `, task_events AS (
	SELECT webhook_emit(m.organization_id, 'task.' || m.state,
		jsonb_build_object('task_id', m.id, 'task_type', m.task_type, 'state', m.state,
			'error_code', m.last_error_code, 'attempt_count', m.attempt_count)) AS deliveries
	FROM ` + rel + ` m
	WHERE m.state IN (` + SQLStates(TaskCompleted, TaskFailedTerminal) + `)
		-- Once per statement (an uncorrelated InitPlan): with no enabled
		-- target anywhere, no ended task probes further.
		AND (SELECT EXISTS (SELECT 1 FROM webhook_targets WHERE enabled))
		AND EXISTS (SELECT 1 FROM webhook_targets w WHERE w.organization_id = m.organization_id AND w.enabled
			AND w.event_types @> ARRAY['task.' || m.state])
)`
}

// TaskEventsWritten joins task_events into a statement's result: a CTE
// that only reads runs only as far as the statement reads it, and the
// count reads it whole. It adds one row, so it changes no result.
const TaskEventsWritten = ` CROSS JOIN (SELECT count(deliveries) FROM task_events) task_events_written`

// TaskEventReturning is what a statement feeding TaskEventsSQL returns of
// worker_tasks row alias besides queueSourceColumns.
func TaskEventReturning(alias string) string {
	return alias + ".last_error_code, " + alias + ".attempt_count"
}
