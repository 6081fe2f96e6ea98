package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/internal/scanscope"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/targetscope"
)

// Scan history is the history domain's (internal/history). What tasks and
// scans owe it stays here, with them: the scope key a scan is created with,
// the scope checks of a creation, and the redrive that reopens a scan.

// scanScopeKey says which scans are compared: those with the same targets
// (a set: order, case and repeats aside; an asset target counts as its
// value, assetValues[id], since the jobs get it as one) and plugins with
// their inputs (in order: each job gets the assets the jobs before it
// found). A scan with other plugins, or a plugin with another input (other
// ports, other paths), observes other things, and comparing it would
// report everything the other did not look for as gone.
func scanScopeKey(p CreateScanParams, assetValues map[uuid.UUID]string) string {
	targets := make([]string, 0, len(p.Targets)+len(p.AssetTargets))
	for _, t := range p.Targets {
		targets = append(targets, strings.ToLower(strings.TrimSpace(t)))
	}
	for _, a := range p.AssetTargets {
		v, ok := assetValues[a]
		if !ok {
			v = "asset:" + a.String() // refused by checkScanScope anyway
		}
		targets = append(targets, strings.ToLower(v))
	}
	slices.Sort(targets)
	targets = slices.Compact(targets)
	plugins := make([]any, len(p.Plugins))
	for i, pl := range p.Plugins {
		plugins[i] = []any{pl.Name, canonicalInput(pl.Input)}
	}
	b, _ := json.Marshal([]any{targets, plugins})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// readAssetTargets is the values of a scan's asset targets the
// organization has, by id.
func readAssetTargets(ctx context.Context, tx pgx.Tx, p CreateScanParams) (map[uuid.UUID]string, error) {
	values := map[uuid.UUID]string{}
	if len(p.AssetTargets) == 0 {
		return values, nil
	}
	rows, err := tx.Query(ctx, `SELECT id, value FROM assets WHERE organization_id = $1 AND id = ANY($2)`,
		p.OrganizationID, p.AssetTargets)
	if err != nil {
		return nil, fmt.Errorf("read asset targets: %w", err)
	}
	var id uuid.UUID
	var value string
	if _, err := pgx.ForEachRow(rows, []any{&id, &value}, func() error { values[id] = value; return nil }); err != nil {
		return nil, fmt.Errorf("read asset targets: %w", err)
	}
	return values, nil
}

// canonicalInput is a plugin input as a value that marshals the same
// whatever its key order and spacing; no input is the empty object, as the
// job stores it.
func canonicalInput(input json.RawMessage) any {
	var v any
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	if len(bytes.TrimSpace(input)) == 0 || dec.Decode(&v) != nil || v == nil {
		return map[string]any{}
	}
	return v
}

func uuidsOrEmpty(ids []uuid.UUID) []uuid.UUID {
	if ids == nil {
		return []uuid.UUID{}
	}
	return ids
}

// checkScanScope refuses a scan whose targets, asset targets or plugin
// inputs lie outside its organization's scan scope, or that names assets
// the organization does not have (assetValues: readAssetTargets).
func checkScanScope(ctx context.Context, tx pgx.Tx, p CreateScanParams, assetValues map[uuid.UUID]string) error {
	ts, err := targetscope.Load(ctx, tx, p.OrganizationID)
	if err != nil {
		return err
	}
	return checkScanScopeIn(ts, p, assetValues)
}

// checkScanScopeIn is checkScanScope with the organization's scope already
// read (schedule fires check a claim's scans against one read per
// organization).
func checkScanScopeIn(ts targetscope.Scope, p CreateScanParams, assetValues map[uuid.UUID]string) error {
	values := make([]string, len(p.AssetTargets))
	for i, a := range p.AssetTargets {
		v, ok := assetValues[a]
		if !ok {
			return problem.Wrap(ErrInvalid, problem.Text("asset_targets: the organization has no asset "+a.String()))
		}
		values[i] = v
	}
	inputs := make([]json.RawMessage, len(p.Plugins))
	for i, plugin := range p.Plugins {
		inputs[i] = plugin.Input
	}
	return ts.Refuse(scanscope.ScanTargets(p.Targets, values, inputs, nil))
}

// checkTaskScope refuses a scanner_plugin task whose payload names targets
// outside its organization's scan scope (scanscope.TaskTargets: its targets, its
// input, the assets it carries): a task is no way around the scope a scan
// is held to.
func checkTaskScope(ctx context.Context, tx pgx.Tx, p CreateTaskParams) error {
	return checkTaskTargets(ctx, tx, p.OrganizationID, p.TaskType, p.Payload)
}

// checkTaskTargets is checkTaskScope for a task's type and payload: a task
// created, fired by a schedule or redriven.
func checkTaskTargets(ctx context.Context, tx pgx.Tx, org uuid.UUID, taskType string, payload json.RawMessage) error {
	named := scanscope.TaskTargets(taskType, payload)
	if len(named) == 0 {
		return nil
	}
	ts, err := targetscope.Load(ctx, tx, org)
	if err != nil {
		return err
	}
	return ts.Refuse(named)
}

// reopenScanForRedrive prepares a redrive of task, a job of a scan: the
// scan runs one job at a time, so a redrive while another of its jobs is in
// flight is ErrScanBusy; a finished scan (completed or failed) is reopened,
// and completes again — its history recomputed — once the job has ended. A
// cancelled scan stays cancelled (ErrScanFinished). The task row is locked
// first, then the scan's, the order of a completion.
func reopenScanForRedrive(ctx context.Context, tx pgx.Tx, tenant Tenant, taskID uuid.UUID) error {
	var scanID *uuid.UUID
	var retryable bool
	err := tx.QueryRow(ctx, `SELECT t.scan_id, t.state IN (`+core.FromStates(EventRedrive)+`) FROM worker_tasks t
		WHERE t.id = $1 AND `+core.InTenant("t.organization_id", "$2")+` FOR UPDATE`, taskID, tenant.Arg()).Scan(&scanID, &retryable)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNotFound
	case err != nil:
		return fmt.Errorf("lock task: %w", err)
	case scanID == nil || !retryable:
		return nil
	}
	var state string
	if err := tx.QueryRow(ctx, `SELECT s.state FROM scans s WHERE s.id = $1 FOR UPDATE`, *scanID).Scan(&state); err != nil {
		return fmt.Errorf("lock scan: %w", err)
	}
	// Read in a statement of its own, after the scan's lock is held: one
	// begun before waiting for it would not see the job a redrive that
	// held it has just put back in flight.
	var busy bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM worker_tasks t WHERE t.scan_id = $1 AND t.id <> $2
			AND t.scan_job_id IS NOT NULL AND t.state NOT IN (`+core.SQLStates(core.FinalTaskStates()...)+`))`,
		*scanID, taskID).Scan(&busy); err != nil {
		return fmt.Errorf("read the scan's jobs: %w", err)
	}
	switch {
	case ScanState(state) == ScanCancelled:
		return problem.Wrap(ErrScanFinished, "the task's scan was cancelled; a cancelled scan is not reopened")
	case busy:
		return ErrScanBusy
	case ScanState(state) == ScanCompleted || ScanState(state) == ScanFailed:
		if _, err := tx.Exec(ctx, `UPDATE scans SET state = '`+string(ScanRunning)+`', completed_at = NULL, updated_at = now() WHERE id = $1`, *scanID); err != nil {
			return fmt.Errorf("reopen scan: %w", err)
		}
	}
	return nil
}
