package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Events are written to the outbox (webhook_events, one webhook_deliveries
// row per subscribed target) in the transaction of the change they
// describe, and only when the organization has an enabled target
// subscribed to the event's type: without one nothing is written.
//
//   - Task completed / failed terminally: the completion statement
//     (moveTasksSQL, a single completion being a batch of one) and the
//     sweeper's expiry and deadline statements carry taskWebhookSQL as
//     CTEs. That is the hot path: with no target anywhere its cost is one
//     read of the empty webhook_targets per statement (per group of
//     completions), and with targets one probe of webhook_targets_org_idx
//     per task that ended, in the statement already running — no round
//     trip, no function call, no per-replica cache to keep coherent.
//   - Scans, worker revocation and skipped schedule slots, which happen at
//     most once per scan, worker or slot, are written by triggers
//     (migration 000020) calling webhook_emit, so every way into those
//     states is covered.
//   - worker.offline and organization.no_eligible_worker are not stored
//     states but computed from time, so WatchWebhookConditions notices
//     them (see there).

// taskWebhookSQL is the CTEs that write the outbox rows of the tasks in rel
// (a relation of ended worker_tasks with id, organization_id, task_type,
// state, last_error_code and attempt_count) that reached completed or
// failed_terminal. They start with a comma: append them to a WITH list.
func taskWebhookSQL(rel string) string {
	return `, hook_source AS (
	SELECT gateway_uuid_v7() AS event_id, m.organization_id, 'task.' || m.state AS event_type,
		jsonb_build_object('task_id', m.id, 'task_type', m.task_type, 'state', m.state,
			'error_code', m.last_error_code, 'attempt_count', m.attempt_count) AS data
	FROM ` + rel + ` m
	WHERE m.state IN (` + sqlStates(TaskCompleted, TaskFailedTerminal) + `)
		-- Once per statement (an uncorrelated InitPlan): with no enabled
		-- target anywhere, no ended task probes further.
		AND (SELECT EXISTS (SELECT 1 FROM webhook_targets WHERE enabled))
		AND EXISTS (SELECT 1 FROM webhook_targets w WHERE w.organization_id = m.organization_id AND w.enabled
			AND w.event_types @> ARRAY['task.' || m.state])
), hook_events AS (
	INSERT INTO webhook_events (id, organization_id, event_type, body)
	SELECT event_id, organization_id, event_type, webhook_body(event_id, event_type, organization_id, data)
	FROM hook_source
	RETURNING id, organization_id, event_type
), hook_deliveries AS (
	INSERT INTO webhook_deliveries (event_id, target_id, organization_id)
	SELECT e.id, w.id, e.organization_id FROM hook_events e
	JOIN webhook_targets w ON w.organization_id = e.organization_id AND w.enabled AND w.event_types @> ARRAY[e.event_type]
)`
}

// taskWebhookReturning is what a statement feeding taskWebhookSQL returns
// of worker_tasks row alias besides queueSourceColumns.
func taskWebhookReturning(alias string) string {
	return alias + ".last_error_code, " + alias + ".attempt_count"
}

// WebhookWatch is what one WatchWebhookConditions pass found.
type WebhookWatch struct {
	// Subscribed is false when no enabled target listens for a watched
	// event: the pass did nothing, and the watcher sleeps until a target
	// changes (WakeWebhooks).
	Subscribed bool
	// WorkersOffline and OrganizationsStarved are the transitions reported.
	WorkersOffline, OrganizationsStarved int
	// NextIn is when the next worker seen now would go offline, if any.
	NextIn *time.Duration
}

// offlineSQL marks the workers that went offline (not seen for $1 seconds)
// since they were last reported, and writes worker.offline for their owner
// and every organization assigned them. A worker is reported once per
// transition: again only after it was seen since. Concurrent passes of two
// replicas cannot both mark a worker: the second re-checks the WHERE clause
// on the row the first changed. A target hears only of transitions after
// it was created (webhook_emit's p_at), so a long-offline worker is not
// announced to a new target.
const offlineSQL = `
WITH gone AS (
	UPDATE workers w SET offline_reported_at = now()
	WHERE w.revoked_at IS NULL AND w.last_seen_at IS NOT NULL
		AND w.last_seen_at <= now() - make_interval(secs => $1)
		AND (w.offline_reported_at IS NULL OR w.offline_reported_at < w.last_seen_at)
	RETURNING w.id, w.name, w.owner_organization_id, w.last_seen_at
)
SELECT count(*), coalesce(sum(webhook_emit(o.org, '` + EventWorkerOffline + `', jsonb_build_object(
		'worker_id', g.id, 'name', g.name, 'last_seen_at', g.last_seen_at),
		g.last_seen_at + make_interval(secs => $1))), 0)
FROM gone g CROSS JOIN LATERAL (
	SELECT g.owner_organization_id AS org WHERE g.owner_organization_id IS NOT NULL
	UNION SELECT ow.organization_id FROM organization_workers ow WHERE ow.worker_id = g.id AND ow.enabled AND ow.revoked_at IS NULL
) o`

// starvedSQL reports organization.no_eligible_worker for each organization
// subscribed to it that has a task leasable now and no worker that could
// lease it: none assigned (and enabled, not revoked) that is enabled, not
// revoked and online (seen within $1 seconds). It is the organization-wide
// form of a task's pending_reason no_assigned_worker / no_online_worker
// (tasks.go); capabilities and capacity are per task and not considered.
// webhook_conditions de-duplicates: an organization is reported when it
// becomes starved and again only after it stopped being starved.
const starvedSQL = `
WITH starved AS (
	SELECT o.id FROM organizations o
	WHERE EXISTS (SELECT 1 FROM webhook_targets t WHERE t.organization_id = o.id AND t.enabled
			AND t.event_types @> ARRAY['` + EventOrgNoEligibleWorker + `'])
		AND EXISTS (SELECT 1 FROM worker_task_queue q WHERE q.organization_id = o.id AND q.available_at <= now())
		AND NOT EXISTS (SELECT 1 FROM organization_workers ow JOIN workers w ON w.id = ow.worker_id
			WHERE ow.organization_id = o.id AND ow.enabled AND ow.revoked_at IS NULL
				AND w.enabled AND w.revoked_at IS NULL AND w.last_seen_at > now() - make_interval(secs => $1))
), cleared AS (
	DELETE FROM webhook_conditions c WHERE c.condition = 'no_eligible_worker'
		AND NOT EXISTS (SELECT 1 FROM starved s WHERE s.id = c.organization_id)
), raised AS (
	INSERT INTO webhook_conditions (organization_id, condition)
	SELECT id, 'no_eligible_worker' FROM starved
	ON CONFLICT DO NOTHING
	RETURNING organization_id
)
SELECT count(webhook_emit(r.organization_id, '` + EventOrgNoEligibleWorker + `', jsonb_build_object(
	'organization_id', r.organization_id,
	'leasable_tasks', (SELECT count(*) FROM worker_task_queue q WHERE q.organization_id = r.organization_id AND q.available_at <= now()))))
FROM raised r`

// WatchWebhookConditions is one pass of the webhook watcher: it reports
// workers that went offline and organizations left with leasable work and
// no eligible worker, in one transaction. It does nothing while no enabled
// target subscribes to either event. onlineWindow is how recently a worker
// must have been seen to be online.
func (s *Store) WatchWebhookConditions(ctx context.Context, onlineWindow time.Duration) (WebhookWatch, error) {
	var res WebhookWatch
	err := s.inTx(ctx, "watch webhook conditions", func(tx pgx.Tx) error {
		res = WebhookWatch{}
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_targets WHERE enabled
				AND event_types && ARRAY['`+EventWorkerOffline+`', '`+EventOrgNoEligibleWorker+`'])`).Scan(&res.Subscribed); err != nil {
			return fmt.Errorf("webhook subscriptions: %w", err)
		}
		if !res.Subscribed {
			return nil
		}
		var emitted int
		if err := tx.QueryRow(ctx, offlineSQL, onlineWindow.Seconds()).Scan(&res.WorkersOffline, &emitted); err != nil {
			return fmt.Errorf("workers offline: %w", err)
		}
		if err := tx.QueryRow(ctx, starvedSQL, onlineWindow.Seconds()).Scan(&res.OrganizationsStarved); err != nil {
			return fmt.Errorf("organizations without eligible worker: %w", err)
		}
		var next *float64
		if err := tx.QueryRow(ctx, `
			SELECT extract(epoch FROM min(last_seen_at) + make_interval(secs => $1) - now())::float8 FROM workers
			WHERE revoked_at IS NULL AND last_seen_at > now() - make_interval(secs => $1)
				AND (offline_reported_at IS NULL OR offline_reported_at < last_seen_at)`, onlineWindow.Seconds()).Scan(&next); err != nil {
			return fmt.Errorf("next worker offline: %w", err)
		}
		res.NextIn = optSeconds(next)
		return nil
	})
	return res, err
}
