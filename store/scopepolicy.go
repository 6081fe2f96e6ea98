package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/internal/scanscope"
	"github.com/worker-gateway/gateway/problem"
)

// Scope policies: whether an organization's scans are held to its scope
// entries (targetscope.go). A policy is a property of the organization,
// shown with it and set by a platform operator (SetScopePolicy).
const (
	// ScopePolicyAllowList holds every target to the scope entries; with
	// none, nothing may be scanned. The API's default for a new
	// organization.
	ScopePolicyAllowList = "allow_list"
	// ScopePolicyUnrestricted lets the organization scan any target.
	ScopePolicyUnrestricted = "unrestricted"
)

// checkScopePolicy refuses a policy that is neither.
func checkScopePolicy(policy string) error {
	if policy != ScopePolicyAllowList && policy != ScopePolicyUnrestricted {
		return problem.Wrap(ErrInvalid, problem.Text("scope_policy must be allow_list or unrestricted"))
	}
	return nil
}

// scopePolicySQL is the organization row o's policy as the API shows it
// (see scopeEnforcedSQL).
func scopePolicySQL(o string) string {
	return `CASE WHEN ` + scopeEnforcedSQL(o) + ` THEN '` + ScopePolicyAllowList + `' ELSE '` + ScopePolicyUnrestricted + `' END`
}

// SetScopePolicy sets an organization's scope policy; only an unscoped
// caller (a platform operator) may, as only it edits scope entries. Moving
// to allow_list narrows the scope: the organization's live work outside it
// ends in the same transaction (recheckLiveWork).
func (s *Store) SetScopePolicy(ctx context.Context, tenant Tenant, org uuid.UUID, policy string) (Organization, error) {
	if !tenant.IsEveryOrganization() {
		if tenant.Allows(org) {
			return Organization{}, fmt.Errorf("%w: only a platform operator sets a scope policy", ErrForbidden)
		}
		return Organization{}, ErrNotFound
	}
	if err := checkScopePolicy(policy); err != nil {
		return Organization{}, err
	}
	var o Organization
	err := s.inTx(ctx, "set scope policy", func(tx pgx.Tx) error {
		if err := lockScopeForNarrowing(ctx, tx, org); err != nil {
			return err
		}
		var err error
		o, err = scanOrganization(tx.QueryRow(ctx, `UPDATE organizations o SET scope_policy = $2, scope_enforced = ($2 = '`+
			ScopePolicyAllowList+`') WHERE o.id = $1 RETURNING `+organizationColumns, org, policy))
		if errors.Is(err, pgx.ErrNoRows) {
			return missingOrganization(tenant, org)
		}
		if err != nil {
			return fmt.Errorf("set scope policy: %w", err)
		}
		if policy == ScopePolicyAllowList {
			return recheckLiveWork(ctx, tx, org)
		}
		return nil
	})
	if err != nil {
		return Organization{}, err
	}
	return o, nil
}

// lockScopeForNarrowing takes the organization's scope lock exclusively
// (scopeLockClass), first in a transaction that narrows the scope: the
// deciders that read the old scope commit before it goes on, and those
// after it read the new one.
func lockScopeForNarrowing(ctx context.Context, tx pgx.Tx, org uuid.UUID) error {
	if _, err := tx.Exec(ctx, `SELECT `+scopeLockSQL("pg_advisory_xact_lock", "$1::uuid"), org); err != nil {
		return fmt.Errorf("lock scan scope: %w", err)
	}
	return nil
}

// recheckLiveWork holds the organization's live work to its scope, just
// narrowed in tx (an entry removed, the policy moved to allow_list):
//   - an active scan whose targets, asset targets, plugin inputs or found
//     assets (what advance_scan gives its later jobs) lie outside is
//     cancelled, its running job asked to stop;
//   - a scanner_plugin task that is not finished and whose payload lies
//     outside is cancelled — at once when queued, asked to stop
//     (cancelling) when a worker holds it, so it can neither be leased nor
//     retried — with last_error_code target-out-of-scope.
//
// Leases never consult the scope: this is the lease-time check, paid once
// per narrowing instead of once per lease. The caller holds the scope lock
// (lockScopeForNarrowing), so nothing decided by the old scope commits
// after these reads.
func recheckLiveWork(ctx context.Context, tx pgx.Tx, org uuid.UUID) error {
	ts, err := loadTargetScope(ctx, tx, org)
	if err != nil || !ts.Enforced() {
		return err
	}
	if err := cancelScansOutOfScope(ctx, tx, org, ts); err != nil {
		return err
	}
	return cancelTasksOutOfScope(ctx, tx, org, ts)
}

func cancelScansOutOfScope(ctx context.Context, tx pgx.Tx, org uuid.UUID, ts targetScope) error {
	rows, err := tx.Query(ctx, `
		SELECT s.id, s.targets,
			(SELECT coalesce(jsonb_agg(a.value), '[]'::jsonb)
				FROM jsonb_array_elements_text(s.asset_targets) AS x(id) JOIN assets a ON a.id = x.id::uuid),
			(SELECT coalesce(jsonb_agg(j.input ORDER BY j.position), '[]'::jsonb) FROM scan_jobs j WHERE j.scan_id = s.id),
			(SELECT coalesce(jsonb_agg(jsonb_build_object('type', a.type, 'value', a.value)), '[]'::jsonb)
				FROM scan_assets sa JOIN assets a ON a.id = sa.asset_id WHERE sa.scan_id = s.id)
		FROM scans s WHERE s.organization_id = $1 AND s.state IN (`+sqlStates(activeScanStates...)+`)`, org)
	if err != nil {
		return fmt.Errorf("read live scans: %w", err)
	}
	var outside []uuid.UUID
	var id uuid.UUID
	var targets, assetTargets []string
	var inputs []json.RawMessage
	var found []any
	_, err = pgx.ForEachRow(rows, []any{&id, &targets, &assetTargets, &inputs, &found}, func() error {
		if ts.refuse(scanscope.ScanTargets(targets, assetTargets, inputs, found)) != nil {
			outside = append(outside, id)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read live scans: %w", err)
	}
	for _, id := range outside {
		if _, err := cancelScan(ctx, tx, id, problem.TargetOutOfScope); err != nil {
			return err
		}
	}
	return nil
}

func cancelTasksOutOfScope(ctx context.Context, tx pgx.Tx, org uuid.UUID, ts targetScope) error {
	live := fromStates(EventCancelQueued) + `, ` + fromStates(EventCancelActive)
	rows, err := tx.Query(ctx, `SELECT t.id, t.task_type, t.payload FROM worker_tasks t
		WHERE t.organization_id = $1 AND t.task_type = 'scanner_plugin' AND t.state IN (`+live+`)`, org)
	if err != nil {
		return fmt.Errorf("read live tasks: %w", err)
	}
	var outside []uuid.UUID
	var id uuid.UUID
	var taskType string
	var payload json.RawMessage
	_, err = pgx.ForEachRow(rows, []any{&id, &taskType, &payload}, func() error {
		if ts.refuse(scanscope.TaskTargets(taskType, payload)) != nil {
			outside = append(outside, id)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read live tasks: %w", err)
	}
	if len(outside) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE worker_tasks t SET `+cancelTaskSetSQL+`,
			last_error_code = $2, last_error = 'the organization''s scan scope no longer includes its targets'
		WHERE t.id = ANY($1) AND t.state IN (`+live+`)`, outside, problem.TargetOutOfScope); err != nil {
		return fmt.Errorf("cancel tasks out of scope: %w", err)
	}
	if _, err := tx.Exec(ctx, dequeueSQL("t.id = ANY($1)"), outside); err != nil {
		return fmt.Errorf("dequeue tasks out of scope: %w", err)
	}
	return nil
}
