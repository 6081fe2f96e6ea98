package store

import (
	"context"
	"errors"
	"fmt"

	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/work"
)

// CreateScan inserts a scan and all its jobs, then creates the first job's
// task; each later job's task is created by advance_scan when the previous
// job ends. Replayed is true for a repeated idempotent request.
func (s *Store) CreateScan(ctx context.Context, tenant Tenant, p CreateScanParams) (scan Scan, replayed bool, err error) {
	if !tenant.Allows(p.OrganizationID) {
		return Scan{}, false, ErrNotFound
	}
	err = s.inTx(ctx, "create scan", func(tx pgx.Tx) error {
		var id uuid.UUID
		id, replayed, err = work.CreateScan(ctx, tx, p)
		if work.IsOrganizationMissing(err) {
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

// GetScan returns a scan the scope may see, with its jobs and their tasks.
func (s *Store) GetScan(ctx context.Context, tenant Tenant, id uuid.UUID) (Scan, error) {
	return getScan(ctx, s.pool, tenant, id)
}

func getScan(ctx context.Context, ex core.Executor, tenant Tenant, id uuid.UUID) (Scan, error) {
	sc, err := work.ReadScan(ex.QueryRow(ctx, `SELECT `+work.ScanColumns+` FROM scans s
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
	taskRows, err := ex.Query(ctx, `SELECT `+work.TaskColumns+` FROM worker_tasks t WHERE t.id = ANY($1)`, taskIDs)
	if err != nil {
		return Scan{}, fmt.Errorf("get scan tasks: %w", err)
	}
	tasks, err := pgx.CollectRows(taskRows, func(r pgx.CollectableRow) (Task, error) { return work.ReadTask(r) })
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
	q := core.Psql.Select(work.ScanColumns).From("scans s").Where(tenant.Where("s.organization_id"))
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
		p.After, p.Limit, work.ReadScan)
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
