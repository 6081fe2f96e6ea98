package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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
	Body    []byte
	Secrets [][]byte
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
RETURNING d.id, d.event_id, e.event_type, t.id, t.url, d.attempts, e.body, t.secret,
	CASE WHEN t.previous_secret_expires_at > now() THEN t.previous_secret END`

// ClaimWebhookDeliveries claims up to limit due deliveries for claimFor
// (which must outlast a try). Any replica may call it at any time.
func (s *Store) ClaimWebhookDeliveries(ctx context.Context, limit int, claimFor time.Duration) ([]ClaimedDelivery, error) {
	rows, err := s.pool.Query(ctx, claimDeliveriesSQL, limit, claimFor.Seconds())
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClaimedDelivery, error) {
		var (
			c                ClaimedDelivery
			secret, previous []byte
		)
		err := r.Scan(&c.ID, &c.EventID, &c.EventType, &c.TargetID, &c.URL, &c.Attempt, &c.Body, &secret, &previous)
		c.Secrets = [][]byte{secret}
		if previous != nil {
			c.Secrets = append(c.Secrets, previous)
		}
		return c, err
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

// recordDeliverySQL records a try, fenced on the claim's attempt number: a
// try whose claim ran out and was claimed again records nothing. The
// delivery is locked before its target (the lock order of the deliverer).
const recordDeliverySQL = `
WITH d AS (
	UPDATE webhook_deliveries d SET
		state = CASE WHEN $3 THEN 'delivered' WHEN d.attempts >= $8 THEN 'failed' ELSE 'pending' END,
		next_attempt_at = CASE WHEN $3 OR d.attempts >= $8 THEN d.next_attempt_at
			ELSE now() + make_interval(secs => least($10::float8, $9::float8 * power(2, d.attempts - 1)) * (0.5 + random() / 2)) END,
		delivered_at = CASE WHEN $3 THEN now() END,
		last_status_code = $4, last_latency_ms = $5, last_error = $6
	WHERE d.id = $1 AND d.attempts = $2 AND d.state = 'pending'
	RETURNING d.target_id
)
UPDATE webhook_targets t SET
	consecutive_failures = CASE WHEN $3 THEN 0 ELSE t.consecutive_failures + 1 END,
	circuit_open_until = CASE WHEN $3 THEN NULL
		WHEN t.consecutive_failures + 1 >= $7 THEN now() + make_interval(secs => $11)
		ELSE t.circuit_open_until END
FROM d WHERE t.id = d.target_id`

// RecordWebhookDelivery records a try's outcome: delivered, retried after a
// backoff, or failed for good after MaxAttempts; and moves the target's
// circuit breaker.
func (s *Store) RecordWebhookDelivery(ctx context.Context, o DeliveryOutcome, p DeliveryPolicy) error {
	var errText *string
	if o.Error != "" {
		e := o.Error
		if len(e) > 500 {
			e = e[:500]
		}
		errText = &e
	}
	latencyMs := int(o.Latency.Milliseconds())
	_, err := s.pool.Exec(ctx, recordDeliverySQL, o.DeliveryID, o.Attempt, o.Delivered, o.StatusCode, latencyMs, errText,
		p.BreakerThreshold, p.MaxAttempts, p.RetryBase.Seconds(), p.RetryMax.Seconds(), p.BreakerCooldown.Seconds())
	if err != nil {
		return fmt.Errorf("record webhook delivery: %w", err)
	}
	return nil
}

// NextWebhookDeliveryIn is how long until the earliest pending delivery may
// be tried (a retry's time, a claim's end, or its target's circuit closing),
// as the database's clock sees it; ok is false when none is pending.
func (s *Store) NextWebhookDeliveryIn(ctx context.Context) (in time.Duration, ok bool, err error) {
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
	return max(seconds(*secs), 0), true, nil
}

// PruneWebhookEvents deletes up to batch events older than retention
// whose deliveries have all ended (delivered or failed), with their
// deliveries: the delivery log is kept for retention.
func (s *Store) PruneWebhookEvents(ctx context.Context, retention time.Duration, batch int) (int, error) {
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
