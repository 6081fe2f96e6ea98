package webhooks

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// The webhook watcher: worker.offline and organization.no_eligible_worker
// are not stored states but computed from time, so WatchWebhookConditions
// notices them and emits them through core.EmitEvent (internal/core/events.go), like every
// other event.

// WebhookWatch is what one WatchWebhookConditions pass found.
type WebhookWatch struct {
	// Subscribed is false when no enabled target listens for a watched
	// event: the pass did nothing, and the watcher sleeps until a target
	// changes (core.WakeWebhooks).
	Subscribed bool
	// WorkersOffline and OrganizationsStarved are the transitions reported.
	WorkersOffline, OrganizationsStarved int
	// NextIn is when the next worker seen now would go offline, if any.
	NextIn *time.Duration
}

// offlineSQL marks the workers that went offline (not seen for $1 seconds)
// since they were last reported, and returns them. A worker is reported
// once per transition: again only after it was seen since. Concurrent
// passes of two replicas cannot both mark a worker: the second re-checks
// the WHERE clause on the row the first changed.
const offlineSQL = `
UPDATE workers w SET offline_reported_at = now()
WHERE w.revoked_at IS NULL AND w.last_seen_at IS NOT NULL
	AND w.last_seen_at <= now() - make_interval(secs => $1)
	AND (w.offline_reported_at IS NULL OR w.offline_reported_at < w.last_seen_at)
RETURNING w.id, w.name, w.last_seen_at, w.last_seen_at + make_interval(secs => $1)`

// starvedSQL returns each organization subscribed to
// organization.no_eligible_worker that became starved: it has a task
// leasable now and no worker that could lease it — none assigned (and
// enabled, not revoked) that is enabled, not revoked and online (seen
// within $1 seconds). It is the organization-wide form of a task's
// pending_reason no_assigned_worker / no_online_worker (tasks.go);
// capabilities and capacity are per task and not considered.
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
SELECT r.organization_id,
	(SELECT count(*) FROM worker_task_queue q WHERE q.organization_id = r.organization_id AND q.available_at <= now())
FROM raised r`

// WatchWebhookConditions is one pass of the webhook watcher: it reports
// workers that went offline and organizations left with leasable work and
// no eligible worker, in one transaction. It does nothing while no enabled
// target subscribes to either event. onlineWindow is how recently a worker
// must have been seen to be online.
func (s *Hub) WatchWebhookConditions(ctx context.Context, onlineWindow time.Duration) (WebhookWatch, error) {
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
		type offline struct {
			id         uuid.UUID
			name       string
			lastSeenAt time.Time
			wentAt     time.Time
		}
		rows, err := tx.Query(ctx, offlineSQL, onlineWindow.Seconds())
		if err != nil {
			return fmt.Errorf("workers offline: %w", err)
		}
		gone, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (offline, error) {
			var o offline
			return o, r.Scan(&o.id, &o.name, &o.lastSeenAt, &o.wentAt)
		})
		if err != nil {
			return fmt.Errorf("workers offline: %w", err)
		}
		for _, o := range gone {
			// A target hears only of transitions after it was created.
			if _, err := core.EmitEvent(ctx, tx, core.Event{Type: EventWorkerOffline, Audience: core.WorkerAudience(o.id), At: &o.wentAt,
				Data: map[string]any{"worker_id": o.id, "name": o.name, "last_seen_at": o.lastSeenAt}}); err != nil {
				return err
			}
		}
		res.WorkersOffline = len(gone)
		type starved struct {
			org      uuid.UUID
			leasable int64
		}
		rows, err = tx.Query(ctx, starvedSQL, onlineWindow.Seconds())
		if err != nil {
			return fmt.Errorf("organizations without eligible worker: %w", err)
		}
		raised, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (starved, error) {
			var s starved
			return s, r.Scan(&s.org, &s.leasable)
		})
		if err != nil {
			return fmt.Errorf("organizations without eligible worker: %w", err)
		}
		for _, s := range raised {
			if _, err := core.EmitEvent(ctx, tx, core.Event{Type: EventOrgNoEligibleWorker, Audience: core.OrganizationAudience(s.org),
				Data: map[string]any{"organization_id": s.org, "leasable_tasks": s.leasable}}); err != nil {
				return err
			}
		}
		res.OrganizationsStarved = len(raised)
		var next *float64
		if err := tx.QueryRow(ctx, `
			SELECT extract(epoch FROM min(last_seen_at) + make_interval(secs => $1) - now())::float8 FROM workers
			WHERE revoked_at IS NULL AND last_seen_at > now() - make_interval(secs => $1)
				AND (offline_reported_at IS NULL OR offline_reported_at < last_seen_at)`, onlineWindow.Seconds()).Scan(&next); err != nil {
			return fmt.Errorf("next worker offline: %w", err)
		}
		res.NextIn = core.OptSeconds(next)
		return nil
	})
	return res, err
}
