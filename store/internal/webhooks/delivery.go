package webhooks

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// ClaimedDelivery is a delivery a replica holds until its claim ends: what
// to send, where, and the secrets to sign with (the current one first).
type ClaimedDelivery struct {
	ID        uuid.UUID
	EventID   uuid.UUID
	EventType string
	TargetID  uuid.UUID
	URL       string
	// Attempt is this try's number, from 1; the fence of its record.
	Attempt int
	// Body is the event's stored bytes, identical on every try.
	Body []byte
	// Secrets sign the try, the current one first: sealed, or in
	// plaintext on a row not sealed yet (OpenWebhookSecret opens either).
	Secrets []WebhookSecret
}

// claimDeliveriesSQL claims up to $1 due deliveries whose target is enabled
// and whose circuit is closed (or whose open spell ended: the next try is
// the probe), skipping those another replica holds, and pushes each one's
// next_attempt_at to the end of the claim ($2 seconds): a replica that dies
// mid-delivery leaves it due again then, so it is tried again (at least once).
const claimDeliveriesSQL = `
WITH due AS (
	SELECT d.id FROM webhook_deliveries d
	WHERE d.state = 'pending' AND d.next_attempt_at <= now()
		AND EXISTS (SELECT 1 FROM webhook_targets t WHERE t.id = d.target_id AND t.enabled
			AND (t.circuit_open_until IS NULL OR t.circuit_open_until <= now()))
	ORDER BY d.next_attempt_at
	LIMIT $1
	FOR UPDATE OF d SKIP LOCKED
)
UPDATE webhook_deliveries d SET attempts = d.attempts + 1, last_attempt_at = now(),
	next_attempt_at = now() + make_interval(secs => $2)
FROM due, webhook_events e, webhook_targets t
WHERE d.id = due.id AND e.id = d.event_id AND t.id = d.target_id
RETURNING d.id, d.event_id, e.event_type, t.id, t.organization_id, t.url, d.attempts, e.body,
	coalesce(t.previous_secret_expires_at > now(), false), ` + webhookSecretColumnsSQL

// ClaimWebhookDeliveries claims up to limit due deliveries for claimFor
// (which must outlast a try). Any replica may call it at any time.
func (s *Hub) ClaimWebhookDeliveries(ctx context.Context, limit int, claimFor time.Duration) ([]ClaimedDelivery, error) {
	rows, err := s.pool.Query(ctx, claimDeliveriesSQL, limit, claimFor.Seconds())
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClaimedDelivery, error) {
		var (
			c           ClaimedDelivery
			org         uuid.UUID
			overlapping bool
			cols        webhookSecretColumns
		)
		if err := r.Scan(append([]any{&c.ID, &c.EventID, &c.EventType, &c.TargetID, &org, &c.URL, &c.Attempt, &c.Body, &overlapping},
			cols.dest()...)...); err != nil {
			return c, err
		}
		current, previous := cols.secrets(org, c.TargetID)
		if current != nil {
			c.Secrets = append(c.Secrets, *current)
		}
		if previous != nil && overlapping {
			c.Secrets = append(c.Secrets, *previous)
		}
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	return out, nil
}

// DeliveryPolicy is how failed tries are retried and when a target's
// circuit opens.
type DeliveryPolicy struct {
	// MaxAttempts ends a delivery as failed after this many tries.
	MaxAttempts int
	// RetryBase and RetryMax: the n-th retry waits a random time between
	// half and all of min(RetryMax, RetryBase·2^(n-1)) ("equal jitter").
	RetryBase, RetryMax time.Duration
	// BreakerThreshold consecutive failures of a target open its circuit
	// for BreakerCooldown: no delivery to it is tried meanwhile.
	BreakerThreshold int
	BreakerCooldown  time.Duration
}

// DeliveryOutcome is the result of one try.
type DeliveryOutcome struct {
	DeliveryID uuid.UUID
	Attempt    int
	Delivered  bool
	StatusCode *int
	Latency    time.Duration
	Error      string
}

// recordDeliveriesSQL records tries, each fenced on its claim's attempt
// number: a try whose claim ran out and was claimed again records nothing.
// Then each target's circuit breaker moves once for the batch: a delivery
// that got through closes it, else the failures add up. A target already
// healthy is not written at all, so deliveries to one busy target do not
// queue on its row. Deliveries are locked before their targets, and
// targets in id order (two replicas' batches cannot deadlock).
const recordDeliveriesSQL = `
WITH o AS (
	SELECT * FROM unnest($1::uuid[], $2::int[], $3::bool[], $4::int[], $5::int[], $6::text[])
		AS o(id, attempt, delivered, status_code, latency_ms, error)
), d AS (
	UPDATE webhook_deliveries d SET
		state = CASE WHEN o.delivered THEN 'delivered' WHEN d.attempts >= $8 THEN 'failed' ELSE 'pending' END,
		next_attempt_at = CASE WHEN o.delivered OR d.attempts >= $8 THEN d.next_attempt_at
			ELSE now() + make_interval(secs => least($10::float8, $9::float8 * power(2, d.attempts - 1)) * (0.5 + random() / 2)) END,
		delivered_at = CASE WHEN o.delivered THEN now() END,
		last_status_code = o.status_code, last_latency_ms = o.latency_ms, last_error = o.error
	FROM o
	WHERE d.id = o.id AND d.attempts = o.attempt AND d.state = 'pending'
	RETURNING d.target_id, o.delivered
), per_target AS (
	SELECT target_id, bool_or(delivered) AS delivered, count(*) FILTER (WHERE NOT delivered) AS failures
	FROM d GROUP BY target_id
), changing AS (
	SELECT t.id FROM webhook_targets t JOIN per_target p ON p.target_id = t.id
	WHERE NOT (p.delivered AND t.consecutive_failures = 0 AND t.circuit_open_until IS NULL)
	ORDER BY t.id
	FOR UPDATE OF t
)
UPDATE webhook_targets t SET
	consecutive_failures = CASE WHEN p.delivered THEN 0 ELSE t.consecutive_failures + p.failures END,
	circuit_open_until = CASE WHEN p.delivered THEN NULL
		WHEN t.consecutive_failures + p.failures >= $7 THEN now() + make_interval(secs => $11)
		ELSE t.circuit_open_until END
FROM changing c JOIN per_target p ON p.target_id = c.id
WHERE t.id = c.id`

// RecordWebhookDeliveries records tries' outcomes in one statement:
// delivered, retried after a backoff, or failed for good after
// MaxAttempts; and moves each target's circuit breaker.
func (s *Hub) RecordWebhookDeliveries(ctx context.Context, outcomes []DeliveryOutcome, p DeliveryPolicy) error {
	if len(outcomes) == 0 {
		return nil
	}
	n := len(outcomes)
	ids, attempts, delivered := make([]uuid.UUID, n), make([]int, n), make([]bool, n)
	codes, latencies, errTexts := make([]*int, n), make([]int, n), make([]*string, n)
	for i, o := range outcomes {
		ids[i], attempts[i], delivered[i], codes[i] = o.DeliveryID, o.Attempt, o.Delivered, o.StatusCode
		latencies[i] = int(o.Latency.Milliseconds())
		if o.Error != "" {
			e := o.Error
			if len(e) > 500 {
				e = e[:500]
			}
			errTexts[i] = &e
		}
	}
	_, err := s.pool.Exec(ctx, recordDeliveriesSQL, ids, attempts, delivered, codes, latencies, errTexts,
		p.BreakerThreshold, p.MaxAttempts, p.RetryBase.Seconds(), p.RetryMax.Seconds(), p.BreakerCooldown.Seconds())
	if err != nil {
		return fmt.Errorf("record webhook deliveries: %w", err)
	}
	return nil
}

// RecordWebhookDelivery records one try (RecordWebhookDeliveries).
func (s *Hub) RecordWebhookDelivery(ctx context.Context, o DeliveryOutcome, p DeliveryPolicy) error {
	return s.RecordWebhookDeliveries(ctx, []DeliveryOutcome{o}, p)
}

// NextWebhookDeliveryIn is how long until the earliest pending delivery may
// be tried (a retry's time, a claim's end, or its target's circuit closing),
// as the database's clock sees it; ok is false when none is pending.
func (s *Hub) NextWebhookDeliveryIn(ctx context.Context) (in time.Duration, ok bool, err error) {
	var secs *float64
	err = s.pool.QueryRow(ctx, `
		SELECT extract(epoch FROM min(greatest(d.next_attempt_at, coalesce(t.circuit_open_until, d.next_attempt_at))) - now())::float8
		FROM webhook_deliveries d JOIN webhook_targets t ON t.id = d.target_id
		WHERE d.state = 'pending' AND t.enabled`).Scan(&secs)
	if err != nil {
		return 0, false, fmt.Errorf("next webhook delivery: %w", err)
	}
	if secs == nil {
		return 0, false, nil
	}
	return max(core.Seconds(*secs), 0), true, nil
}

// PruneWebhookEvents deletes up to batch events older than retention
// whose deliveries have all ended (delivered or failed), with their
// deliveries: the delivery log is kept for retention.
func (s *Hub) PruneWebhookEvents(ctx context.Context, retention time.Duration, batch int) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM webhook_events e WHERE e.id IN (
			SELECT o.id FROM webhook_events o
			WHERE o.created_at < now() - make_interval(secs => $1)
				AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = o.id AND d.state = 'pending')
			ORDER BY o.created_at
			LIMIT $2)`, retention.Seconds(), batch)
	if err != nil {
		return 0, fmt.Errorf("prune webhook events: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
