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
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/internal/scanscope"
	"github.com/worker-gateway/gateway/problem"
)

// Asset history. Ingestion records what each scan observed of each asset
// (scan_assets.details, merged over the scan's batches). When a scan
// completes, record_scan_history (migration 000023) snapshots that into
// asset_scan_snapshots and, when every job of the scan completed, compares
// it with the latest earlier-created such scan of the same scope key
// (compare_scan_history), writing asset_scan_changes — in the transaction
// that completes the scan, keyed (scan, asset, kind), so a retried batch, a
// second attempt or a scan completed again never adds a change twice. It
// then compares the next scan of the scope key again, whose earlier scan
// may now be this one (scans can complete out of order), and it holds a
// per-scope-key advisory lock so two scans completing at once see each
// other. A scan with a failed or cancelled job saw only part of its scope:
// it is neither compared nor compared with, until a redrive completes it.
// The first scan of a scope key is the baseline and has no changes (no
// flood of "appeared"). exposure_changes is the organization's timeline of
// them all.

// Change kinds.
const (
	ChangeAssetAppeared      = "asset_appeared"
	ChangeAssetDisappeared   = "asset_disappeared"
	ChangePortOpened         = "port_opened"
	ChangePortClosed         = "port_closed"
	ChangeCertificateChanged = "certificate_changed"
	ChangeHTTPStatusChanged  = "http_status_changed"
)

// ChangeKinds lists every change kind.
var ChangeKinds = []string{ChangeAssetAppeared, ChangeAssetDisappeared, ChangePortOpened, ChangePortClosed,
	ChangeCertificateChanged, ChangeHTTPStatusChanged}

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
	ts, err := loadTargetScope(ctx, tx, p.OrganizationID)
	if err != nil {
		return err
	}
	return checkScanScopeIn(ts, p, assetValues)
}

// checkScanScopeIn is checkScanScope with the organization's scope already
// read (schedule fires check a claim's scans against one read per
// organization).
func checkScanScopeIn(ts targetScope, p CreateScanParams, assetValues map[uuid.UUID]string) error {
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
	ts, err := loadTargetScope(ctx, tx, org)
	if err != nil {
		return err
	}
	return ts.Refuse(named)
}

// AssetChange is one change between two completed scans.
type AssetChange struct {
	ID             uuid.UUID
	OrganizationID uuid.UUID
	ScanID         uuid.UUID
	PreviousScanID *uuid.UUID
	AssetID        *uuid.UUID
	AssetType      string
	AssetValue     string
	Kind           string
	Before         json.RawMessage
	After          json.RawMessage
	DetectedAt     time.Time
}

// ChangeFilter narrows a page of changes: by kinds, and to those detected
// at or after Since and before Until.
type ChangeFilter struct {
	Kinds []string
	Since *time.Time
	Until *time.Time
	After *Cursor
	Limit int
}

func (f ChangeFilter) check() error {
	for _, k := range f.Kinds {
		if !slices.Contains(ChangeKinds, k) {
			return problem.Wrap(ErrInvalid, problem.Text("unknown change kind "+k))
		}
	}
	return nil
}

// ListScanChanges pages a scan's changes against the scan before it, newest
// first.
func (s *Store) ListScanChanges(ctx context.Context, tenant Tenant, scanID uuid.UUID, f ChangeFilter) ([]AssetChange, *Cursor, error) {
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM scans s WHERE s.id = $1 AND `+inTenant("s.organization_id", "$2")+`)`,
		scanID, tenant.Arg()).Scan(&exists); err != nil {
		return nil, nil, fmt.Errorf("list scan changes: %w", err)
	}
	if !exists {
		return nil, nil, ErrNotFound
	}
	return s.listChanges(ctx, tenant, sq.Eq{"c.scan_id": scanID}, f)
}

// ListExposureChanges pages an organization's exposure-change timeline,
// newest first.
func (s *Store) ListExposureChanges(ctx context.Context, tenant Tenant, org uuid.UUID, f ChangeFilter) ([]AssetChange, *Cursor, error) {
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	if _, err := s.GetOrganization(ctx, tenant, org); err != nil {
		return nil, nil, err
	}
	return s.listChanges(ctx, tenant, sq.Eq{"c.organization_id": org}, f)
}

// listChanges pages the changes of one scan or organization (of, which the
// caller has found in the tenant), newest first.
func (s *Store) listChanges(ctx context.Context, tenant Tenant, of sq.Sqlizer, f ChangeFilter) ([]AssetChange, *Cursor, error) {
	q := psql.Select(`c.id, c.organization_id, c.scan_id, c.previous_scan_id, c.asset_id, c.asset_type, c.asset_value,
			c.kind, c.before, c.after, c.detected_at`).
		From("exposure_changes c").Where(tenant.Where("c.organization_id")).Where(of)
	if len(f.Kinds) > 0 {
		q = q.Where("c.kind = ANY(?)", f.Kinds)
	}
	if f.Since != nil {
		q = q.Where("c.detected_at >= ?", *f.Since)
	}
	if f.Until != nil {
		q = q.Where("c.detected_at < ?", *f.Until)
	}
	changes, next, err := listPage(ctx, s.pool, q,
		newestFirst("c.detected_at", "c.id", func(c AssetChange) Cursor { return Cursor{Time: c.DetectedAt, ID: c.ID} }),
		f.After, f.Limit, func(r pgx.Row) (AssetChange, error) {
			var c AssetChange
			err := r.Scan(&c.ID, &c.OrganizationID, &c.ScanID, &c.PreviousScanID, &c.AssetID, &c.AssetType, &c.AssetValue,
				&c.Kind, &c.Before, &c.After, &c.DetectedAt)
			return c, err
		})
	if err != nil {
		return nil, nil, fmt.Errorf("list changes: %w", err)
	}
	return changes, next, nil
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
	err := tx.QueryRow(ctx, `SELECT t.scan_id, t.state IN (`+fromStates(EventRedrive)+`) FROM worker_tasks t
		WHERE t.id = $1 AND `+inTenant("t.organization_id", "$2")+` FOR UPDATE`, taskID, tenant.Arg()).Scan(&scanID, &retryable)
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
			AND t.scan_job_id IS NOT NULL AND t.state NOT IN (`+sqlStates(finalTaskStates()...)+`))`,
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

// AssetEdge is a relation between two of an organization's assets.
type AssetEdge struct {
	ID             uuid.UUID
	OrganizationID uuid.UUID
	From, To       AssetRef
	Relation       string
	FirstSeenAt    time.Time
	LastSeenAt     time.Time
}

// AssetRef names an asset.
type AssetRef struct {
	ID          uuid.UUID
	Type, Value string
}

// ListAssetEdges pages an organization's asset graph, newest first: every
// edge, or those from or to one asset.
func (s *Store) ListAssetEdges(ctx context.Context, tenant Tenant, org uuid.UUID, asset *uuid.UUID, after *Cursor, limit int) ([]AssetEdge, *Cursor, error) {
	if _, err := s.GetOrganization(ctx, tenant, org); err != nil {
		return nil, nil, err
	}
	q := psql.Select("e.id, e.organization_id, f.id, f.type, f.value, e.relation, t.id, t.type, t.value, e.first_seen_at, e.last_seen_at").
		From("asset_edges e").Join("assets f ON f.id = e.from_asset_id").Join("assets t ON t.id = e.to_asset_id").
		Where(tenant.Where("e.organization_id")).Where(sq.Eq{"e.organization_id": org})
	if asset != nil {
		q = q.Where(sq.Or{sq.Eq{"e.from_asset_id": *asset}, sq.Eq{"e.to_asset_id": *asset}})
	}
	edges, next, err := listPage(ctx, s.pool, q,
		newestFirst("e.first_seen_at", "e.id", func(e AssetEdge) Cursor { return Cursor{Time: e.FirstSeenAt, ID: e.ID} }),
		after, limit, func(r pgx.Row) (AssetEdge, error) {
			var e AssetEdge
			err := r.Scan(&e.ID, &e.OrganizationID, &e.From.ID, &e.From.Type, &e.From.Value, &e.Relation,
				&e.To.ID, &e.To.Type, &e.To.Value, &e.FirstSeenAt, &e.LastSeenAt)
			return e, err
		})
	if err != nil {
		return nil, nil, fmt.Errorf("list asset edges: %w", err)
	}
	return edges, next, nil
}
