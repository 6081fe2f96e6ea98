package work

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// ScanPlugin is one step of a scan.
type ScanPlugin struct {
	Name                 string
	Input                json.RawMessage
	TimeoutSeconds       *int
	RequiredCapabilities json.RawMessage
}

// CreateScanParams describes a new scan.
type CreateScanParams struct {
	OrganizationID uuid.UUID
	Targets        []string
	// AssetTargets are assets of the organization the scan also targets
	// (their values join Targets in the jobs' payloads).
	AssetTargets   []uuid.UUID
	Plugins        []ScanPlugin
	Priority       int
	IdempotencyKey string
	RequestSHA256  string
	// Trigger is what caused the scan; nil is the API.
	Trigger *Trigger
}

// Scan is a scan with its jobs.
type Scan struct {
	ID             uuid.UUID
	OrganizationID uuid.UUID
	State          string
	Targets        []string
	AssetTargets   []uuid.UUID
	CreatedAt      time.Time
	CompletedAt    *time.Time
	Jobs           []ScanJob
	// Trigger is what created the scan; nil for scans older than triggers.
	Trigger *Trigger
}

// ScanJob is one plugin execution of a scan, with its task once created.
type ScanJob struct {
	ID         uuid.UUID
	Position   int
	PluginName string
	State      string
	Input      json.RawMessage
	// Output is the job's summary once it ended: records by kind and the
	// artifacts its attempts committed.
	Output      json.RawMessage
	Error       string
	StartedAt   *time.Time
	CompletedAt *time.Time
	Task        *Task
}

// CreateScan inserts a scan and all its jobs in tx, then creates the first
// job's task (advance_scan); each later job's task is created by
// advance_scan when the previous job ends. It returns the scan's id;
// replayed is true for a repeated idempotent request.
func CreateScan(ctx context.Context, tx pgx.Tx, p CreateScanParams) (uuid.UUID, bool, error) {
	var id uuid.UUID
	assetValues, err := readAssetTargets(ctx, tx, p)
	if err != nil {
		return uuid.Nil, false, err
	}
	targets, _ := json.Marshal(p.Targets)
	assetTargets, _ := json.Marshal(uuidsOrEmpty(p.AssetTargets))
	tr := p.Trigger.orAPI()
	err = tx.QueryRow(ctx, `
		INSERT INTO scans (organization_id, targets, priority, idempotency_key, request_sha256,
			trigger_kind, trigger_schedule_id, trigger_schedule_version, trigger_slot_at, trigger_token_id,
			asset_targets, scope_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (organization_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
		RETURNING id`, p.OrganizationID, string(targets), p.Priority, core.NullString(p.IdempotencyKey), p.RequestSHA256,
		tr.Kind, tr.ScheduleID, tr.ScheduleVersion, tr.SlotAt, tr.TokenID,
		string(assetTargets), ScanScopeKey(p, assetValues)).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		id, err = core.CreationReplay(ctx, tx, "scans", p.OrganizationID, p.IdempotencyKey, p.RequestSHA256)
		return id, err == nil, err
	case core.IsForeignKeyViolation(err):
		return uuid.Nil, false, errOrganizationMissing
	case err != nil:
		return uuid.Nil, false, fmt.Errorf("insert scan: %w", err)
	}
	if err := CheckScanScope(ctx, tx, p, assetValues); err != nil {
		return uuid.Nil, false, err
	}
	for i, plugin := range p.Plugins {
		input := plugin.Input
		if len(input) == 0 {
			input = json.RawMessage(`{}`)
		}
		caps := plugin.RequiredCapabilities
		if len(caps) == 0 {
			caps = json.RawMessage(`{}`)
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO scan_jobs (scan_id, organization_id, position, plugin_name, input, timeout_seconds, required_capabilities)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			id, p.OrganizationID, i, plugin.Name, string(input), plugin.TimeoutSeconds, string(caps)); err != nil {
			return uuid.Nil, false, fmt.Errorf("insert scan job: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `SELECT advance_scan($1)`, id); err != nil {
		return uuid.Nil, false, fmt.Errorf("start scan: %w", err)
	}
	return id, false, nil
}

// ScanColumns are the columns of scans s that ReadScan reads.
var ScanColumns = `s.id, s.organization_id, s.state, s.targets, s.asset_targets, s.created_at, s.completed_at, ` + triggerColumns("s")

// ReadScan reads a row of ScanColumns (a scan without its jobs).
func ReadScan(row pgx.Row) (Scan, error) {
	var sc Scan
	var targets, assetTargets json.RawMessage
	var tr triggerRow
	if err := row.Scan(append([]any{&sc.ID, &sc.OrganizationID, &sc.State, &targets, &assetTargets, &sc.CreatedAt, &sc.CompletedAt}, tr.dest()...)...); err != nil {
		return Scan{}, err
	}
	sc.Trigger = tr.trigger()
	if err := json.Unmarshal(targets, &sc.Targets); err != nil {
		return Scan{}, fmt.Errorf("scan targets: %w", err)
	}
	if err := json.Unmarshal(assetTargets, &sc.AssetTargets); err != nil {
		return Scan{}, fmt.Errorf("scan asset targets: %w", err)
	}
	return sc, nil
}
