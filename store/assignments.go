package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
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

// AssignWorker lets a worker serve an organization (re-enabling a removed
// assignment). Idempotent. An unscoped caller may assign any worker; an
// organization's caller only to its own organization, and only a worker it
// owns, was granted by its owner, or already has — and never restore an
// assignment an unscoped admin removed (ErrForbidden). A worker the caller
// cannot see is ErrNotFound, exactly as one that does not exist.
func (s *Store) AssignWorker(ctx context.Context, tenant Tenant, org, worker uuid.UUID) (Assignment, error) {
	if !tenant.Allows(org) {
		return Assignment{}, ErrNotFound
	}
	var a Assignment
	err := s.inTx(ctx, "assign worker", func(tx pgx.Tx) error {
		if err := lockWorkerAccess(ctx, tx, worker); err != nil {
			return err
		}
		// $3 is the caller's scope. The grant and the assignment the
		// caller may already have are read after the lock, as the last
		// withdrawal or removal left them.
		var err error
		a, err = scanAssignment(tx.QueryRow(ctx, `
			INSERT INTO organization_workers (organization_id, worker_id)
			SELECT $1, $2 WHERE $3::uuid IS NULL
				OR EXISTS (SELECT 1 FROM workers w WHERE w.id = $2 AND w.owner_organization_id = $1)
				OR EXISTS (SELECT 1 FROM worker_grants g WHERE g.worker_id = $2 AND g.organization_id = $1)
				OR EXISTS (SELECT 1 FROM organization_workers ow
					WHERE ow.worker_id = $2 AND ow.organization_id = $1 AND ow.revoked_at IS NULL)
			ON CONFLICT (organization_id, worker_id) DO UPDATE SET
				enabled = true, revoked_at = NULL, revoked_by = NULL, revocation_reason = '', removed_by_platform = false,
				assigned_at = CASE WHEN organization_workers.revoked_at IS NULL THEN organization_workers.assigned_at ELSE now() END,
				updated_at = now()
			WHERE $3::uuid IS NULL OR NOT organization_workers.removed_by_platform
			RETURNING `+assignmentColumns, org, worker, tenant.Arg()))
		if core.IsForeignKeyViolation(err) {
			return ErrNotFound
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return assignRefusal(ctx, tx, tenant, org, worker)
		}
		if err != nil {
			return fmt.Errorf("assign: %w", err)
		}
		// The worker's waiting polls learn their new organization at once.
		return core.Notify(ctx, tx, Wakeup{Kind: WakeWorker, Worker: worker})
	})
	return a, err
}

// assignRefusal explains why an organization's caller could not assign a
// worker: ErrForbidden when it may see the worker but an unscoped admin
// removed the assignment, ErrNotFound otherwise.
func assignRefusal(ctx context.Context, tx pgx.Tx, tenant Tenant, org, worker uuid.UUID) error {
	var locked bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM organization_workers ow
		WHERE ow.organization_id = $1 AND ow.worker_id = $2 AND ow.removed_by_platform) AND `+core.WorkerVisibleTo("$2", "$3"),
		org, worker, tenant.Arg()).Scan(&locked)
	if err != nil {
		return fmt.Errorf("assign: %w", err)
	}
	if locked {
		return problem.Wrap(ErrForbidden, "an unscoped admin removed this assignment; only an unscoped admin may restore it")
	}
	return ErrNotFound
}

// UnassignWorker soft-revokes an assignment. New leases stop at once because
// acquisition takes the assignment row FOR SHARE and re-checks it; with
// cancelActive the organization's active attempts on this worker are ended by
// policy in the same transaction, otherwise they drain.
func (s *Store) UnassignWorker(ctx context.Context, tenant Tenant, org, worker uuid.UUID, cancelActive bool, reason string) (Assignment, error) {
	if !tenant.Allows(org) {
		return Assignment{}, ErrNotFound
	}
	var a Assignment
	err := s.inTx(ctx, "unassign worker", func(tx pgx.Tx) error {
		if err := lockWorkerAccess(ctx, tx, worker); err != nil {
			return err
		}
		var err error
		// An unscoped admin's removal is final for organization admins.
		a, err = scanAssignment(tx.QueryRow(ctx, `
			UPDATE organization_workers SET
				revoked_at = coalesce(revoked_at, now()), revocation_reason = $3, updated_at = now(),
				removed_by_platform = removed_by_platform OR $4::uuid IS NULL
			WHERE organization_id = $1 AND worker_id = $2 AND `+core.WorkerVisibleTo("$2", "$4")+`
			RETURNING `+assignmentColumns, org, worker, reason, tenant.Arg()))
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
		core.AuditDetail(ctx, "cancelled_attempts", a.CancelledAttempts)
		return core.Notify(ctx, tx, Wakeup{Kind: WakeWorker, Worker: worker})
	})
	return a, err
}
