package core

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// AuditEvent is who did what to what, and when. Details never hold a
// secret.
type AuditEvent struct {
	ID             int64
	OccurredAt     time.Time
	ActorType      string // "token", "worker", "system", "anonymous"
	ActorID        string
	Action         string // e.g. "worker.revoke", "security.certificate_refused"
	TargetType     string
	TargetID       string
	OrganizationID *uuid.UUID
	RequestID      string
	Details        json.RawMessage
}

// InsertAudit writes one audit row.
func InsertAudit(ctx context.Context, ex Executor, e AuditEvent) error {
	details := e.Details
	if len(details) == 0 {
		details = json.RawMessage(`{}`)
	}
	_, err := ex.Exec(ctx, `
		INSERT INTO audit_events (actor_type, actor_id, action, target_type, target_id, organization_id, request_id, details)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		e.ActorType, e.ActorID, e.Action, e.TargetType, e.TargetID, e.OrganizationID, e.RequestID, string(details))
	if err != nil {
		return fmt.Errorf("record audit event: %w", err)
	}
	return nil
}
