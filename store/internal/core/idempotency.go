package core

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// CreationReplay answers a create whose idempotency key its organization
// already used in table (worker_tasks or scans): the same request — the
// same request_sha256 — is a replay of the row the first one created, and
// returns that row's id; another request under the key is
// ErrIdempotencyKeyReused. The create's INSERT … ON CONFLICT DO NOTHING
// waited for a concurrent first try to commit, so the row is there to read
// (see "Idempotency" in doc.go).
func CreationReplay(ctx context.Context, ex Executor, table string, org uuid.UUID, key, requestSHA256 string) (uuid.UUID, error) {
	var id uuid.UUID
	var sum string
	err := ex.QueryRow(ctx, `SELECT id, request_sha256 FROM `+table+` WHERE organization_id = $1 AND idempotency_key = $2`,
		org, key).Scan(&id, &sum)
	if err != nil {
		return uuid.Nil, fmt.Errorf("read idempotent %s: %w", table, err)
	}
	if sum != requestSHA256 {
		return uuid.Nil, ErrIdempotencyKeyReused
	}
	AuditSkip(ctx) // a replay changes nothing: the first create was audited
	return id, nil
}
