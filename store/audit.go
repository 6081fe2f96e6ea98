package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// RecordAudit appends an audit event in a transaction of its own: for
// what is not a change of the control plane (security events, throttled).
// A change's record is written in the change's transaction (WithAudit).
func (s *Store) RecordAudit(ctx context.Context, e AuditEvent) error {
	return core.InsertAudit(ctx, s.pool, e)
}

// AuditFilter selects audit events.
type AuditFilter struct {
	Action     string
	TargetType string
	TargetID   string
	Since      *time.Time
	// AfterID pages newest first: events with a smaller id.
	AfterID *int64
	Limit   int
}

// ListAuditEvents pages audit events, newest first. An organization-scoped
// caller sees its organization's events only.
func (s *Store) ListAuditEvents(ctx context.Context, tenant Tenant, f AuditFilter) ([]AuditEvent, *int64, error) {
	q := core.Psql.Select("id, occurred_at, actor_type, actor_id, action, target_type, target_id, organization_id, request_id, details").
		From("audit_events").OrderBy("id DESC").Limit(uint64(f.Limit + 1))
	q = q.Where(tenant.Where("organization_id"))
	if f.Action != "" {
		q = q.Where("action = ?", f.Action)
	}
	if f.TargetType != "" {
		q = q.Where("target_type = ?", f.TargetType)
	}
	if f.TargetID != "" {
		q = q.Where("target_id = ?", f.TargetID)
	}
	if f.Since != nil {
		q = q.Where("occurred_at >= ?", *f.Since)
	}
	if f.AfterID != nil {
		q = q.Where("id < ?", *f.AfterID)
	}
	sqlText, args, err := q.ToSql()
	if err != nil {
		return nil, nil, err
	}
	rows, err := s.pool.Query(ctx, sqlText, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("list audit events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEvent, error) {
		var e AuditEvent
		err := r.Scan(&e.ID, &e.OccurredAt, &e.ActorType, &e.ActorID, &e.Action, &e.TargetType, &e.TargetID, &e.OrganizationID, &e.RequestID, &e.Details)
		return e, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list audit events: %w", err)
	}
	var next *int64
	if len(events) > f.Limit {
		events = events[:f.Limit]
		next = &events[f.Limit-1].ID
	}
	return events, next, nil
}
