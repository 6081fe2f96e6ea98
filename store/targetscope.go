package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/internal/scanscope"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/targetscope"
)

// An organization's scan scope is the scan-scope domain's
// (store/internal/targetscope): the entries, the policy, the lock that
// orders reads against a narrowing, and the one decision
// targetscope.Scope.Refuse (see "Scan scope" in doc.go). The Store embeds
// its Scopes, so its verbs (AddScopeTarget, ListScopeTargets,
// RemoveScopeTarget) are the Store's, and its types are named here. What a
// narrowing does to the live work is this package's (recheckLiveWork
// below), as tasks and scans are: the Store hands it to targetscope.New.
type (
	OutOfScopeError   = targetscope.OutOfScopeError
	ScopeTarget       = targetscope.ScopeTarget
	ScopeTargetParams = targetscope.ScopeTargetParams
)

// Scope target kinds (scanscope's entry kinds).
const (
	ScopeDomain    = targetscope.ScopeDomain
	ScopeIP        = targetscope.ScopeIP
	ScopeCIDR      = targetscope.ScopeCIDR
	ScopeURLPrefix = targetscope.ScopeURLPrefix
)

// ParseScopeTarget checks an entry and returns its canonical value and
// whether it includes subdomains ("*.example.com" does); a refusal is
// ErrInvalid.
func ParseScopeTarget(kind, value string, includeSubdomains bool) (string, bool, error) {
	return targetscope.ParseScopeTarget(kind, value, includeSubdomains)
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
// (targetscope.LockForNarrowing), so nothing decided by the old scope commits
// after these reads.
func recheckLiveWork(ctx context.Context, tx pgx.Tx, org uuid.UUID) error {
	ts, err := targetscope.Load(ctx, tx, org)
	if err != nil || !ts.Enforced() {
		return err
	}
	if err := cancelScansOutOfScope(ctx, tx, org, ts); err != nil {
		return err
	}
	return cancelTasksOutOfScope(ctx, tx, org, ts)
}

func cancelScansOutOfScope(ctx context.Context, tx pgx.Tx, org uuid.UUID, ts targetscope.Scope) error {
	rows, err := tx.Query(ctx, `
		SELECT s.id, s.targets,
			(SELECT coalesce(jsonb_agg(a.value), '[]'::jsonb)
				FROM jsonb_array_elements_text(s.asset_targets) AS x(id) JOIN assets a ON a.id = x.id::uuid),
			(SELECT coalesce(jsonb_agg(j.input ORDER BY j.position), '[]'::jsonb) FROM scan_jobs j WHERE j.scan_id = s.id),
			(SELECT coalesce(jsonb_agg(jsonb_build_object('type', a.type, 'value', a.value)), '[]'::jsonb)
				FROM scan_assets sa JOIN assets a ON a.id = sa.asset_id WHERE sa.scan_id = s.id)
		FROM scans s WHERE s.organization_id = $1 AND s.state IN (`+core.SQLStates(core.ActiveScanStates...)+`)`, org)
	if err != nil {
		return fmt.Errorf("read live scans: %w", err)
	}
	var outside []uuid.UUID
	var id uuid.UUID
	var targets, assetTargets []string
	var inputs []json.RawMessage
	var found []any
	_, err = pgx.ForEachRow(rows, []any{&id, &targets, &assetTargets, &inputs, &found}, func() error {
		if ts.Refuse(scanscope.ScanTargets(targets, assetTargets, inputs, found)) != nil {
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

func cancelTasksOutOfScope(ctx context.Context, tx pgx.Tx, org uuid.UUID, ts targetscope.Scope) error {
	live := core.FromStates(EventCancelQueued) + `, ` + core.FromStates(EventCancelActive)
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
		if ts.Refuse(scanscope.TaskTargets(taskType, payload)) != nil {
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
	if _, err := tx.Exec(ctx, core.DequeueSQL("t.id = ANY($1)"), outside); err != nil {
		return fmt.Errorf("dequeue tasks out of scope: %w", err)
	}
	return nil
}
