package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// Scan history is the history domain's (internal/history), and the scope
// key a scan is created with is creating work's (internal/work/scope.go).
// What stays here, with RetryTask, is the redrive that reopens a scan.

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
