package work

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// What a creation owes the scan scope (see "Scan scope" in store/doc.go):
// every scan and task is decided by targetscope.Scope.Refuse before it
// commits, and a scan is created with the scope key its history is
// compared by (see "Scan history").

// ScanScopeKey says which scans are compared (see "Scan history" in
// store/doc.go): those with the same targets (a set: order, case and
// repeats aside; an asset target counts as its value, assetValues[id],
// since the jobs get it as one) and plugins with their inputs (in order:
// each job gets the assets the jobs before it found). A scan with other plugins, or a plugin with another input (other
// ports, other paths), observes other things, and comparing it would
// report everything the other did not look for as gone.
func ScanScopeKey(p CreateScanParams, assetValues map[uuid.UUID]string) string {
	targets := make([]string, 0, len(p.Targets)+len(p.AssetTargets))
	for _, t := range p.Targets {
		targets = append(targets, strings.ToLower(strings.TrimSpace(t)))
	}
	for _, a := range p.AssetTargets {
		v, ok := assetValues[a]
		if !ok {
			v = "asset:" + a.String() // refused by CheckScanScope anyway
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

// CheckScanScope refuses a scan whose targets, asset targets or plugin
// inputs lie outside its organization's scan scope, or that names assets
// the organization does not have (assetValues: readAssetTargets).
func CheckScanScope(ctx context.Context, tx pgx.Tx, p CreateScanParams, assetValues map[uuid.UUID]string) error {
	ts, err := targetscope.Load(ctx, tx, p.OrganizationID)
	if err != nil {
		return err
	}
	return CheckScanScopeIn(ts, p, assetValues)
}

// CheckScanScopeIn is CheckScanScope with the organization's scope already
// read (schedule fires check a claim's scans against one read per
// organization).
func CheckScanScopeIn(ts targetscope.Scope, p CreateScanParams, assetValues map[uuid.UUID]string) error {
	values := make([]string, len(p.AssetTargets))
	for i, a := range p.AssetTargets {
		v, ok := assetValues[a]
		if !ok {
			return problem.Wrap(core.ErrInvalid, problem.Text("asset_targets: the organization has no asset "+a.String()))
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
	return CheckTaskTargets(ctx, tx, p.OrganizationID, p.TaskType, p.Payload)
}

// CheckTaskTargets is checkTaskScope for a task's type and payload: a task
// created, fired by a schedule or redriven.
func CheckTaskTargets(ctx context.Context, tx pgx.Tx, org uuid.UUID, taskType string, payload json.RawMessage) error {
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
