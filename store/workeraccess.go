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

// authorizeWorkerManagement decides whether the scope may change a worker
// itself (rename, resize, disable, certificates, enrollment tokens,
// revocation, grants): unscoped callers may change every worker, an
// organization only the workers it owns. A worker the scope cannot see is
// ErrNotFound, one it sees but does not own ErrForbidden. Ownership never
// changes, so deciding it before the change is not a race.
func authorizeWorkerManagement(ctx context.Context, ex core.Executor, tenant Tenant, worker uuid.UUID) error {
	if tenant.IsEveryOrganization() {
		return nil
	}
	var owns, sees bool
	err := ex.QueryRow(ctx, `SELECT w.owner_organization_id IS NOT DISTINCT FROM $2, `+core.WorkerVisibleTo("w.id", "$2")+`
		FROM workers w WHERE w.id = $1`, worker, tenant.Arg()).Scan(&owns, &sees)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNotFound
	case err != nil:
		return fmt.Errorf("authorize worker management: %w", err)
	case owns:
		return nil
	case sees:
		return problem.Wrap(ErrForbidden, "only the organization that owns this worker, or an unscoped admin, may change it")
	}
	return ErrNotFound
}

// WorkerGrant is an owner's permission for another organization to assign
// its worker.
type WorkerGrant struct {
	WorkerID       uuid.UUID
	OrganizationID uuid.UUID
	GrantedAt      time.Time
}

// GrantWorker lets an organization assign a worker (the grant alone leases
// nothing: the grantee's admin still assigns it). Only the owner or an
// unscoped caller may grant. Idempotent.
func (s *Store) GrantWorker(ctx context.Context, tenant Tenant, worker, org uuid.UUID) (WorkerGrant, error) {
	g := WorkerGrant{WorkerID: worker, OrganizationID: org}
	err := s.inTx(ctx, "grant worker", func(tx pgx.Tx) error {
		if err := authorizeWorkerManagement(ctx, tx, tenant, worker); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `
			INSERT INTO worker_grants (worker_id, organization_id) VALUES ($1, $2)
			ON CONFLICT (worker_id, organization_id) DO UPDATE SET granted_at = worker_grants.granted_at
			RETURNING granted_at`, worker, org).Scan(&g.GrantedAt)
		if core.IsForeignKeyViolation(err) {
			return fmt.Errorf("%w: organization", ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("grant worker: %w", err)
		}
		return nil
	})
	if err != nil {
		return WorkerGrant{}, err
	}
	return g, nil
}

// lockWorkerAccess takes the worker's row before a change of which
// organizations it serves — assigning, unassigning, withdrawing a grant —
// so that these run one at a time per worker, each after the last has
// committed. Every such change decides in a statement after this one: under
// READ COMMITTED a statement reads rows as they stood when it began, so a
// decision read before the lock was had (an "already assigned" seen just
// before a withdrawal committed) would revive what the withdrawal removed.
// The workers row comes first in the lock order (doc.go), as acquisition
// takes it. FOR NO KEY UPDATE leaves foreign-key checks free.
func lockWorkerAccess(ctx context.Context, tx pgx.Tx, worker uuid.UUID) error {
	var id uuid.UUID
	err := tx.QueryRow(ctx, `SELECT id FROM workers WHERE id = $1 FOR NO KEY UPDATE`, worker).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("lock worker: %w", err)
	}
	return nil
}

// RevokeWorkerGrant withdraws a grant and, in the same transaction, removes
// the grantee's assignment of the worker (cancelling or draining its active
// attempts there): a grant withdrawn must not leave the worker serving the
// grantee. It holds the worker's row (lockWorkerAccess), so an assignment
// either committed before it, and is removed here, or decides after it,
// and finds no grant.
func (s *Store) RevokeWorkerGrant(ctx context.Context, tenant Tenant, worker, org uuid.UUID, cancelActive bool) error {
	if err := authorizeWorkerManagement(ctx, s.pool, tenant, worker); err != nil {
		return err
	}
	return s.inTx(ctx, "revoke worker grant", func(tx pgx.Tx) error {
		if err := lockWorkerAccess(ctx, tx, worker); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM worker_grants WHERE worker_id = $1 AND organization_id = $2`, worker, org)
		if err != nil {
			return fmt.Errorf("revoke grant: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		tag, err = tx.Exec(ctx, `
			UPDATE organization_workers SET revoked_at = now(), revocation_reason = 'grant revoked', updated_at = now()
			WHERE organization_id = $1 AND worker_id = $2 AND revoked_at IS NULL
				AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.id = $2 AND w.owner_organization_id = $1)`, org, worker)
		if err != nil {
			return fmt.Errorf("remove granted assignment: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		if cancelActive {
			if _, err := releaseAttempts(ctx, tx, worker, &org, "assignment_removed"); err != nil {
				return err
			}
		}
		return core.Notify(ctx, tx, Wakeup{Kind: WakeWorker, Worker: worker})
	})
}

// WorkerGrants lists a worker's grants, for its owner or an unscoped caller.
func (s *Store) WorkerGrants(ctx context.Context, tenant Tenant, worker uuid.UUID) ([]WorkerGrant, error) {
	if err := authorizeWorkerManagement(ctx, s.pool, tenant, worker); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT worker_id, organization_id, granted_at FROM worker_grants
		WHERE worker_id = $1 ORDER BY granted_at, organization_id`, worker)
	if err != nil {
		return nil, fmt.Errorf("worker grants: %w", err)
	}
	grants, err := pgx.CollectRows(rows, pgx.RowToStructByPos[WorkerGrant])
	if err != nil {
		return nil, fmt.Errorf("worker grants: %w", err)
	}
	return grants, nil
}
