package webhooks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// WebhookTarget is an organization's webhook endpoint. Its secret is never
// part of it: only CreateWebhookTarget and RotateWebhookSecret return one.
type WebhookTarget struct {
	ID             uuid.UUID
	OrganizationID uuid.UUID
	URL            string
	Description    string
	EventTypes     []string
	Enabled        bool
	// PreviousSecretExpiresAt is the end of a rotation's overlap, while
	// deliveries are signed with the old secret too.
	PreviousSecretExpiresAt *time.Time
	ConsecutiveFailures     int
	CircuitOpenUntil        *time.Time
	CreatedAt, UpdatedAt    time.Time
}

// WebhookTargetParams is a target's definition.
type WebhookTargetParams struct {
	URL         string
	Description string
	EventTypes  []string
	Enabled     bool
}

func (p WebhookTargetParams) validate() error {
	if p.URL == "" {
		return core.Invalid("url is required")
	}
	if len(p.EventTypes) == 0 {
		return core.Invalid("event_types must name at least one event type")
	}
	for _, t := range p.EventTypes {
		if !slices.Contains(WebhookEventTypes, t) {
			return core.Invalid(problem.Text("event_types: unknown event type " + t))
		}
	}
	return nil
}

const webhookTargetColumns = `t.id, t.organization_id, t.url, t.description, t.event_types, t.enabled,
	CASE WHEN t.previous_secret_expires_at > now() THEN t.previous_secret_expires_at END,
	t.consecutive_failures, CASE WHEN t.circuit_open_until > now() THEN t.circuit_open_until END,
	t.created_at, t.updated_at`

func scanWebhookTarget(row pgx.Row) (WebhookTarget, error) {
	var w WebhookTarget
	err := row.Scan(&w.ID, &w.OrganizationID, &w.URL, &w.Description, &w.EventTypes, &w.Enabled,
		&w.PreviousSecretExpiresAt, &w.ConsecutiveFailures, &w.CircuitOpenUntil, &w.CreatedAt, &w.UpdatedAt)
	return w, err
}

// CreateWebhookTarget creates a target for an organization in scope and
// returns it with its signing secret, which is never answered again. The
// secret is stored sealed under the keyring's current key (without a
// keyring nothing is created), and in plaintext too until the contract
// step, for the previous release (secrets.go).
func (s *Hub) CreateWebhookTarget(ctx context.Context, tenant core.Tenant, keyring *secretbox.Keyring, org uuid.UUID, p WebhookTargetParams) (WebhookTarget, []byte, error) {
	if !tenant.Allows(org) {
		return WebhookTarget{}, nil, core.ErrNotFound
	}
	if err := p.validate(); err != nil {
		return WebhookTarget{}, nil, err
	}
	if err := requireKeyring(keyring); err != nil {
		return WebhookTarget{}, nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return WebhookTarget{}, nil, err
	}
	secret, sealed, err := newSealedWebhookSecret(keyring, org, id)
	if err != nil {
		return WebhookTarget{}, nil, err
	}
	var w WebhookTarget
	err = s.inTx(ctx, "create webhook target", func(tx pgx.Tx) error {
		w, err = scanWebhookTarget(tx.QueryRow(ctx, `
			INSERT INTO webhook_targets AS t (id, organization_id, url, description, event_types, enabled,
				secret_ciphertext, secret_wrapped_key, secret_kek_id, secret)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, `+plaintextUntilContracted("$10::bytea")+`)
			RETURNING `+webhookTargetColumns, id, org, p.URL, p.Description, p.EventTypes, p.Enabled,
			sealed.Ciphertext, sealed.WrappedKey, sealed.KEKID, secret))
		if core.IsForeignKeyViolation(err) {
			return core.MissingOrganization(tenant, org)
		}
		if err != nil {
			return fmt.Errorf("insert webhook target: %w", err)
		}
		core.AuditTarget(ctx, w.ID, &w.OrganizationID)
		return core.Notify(ctx, tx, core.Wakeup{Kind: core.WakeWebhooks, Organization: org})
	})
	if err != nil {
		return WebhookTarget{}, nil, err
	}
	return w, secret, nil
}

// UpdateWebhookTarget replaces a target's definition; its secret stays.
func (s *Hub) UpdateWebhookTarget(ctx context.Context, tenant core.Tenant, id uuid.UUID, p WebhookTargetParams) (WebhookTarget, error) {
	if err := p.validate(); err != nil {
		return WebhookTarget{}, err
	}
	var w WebhookTarget
	err := s.inTx(ctx, "update webhook target", func(tx pgx.Tx) error {
		var err error
		w, err = scanWebhookTarget(tx.QueryRow(ctx, `
			UPDATE webhook_targets t SET url = $3, description = $4, event_types = $5, enabled = $6,
				-- Re-enabling closes the circuit: the operator says the endpoint is back.
				consecutive_failures = CASE WHEN $6 AND NOT t.enabled THEN 0 ELSE t.consecutive_failures END,
				circuit_open_until = CASE WHEN $6 AND NOT t.enabled THEN NULL ELSE t.circuit_open_until END,
				updated_at = now()
			WHERE t.id = $1 AND t.deleted_at IS NULL AND `+core.InTenant("t.organization_id", "$2")+`
			RETURNING `+webhookTargetColumns, id, tenant.Arg(), p.URL, p.Description, p.EventTypes, p.Enabled))
		if errors.Is(err, pgx.ErrNoRows) {
			return core.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("update webhook target: %w", err)
		}
		core.AuditTarget(ctx, w.ID, &w.OrganizationID)
		return core.Notify(ctx, tx, core.Wakeup{Kind: core.WakeWebhooks, Organization: w.OrganizationID})
	})
	return w, err
}

// DeleteWebhookTarget deletes a target: its deliveries and their log go,
// its secret is wiped, and only a tombstone stays, so that deleting it again
// answers the same (DELETE is idempotent) while every other verb answers
// core.ErrNotFound.
func (s *Hub) DeleteWebhookTarget(ctx context.Context, tenant core.Tenant, id uuid.UUID) (WebhookTarget, error) {
	var w WebhookTarget
	err := s.inTx(ctx, "delete webhook target", func(tx pgx.Tx) error {
		var err error
		w, err = scanWebhookTarget(tx.QueryRow(ctx, `
			UPDATE webhook_targets t SET deleted_at = coalesce(t.deleted_at, now()), enabled = false,
				secret = NULL, previous_secret = NULL, previous_secret_expires_at = NULL,
				secret_ciphertext = NULL, secret_wrapped_key = NULL, secret_kek_id = NULL,
				previous_secret_ciphertext = NULL, previous_secret_wrapped_key = NULL, previous_secret_kek_id = NULL,
				updated_at = now()
			WHERE t.id = $1 AND `+core.InTenant("t.organization_id", "$2")+`
			RETURNING `+webhookTargetColumns, id, tenant.Arg()))
		if errors.Is(err, pgx.ErrNoRows) {
			return core.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("delete webhook target: %w", err)
		}
		core.AuditTarget(ctx, w.ID, &w.OrganizationID)
		if _, err := tx.Exec(ctx, `DELETE FROM webhook_deliveries WHERE target_id = $1`, id); err != nil {
			return fmt.Errorf("delete webhook deliveries: %w", err)
		}
		return nil
	})
	return w, err
}

// GetWebhookTarget returns a target in scope.
func (s *Hub) GetWebhookTarget(ctx context.Context, tenant core.Tenant, id uuid.UUID) (WebhookTarget, error) {
	w, err := scanWebhookTarget(s.pool.QueryRow(ctx, `SELECT `+webhookTargetColumns+` FROM webhook_targets t
		WHERE t.id = $1 AND t.deleted_at IS NULL AND `+core.InTenant("t.organization_id", "$2"), id, tenant.Arg()))
	if errors.Is(err, pgx.ErrNoRows) {
		return WebhookTarget{}, core.ErrNotFound
	}
	if err != nil {
		return WebhookTarget{}, fmt.Errorf("get webhook target: %w", err)
	}
	return w, nil
}

// ListWebhookTargets pages the targets the tenant may see, newest first.
func (s *Hub) ListWebhookTargets(ctx context.Context, tenant core.Tenant, org *uuid.UUID, after *core.Cursor, limit int) ([]WebhookTarget, *core.Cursor, error) {
	q := core.Psql.Select(webhookTargetColumns).From("webhook_targets t").Where(tenant.Where("t.organization_id")).Where("t.deleted_at IS NULL")
	if org != nil {
		q = q.Where(sq.Eq{"t.organization_id": *org})
	}
	list, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("t.created_at", "t.id", func(w WebhookTarget) core.Cursor { return core.Cursor{Time: w.CreatedAt, ID: w.ID} }),
		after, limit, scanWebhookTarget)
	if err != nil {
		return nil, nil, fmt.Errorf("list webhook targets: %w", err)
	}
	if err := core.CheckListedOrganization(ctx, s.pool, tenant, org, len(list) == 0); err != nil {
		return nil, nil, err
	}
	return list, next, nil
}

// RotateWebhookSecret gives a target a new secret and returns it. The old
// one keeps signing, beside the new, for overlap (0: it stops at once), so
// receivers can switch without missing a delivery. Both are stored sealed:
// the old one moves to the previous seal as it is, or is sealed now if it
// was still plaintext; and, until the contract step, in plaintext too, as
// the previous release rotates (secrets.go).
func (s *Hub) RotateWebhookSecret(ctx context.Context, tenant core.Tenant, keyring *secretbox.Keyring, id uuid.UUID, overlap time.Duration) (WebhookTarget, []byte, error) {
	if overlap < 0 {
		return WebhookTarget{}, nil, core.Invalid("overlap must not be negative")
	}
	if err := requireKeyring(keyring); err != nil {
		return WebhookTarget{}, nil, err
	}
	var (
		w      WebhookTarget
		secret []byte
	)
	err := s.inTx(ctx, "rotate webhook secret", func(tx pgx.Tx) error {
		var (
			org  uuid.UUID
			cols webhookSecretColumns
		)
		err := tx.QueryRow(ctx, `SELECT t.organization_id, `+webhookSecretColumnsSQL+` FROM webhook_targets t
			WHERE t.id = $1 AND t.deleted_at IS NULL AND `+core.InTenant("t.organization_id", "$2")+` FOR UPDATE`,
			id, tenant.Arg()).Scan(append([]any{&org}, cols.dest()...)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return core.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock webhook target: %w", err)
		}
		current, _ := cols.secrets(org, id)
		previous, err := sealWebhookSecret(keyring, current, org, id)
		if err != nil {
			return err
		}
		var sealed secretbox.Sealed
		if secret, sealed, err = newSealedWebhookSecret(keyring, org, id); err != nil {
			return err
		}
		pct, pwk, pkek := sealedArgs(previous)
		w, err = scanWebhookTarget(tx.QueryRow(ctx, `
			UPDATE webhook_targets t SET
				secret = `+plaintextUntilContracted("$9::bytea")+`, previous_secret = `+plaintextUntilContracted("t.secret")+`,
				secret_ciphertext = $2, secret_wrapped_key = $3, secret_kek_id = $4,
				previous_secret_ciphertext = $5, previous_secret_wrapped_key = $6, previous_secret_kek_id = $7,
				previous_secret_expires_at = now() + make_interval(secs => $8), updated_at = now()
			WHERE t.id = $1
			RETURNING `+webhookTargetColumns, id, sealed.Ciphertext, sealed.WrappedKey, sealed.KEKID, pct, pwk, pkek, overlap.Seconds(), secret))
		if err != nil {
			return fmt.Errorf("rotate webhook secret: %w", err)
		}
		core.AuditTarget(ctx, w.ID, &w.OrganizationID)
		return nil
	})
	if err != nil {
		return WebhookTarget{}, nil, err
	}
	return w, secret, nil
}

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// WebhookDelivery is one event's delivery to one target, with the result
// of its latest try: the delivery log.
type WebhookDelivery struct {
	ID             uuid.UUID
	EventID        uuid.UUID
	EventType      string
	TargetID       uuid.UUID
	State          string
	Attempts       int
	NextAttemptAt  *time.Time
	LastAttemptAt  *time.Time
	LastStatusCode *int
	LastLatency    *time.Duration
	LastError      *string
	CreatedAt      time.Time
	DeliveredAt    *time.Time
}

// ListWebhookDeliveries pages a target's deliveries, newest first.
func (s *Hub) ListWebhookDeliveries(ctx context.Context, tenant core.Tenant, targetID uuid.UUID, after *core.Cursor, limit int) ([]WebhookDelivery, *core.Cursor, error) {
	if _, err := s.GetWebhookTarget(ctx, tenant, targetID); err != nil {
		return nil, nil, err
	}
	q := core.Psql.Select(`d.id, d.event_id, e.event_type, d.target_id, d.state, d.attempts,
			CASE WHEN d.state = 'pending' THEN d.next_attempt_at END, d.last_attempt_at,
			d.last_status_code, d.last_latency_ms, d.last_error, d.created_at, d.delivered_at`).
		From("webhook_deliveries d").Join("webhook_events e ON e.id = d.event_id").
		Where(tenant.Where("d.organization_id")).Where(sq.Eq{"d.target_id": targetID})
	list, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("d.created_at", "d.id", func(d WebhookDelivery) core.Cursor { return core.Cursor{Time: d.CreatedAt, ID: d.ID} }),
		after, limit, func(r pgx.Row) (WebhookDelivery, error) {
			var d WebhookDelivery
			var latencyMs *int
			err := r.Scan(&d.ID, &d.EventID, &d.EventType, &d.TargetID, &d.State, &d.Attempts, &d.NextAttemptAt,
				&d.LastAttemptAt, &d.LastStatusCode, &latencyMs, &d.LastError, &d.CreatedAt, &d.DeliveredAt)
			if latencyMs != nil {
				l := time.Duration(*latencyMs) * time.Millisecond
				d.LastLatency = &l
			}
			return d, err
		})
	if err != nil {
		return nil, nil, fmt.Errorf("list webhook deliveries: %w", err)
	}
	return list, next, nil
}

// WebhookEventBody returns an event's stored body (tests and tools).
func (s *Hub) WebhookEventBody(ctx context.Context, eventID uuid.UUID) ([]byte, error) {
	var body []byte
	err := s.pool.QueryRow(ctx, `SELECT body FROM webhook_events WHERE id = $1`, eventID).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, core.ErrNotFound
	}
	return body, err
}
