package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Assignment is an organization_workers row.
type Assignment struct {
	OrganizationID    uuid.UUID
	WorkerID          uuid.UUID
	Enabled           bool
	AssignedAt        time.Time
	RevokedAt         *time.Time
	RevocationReason  string
	CancelledAttempts int
}

const assignmentColumns = `organization_id, worker_id, enabled, assigned_at, revoked_at, revocation_reason`

func scanAssignment(row pgx.Row) (Assignment, error) {
	var a Assignment
	err := row.Scan(&a.OrganizationID, &a.WorkerID, &a.Enabled, &a.AssignedAt, &a.RevokedAt, &a.RevocationReason)
	return a, err
}

// AssignWorker lets a worker serve an organization (re-enabling a revoked
// assignment). Idempotent.
func (s *Store) AssignWorker(ctx context.Context, scope Scope, org, worker uuid.UUID) (Assignment, error) {
	if !scope.Allows(org) {
		return Assignment{}, ErrNotFound
	}
	var a Assignment
	err := s.inTx(ctx, "assign worker", func(tx pgx.Tx) error {
		var err error
		a, err = scanAssignment(tx.QueryRow(ctx, `
			INSERT INTO organization_workers (organization_id, worker_id) VALUES ($1, $2)
			ON CONFLICT (organization_id, worker_id) DO UPDATE SET
				enabled = true, revoked_at = NULL, revoked_by = NULL, revocation_reason = '',
				assigned_at = CASE WHEN organization_workers.revoked_at IS NULL THEN organization_workers.assigned_at ELSE now() END,
				updated_at = now()
			RETURNING `+assignmentColumns, org, worker))
		if isForeignKeyViolation(err) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("assign: %w", err)
		}
		// The worker's waiting polls learn their new organization at once.
		return notify(ctx, tx, Wakeup{Kind: WakeWorker, Worker: worker})
	})
	return a, err
}

// UnassignWorker soft-revokes an assignment. New leases stop at once because
// acquisition takes the assignment row FOR SHARE and re-checks it; with
// cancelActive the organization's active attempts on this worker are ended by
// policy in the same transaction, otherwise they drain.
func (s *Store) UnassignWorker(ctx context.Context, scope Scope, org, worker uuid.UUID, cancelActive bool, reason string) (Assignment, error) {
	if !scope.Allows(org) {
		return Assignment{}, ErrNotFound
	}
	var a Assignment
	err := s.inTx(ctx, "unassign worker", func(tx pgx.Tx) error {
		var err error
		a, err = scanAssignment(tx.QueryRow(ctx, `
			UPDATE organization_workers SET
				revoked_at = coalesce(revoked_at, now()), revocation_reason = $3, updated_at = now()
			WHERE organization_id = $1 AND worker_id = $2
			RETURNING `+assignmentColumns, org, worker, reason))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("unassign: %w", err)
		}
		if cancelActive {
			if a.CancelledAttempts, err = releaseAttempts(ctx, tx, worker, &org, "assignment_removed"); err != nil {
				return err
			}
		}
		return notify(ctx, tx, Wakeup{Kind: WakeWorker, Worker: worker})
	})
	return a, err
}
