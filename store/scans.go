package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sq "github.com/Masterminds/squirrel"
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

// CreateScan inserts a scan and all its jobs, then creates the first job's
// task; each later job's task is created by advance_scan when the previous
// job ends. Replayed is true for a repeated idempotent request.
func (s *Store) CreateScan(ctx context.Context, tenant Tenant, p CreateScanParams) (scan Scan, replayed bool, err error) {
	if !tenant.Allows(p.OrganizationID) {
		return Scan{}, false, ErrNotFound
	}
	err = s.inTx(ctx, "create scan", func(tx pgx.Tx) error {
		var id uuid.UUID
		id, replayed, err = createScan(ctx, tx, p)
		if errors.Is(err, errOrganizationMissing) {
			return core.MissingOrganization(tenant, p.OrganizationID)
		}
		if err != nil {
			return err
		}
		core.AuditTarget(ctx, id, &p.OrganizationID)
		scan, err = getScan(ctx, tx, tenant, id)
		return err
	})
	if err != nil {
		return Scan{}, false, err
	}
	return scan, replayed, nil
}

// createScan is CreateScan in the caller's transaction; it returns the
// scan's id.
func createScan(ctx context.Context, tx pgx.Tx, p CreateScanParams) (uuid.UUID, bool, error) {
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
		string(assetTargets), scanScopeKey(p, assetValues)).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		id, err = core.CreationReplay(ctx, tx, "scans", p.OrganizationID, p.IdempotencyKey, p.RequestSHA256)
		return id, err == nil, err
	case core.IsForeignKeyViolation(err):
		return uuid.Nil, false, errOrganizationMissing
	case err != nil:
		return uuid.Nil, false, fmt.Errorf("insert scan: %w", err)
	}
	if err := checkScanScope(ctx, tx, p, assetValues); err != nil {
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

// GetScan returns a scan the scope may see, with its jobs and their tasks.
func (s *Store) GetScan(ctx context.Context, tenant Tenant, id uuid.UUID) (Scan, error) {
	return getScan(ctx, s.pool, tenant, id)
}

var scanColumns = `s.id, s.organization_id, s.state, s.targets, s.asset_targets, s.created_at, s.completed_at, ` + triggerColumns("s")

func scanScan(row pgx.Row) (Scan, error) {
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

func getScan(ctx context.Context, ex core.Executor, tenant Tenant, id uuid.UUID) (Scan, error) {
	sc, err := scanScan(ex.QueryRow(ctx, `SELECT `+scanColumns+` FROM scans s
		WHERE s.id = $1 AND `+core.InTenant("s.organization_id", "$2"), id, tenant.Arg()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Scan{}, ErrNotFound
	}
	if err != nil {
		return Scan{}, fmt.Errorf("get scan: %w", err)
	}
	rows, err := ex.Query(ctx, `
		SELECT j.id, j.position, j.plugin_name, j.state, j.input, j.output, j.error, j.started_at, j.completed_at, t.id
		FROM scan_jobs j LEFT JOIN worker_tasks t ON t.scan_id = $1 AND t.scan_job_id = j.id
		WHERE j.scan_id = $1 ORDER BY j.position`, id)
	if err != nil {
		return Scan{}, fmt.Errorf("get scan jobs: %w", err)
	}
	var taskIDs []uuid.UUID
	sc.Jobs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ScanJob, error) {
		var j ScanJob
		var taskID *uuid.UUID
		err := r.Scan(&j.ID, &j.Position, &j.PluginName, &j.State, &j.Input, &j.Output, &j.Error, &j.StartedAt, &j.CompletedAt, &taskID)
		if taskID != nil {
			taskIDs = append(taskIDs, *taskID)
			j.Task = &Task{ID: *taskID}
		}
		return j, err
	})
	if err != nil {
		return Scan{}, fmt.Errorf("get scan jobs: %w", err)
	}
	if len(taskIDs) == 0 {
		return sc, nil
	}
	taskRows, err := ex.Query(ctx, `SELECT `+taskColumns+` FROM worker_tasks t WHERE t.id = ANY($1)`, taskIDs)
	if err != nil {
		return Scan{}, fmt.Errorf("get scan tasks: %w", err)
	}
	tasks, err := pgx.CollectRows(taskRows, func(r pgx.CollectableRow) (Task, error) { return scanTask(r) })
	if err != nil {
		return Scan{}, fmt.Errorf("get scan tasks: %w", err)
	}
	byID := map[uuid.UUID]Task{}
	for _, t := range tasks {
		byID[t.ID] = t
	}
	for i := range sc.Jobs {
		if sc.Jobs[i].Task != nil {
			t := byID[sc.Jobs[i].Task.ID]
			sc.Jobs[i].Task = &t
		}
	}
	return sc, nil
}

// ListScans pages scans, newest first (without their jobs).
func (s *Store) ListScans(ctx context.Context, tenant Tenant, p ListScansParams) ([]Scan, *Cursor, error) {
	q := core.Psql.Select(scanColumns).From("scans s").Where(tenant.Where("s.organization_id"))
	if p.OrganizationID != nil {
		q = q.Where(sq.Eq{"s.organization_id": *p.OrganizationID})
	}
	if p.Trigger != nil {
		q = q.Where(sq.Eq{"s.trigger_kind": string(*p.Trigger)})
	}
	if p.ScheduleID != nil {
		q = q.Where(sq.Eq{"s.trigger_schedule_id": *p.ScheduleID})
	}
	scans, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("s.created_at", "s.id", func(sc Scan) Cursor { return Cursor{Time: sc.CreatedAt, ID: sc.ID} }),
		p.After, p.Limit, scanScan)
	if err != nil {
		return nil, nil, fmt.Errorf("list scans: %w", err)
	}
	if err := core.CheckListedOrganization(ctx, s.pool, tenant, p.OrganizationID, len(scans) == 0); err != nil {
		return nil, nil, err
	}
	return scans, next, nil
}

// ListScansParams filters a page of scans: one organization's, those
// created this way (Trigger) or by one schedule (ScheduleID).
type ListScansParams struct {
	OrganizationID *uuid.UUID
	Trigger        *TriggerKind
	ScheduleID     *uuid.UUID
	After          *Cursor
	Limit          int
}

// CancelScan stops a scan: its current task is cancelled (a running one is
// asked to stop), its jobs not yet started are cancelled, and no more are
// created. Lock order is the scan's tasks, then the scan row — the same
// order as a completion, whose trigger advances the scan.
func (s *Store) CancelScan(ctx context.Context, tenant Tenant, id uuid.UUID) (Scan, error) {
	var scan Scan
	err := s.inTx(ctx, "cancel scan", func(tx pgx.Tx) error {
		sc, err := getScan(ctx, tx, tenant, id)
		if err != nil {
			return err
		}
		core.AuditTarget(ctx, sc.ID, &sc.OrganizationID)
		cancelled, err := cancelScan(ctx, tx, id, "")
		if err != nil {
			return err
		}
		if !cancelled {
			if sc.State == "cancelled" {
				scan = sc
				return nil
			}
			return ErrScanFinished
		}
		scan, err = getScan(ctx, tx, tenant, id)
		return err
	})
	if err != nil {
		return Scan{}, err
	}
	return scan, nil
}

// cancelScan cancels an active scan in tx (see CancelScan), its tasks
// with errorCode as their last_error_code when one is given; false when the
// scan had already ended. Lock order is the scan's tasks, then the scan row
// — the same order as a completion, whose trigger advances the scan.
func cancelScan(ctx context.Context, tx pgx.Tx, id uuid.UUID, errorCode string) (bool, error) {
	if _, err := tx.Exec(ctx, `SELECT id FROM worker_tasks WHERE scan_id = $1
		AND state NOT IN (`+core.SQLStates(core.FinalTaskStates()...)+`) ORDER BY id FOR UPDATE`, id); err != nil {
		return false, fmt.Errorf("lock scan tasks: %w", err)
	}
	tag, err := tx.Exec(ctx, `UPDATE scans SET state = '`+string(ScanCancelled)+`', completed_at = now(), updated_at = now()
		WHERE id = $1 AND state IN (`+core.SQLStates(core.ActiveScanStates...)+`)`, id)
	if err != nil {
		return false, fmt.Errorf("cancel scan: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	if _, err := tx.Exec(ctx, `
		UPDATE worker_tasks t SET `+cancelTaskSetSQL+`,
			last_error_code = CASE WHEN $2 = '' THEN t.last_error_code ELSE $2 END
		WHERE t.scan_id = $1 AND t.state IN (`+core.FromStates(EventCancelQueued)+`, `+core.FromStates(EventCancelActive)+`)`, id, errorCode); err != nil {
		return false, fmt.Errorf("cancel scan tasks: %w", err)
	}
	if _, err := tx.Exec(ctx, core.DequeueSQL("t.scan_id = $1"), id); err != nil {
		return false, fmt.Errorf("dequeue cancelled scan tasks: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE scan_jobs j SET state = '`+string(ScanJobCancelled)+`', completed_at = now(), updated_at = now()
		WHERE j.scan_id = $1 AND j.state = '`+string(ScanJobPending)+`'
			AND NOT EXISTS (SELECT 1 FROM worker_tasks t WHERE t.scan_id = $1 AND t.scan_job_id = j.id)`, id); err != nil {
		return false, fmt.Errorf("cancel scan jobs: %w", err)
	}
	return true, nil
}
