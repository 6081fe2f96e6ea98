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
	"github.com/worker-gateway/gateway/store/internal/work"
)

// CreateTask inserts a task and wakes the pollers of its organization, in
// one transaction. Replayed is true when an earlier request with the same
// idempotency key created it.
func (s *Store) CreateTask(ctx context.Context, tenant Tenant, p CreateTaskParams) (task Task, replayed bool, err error) {
	if !tenant.Allows(p.OrganizationID) {
		return Task{}, false, ErrNotFound
	}
	err = s.inTx(ctx, "create task", func(tx pgx.Tx) error {
		task, replayed = Task{}, false
		if err := work.CheckPinnedWorker(ctx, tx, "pinned_worker_id", p.OrganizationID, p.PinnedWorkerID); err != nil {
			return err
		}
		var err error
		task, replayed, err = work.CreateTask(ctx, tx, p)
		if work.IsOrganizationMissing(err) {
			return core.MissingOrganization(tenant, p.OrganizationID)
		}
		if err != nil || replayed {
			return err
		}
		core.AuditTarget(ctx, task.ID, &task.OrganizationID)
		if p.Delay > 0 {
			return core.Notify(ctx, tx, Wakeup{Kind: WakeOrganizationAt, Organization: task.OrganizationID, Delay: p.Delay})
		}
		return core.Notify(ctx, tx, Wakeup{Kind: WakeOrganization, Organization: task.OrganizationID, Count: 1})
	})
	if err != nil {
		return Task{}, false, err
	}
	return task, replayed, nil
}

// Attempt is one worker_task_attempts row.
type Attempt struct {
	ID             uuid.UUID
	TaskID         uuid.UUID
	WorkerID       uuid.UUID
	AttemptNumber  int
	Status         AttemptStatus
	LeaseExpiresAt time.Time
	StartedAt      time.Time
	RunningAt      *time.Time
	FinishedAt     *time.Time
	ErrorCode      string
	ErrorMessage   string
}

// GetTask returns a task the scope may see, with its attempts, and while it
// waits to be leased, why.
func (s *Store) GetTask(ctx context.Context, tenant Tenant, id uuid.UUID, onlineWindow time.Duration) (Task, []Attempt, error) {
	task, err := s.readTenantTask(ctx, s.pool, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return Task{}, nil, ErrNotFound
	}
	if err != nil {
		return Task{}, nil, fmt.Errorf("get task: %w", err)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, task_id, worker_id, attempt_number, status, lease_expires_at, started_at, running_at,
			finished_at, error_code, error_message
		FROM worker_task_attempts WHERE task_id = $1 ORDER BY attempt_number`, id)
	if err != nil {
		return Task{}, nil, fmt.Errorf("get attempts: %w", err)
	}
	attempts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		err := r.Scan(&a.ID, &a.TaskID, &a.WorkerID, &a.AttemptNumber, &a.Status, &a.LeaseExpiresAt, &a.StartedAt,
			&a.RunningAt, &a.FinishedAt, &a.ErrorCode, &a.ErrorMessage)
		return a, err
	})
	if err != nil {
		return Task{}, nil, fmt.Errorf("get attempts: %w", err)
	}
	if task.State == TaskPending || task.State == TaskRetryWait {
		task.PendingReason, err = s.pendingReason(ctx, task, onlineWindow)
		if err != nil {
			return Task{}, nil, err
		}
	}
	return task, attempts, nil
}

// pendingReason explains why a queued task is not leased, from the most
// basic cause to the most transient. A pinned task looks at its one worker
// only: while that worker cannot lease (unassigned, disabled, revoked,
// offline, of another type) the reason is pinned_worker_unavailable.
func (s *Store) pendingReason(ctx context.Context, t Task, onlineWindow time.Duration) (string, error) {
	var (
		due                                                   bool
		assigned, mayRun, online, capable, labelled, withRoom int
	)
	var selector any
	if t.LabelSelector != nil {
		b, err := json.Marshal(t.LabelSelector)
		if err != nil {
			return "", fmt.Errorf("pending reason: %w", err)
		}
		selector = string(b)
	}
	err := s.pool.QueryRow(ctx, `
		WITH eligible AS (
			SELECT w.id, w.capabilities, w.max_concurrent_tasks,
				w.last_seen_at > now() - make_interval(secs => $4) AS online,
				($8::jsonb IS NULL OR worker_labels_match(w.labels, $8::jsonb)) AS labelled
			FROM organization_workers ow JOIN workers w ON w.id = ow.worker_id
			WHERE ow.organization_id = $1 AND ow.enabled AND ow.revoked_at IS NULL
				AND w.enabled AND w.revoked_at IS NULL
				AND w.worker_type = CASE $2 WHEN 'scanner_plugin' THEN 'scanner' ELSE 'ai' END
				AND ($7::uuid IS NULL OR w.id = $7)
		)
		SELECT (SELECT available_at <= now() FROM worker_tasks WHERE id = $5),
			count(*),
			count(*) FILTER (WHERE `+mayRunPluginSQL("capabilities", "$6")+`),
			count(*) FILTER (WHERE online),
			count(*) FILTER (WHERE online AND capabilities @> $3::jsonb),
			count(*) FILTER (WHERE online AND capabilities @> $3::jsonb AND labelled),
			count(*) FILTER (WHERE online AND capabilities @> $3::jsonb AND labelled AND max_concurrent_tasks >
				(SELECT count(*) FROM worker_task_attempts a WHERE `+core.WorkerLiveAttempts("a", "eligible.id")+`))
		FROM eligible`,
		t.OrganizationID, t.TaskType, string(t.RequiredCapabilities), onlineWindow.Seconds(), t.ID, taskPlugin(t),
		t.PinnedWorkerID, selector,
	).Scan(&due, &assigned, &mayRun, &online, &capable, &labelled, &withRoom)
	if err != nil {
		return "", fmt.Errorf("pending reason: %w", err)
	}
	pinned := t.PinnedWorkerID != nil
	switch {
	case !due && t.State == TaskRetryWait:
		return "retry_backoff", nil
	case !due:
		return "scheduled_later", nil
	case assigned == 0 && pinned:
		return "pinned_worker_unavailable", nil
	case assigned == 0:
		return "no_assigned_worker", nil
	case mayRun == 0:
		// Before no_online_worker: a worker coming online would not help.
		return "plugin_not_advertised", nil
	case online == 0 && pinned:
		return "pinned_worker_unavailable", nil
	case online == 0:
		return "no_online_worker", nil
	case capable == 0:
		return "capability_mismatch", nil
	case labelled == 0:
		return "label_mismatch", nil
	case withRoom == 0:
		return "capacity_full", nil
	default:
		// An eligible worker has room: the task goes with its next poll.
		return "", nil
	}
}

// taskPlugin is the plugin a scanner_plugin task runs (its payload's
// "plugin"), or nil when the task names none.
func taskPlugin(t Task) *string {
	if t.TaskType != "scanner_plugin" {
		return nil
	}
	var payload struct {
		Plugin *string `json:"plugin"`
	}
	if json.Unmarshal(t.Payload, &payload) != nil || payload.Plugin == nil || *payload.Plugin == "" {
		return nil
	}
	return payload.Plugin
}

// mayRunPluginSQL is true for a worker whose capabilities (column) may run
// the plugin bound as param: no plugin is named, the worker lists it under
// "plugins", or the worker advertises no "plugins" at all (it has not polled
// yet, or is not the plugin runtime) — that is unknown, not a refusal.
func mayRunPluginSQL(column, param string) string {
	return `(` + param + `::text IS NULL OR NOT ` + column + ` ? 'plugins' OR ` +
		column + `->'plugins' @> to_jsonb(` + param + `::text))`
}

// ListTasksParams filters and pages a task listing, newest first.
type ListTasksParams struct {
	OrganizationID *uuid.UUID
	State          *TaskState
	TaskType       *string
	// Trigger and ScheduleID keep the tasks created this way, or by this
	// schedule. No index serves them (see "Shape" in doc.go): the walk in
	// creation order stops when the page is full.
	Trigger    *TriggerKind
	ScheduleID *uuid.UUID
	// ScanID keeps one scan's tasks (worker_tasks_scan_idx).
	ScanID *uuid.UUID
	After  *Cursor
	Limit  int
}

// ListTasks pages tasks, newest first.
func (s *Store) ListTasks(ctx context.Context, tenant Tenant, p ListTasksParams) ([]Task, *Cursor, error) {
	q := core.Psql.Select(work.TaskColumns).From("worker_tasks t").Where(tenant.Where("t.organization_id"))
	if p.OrganizationID != nil {
		q = q.Where(sq.Eq{"t.organization_id": *p.OrganizationID})
	}
	if p.State != nil {
		q = q.Where(sq.Eq{"t.state": string(*p.State)})
	}
	if p.TaskType != nil {
		q = q.Where(sq.Eq{"t.task_type": *p.TaskType})
	}
	if p.Trigger != nil {
		q = q.Where(sq.Eq{"t.trigger_kind": string(*p.Trigger)})
	}
	if p.ScheduleID != nil {
		q = q.Where(sq.Eq{"t.trigger_schedule_id": *p.ScheduleID})
	}
	if p.ScanID != nil {
		q = q.Where(sq.Eq{"t.scan_id": *p.ScanID})
	}
	tasks, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("t.created_at", "t.id", func(t Task) Cursor { return Cursor{Time: t.CreatedAt, ID: t.ID} }),
		p.After, p.Limit, work.ReadTask)
	if err != nil {
		return nil, nil, fmt.Errorf("list tasks: %w", err)
	}
	if err := core.CheckListedOrganization(ctx, s.pool, tenant, p.OrganizationID, len(tasks) == 0); err != nil {
		return nil, nil, err
	}
	return tasks, next, nil
}

// cancelTaskSetSQL is the cancel edge's change to a task row t: a queued
// task is cancelled at once, one a worker holds becomes cancelling. The
// transaction must also take cancelled tasks off the queue (core.DequeueSQL).
var cancelTaskSetSQL = `
	state = CASE WHEN t.state IN (` + core.FromStates(EventCancelQueued) + `)
		THEN '` + string(TaskTransitions[EventCancelQueued].To) + `'
		ELSE '` + string(TaskTransitions[EventCancelActive].To) + `' END,
	cancel_requested_at = now(),
	completed_at = CASE WHEN t.state IN (` + core.FromStates(EventCancelQueued) + `) THEN now() ELSE NULL END,
	updated_at = now()`

// CancelTask cancels a queued task at once, or asks the worker holding it to
// stop (cancelling). Cancelling twice is harmless; a finished task is
// ErrTaskFinished.
func (s *Store) CancelTask(ctx context.Context, tenant Tenant, id uuid.UUID) (Task, error) {
	var task Task
	err := s.inTx(ctx, "cancel task", func(tx pgx.Tx) error {
		var err error
		task, err = work.ReadTask(tx.QueryRow(ctx, `
			UPDATE worker_tasks t SET `+cancelTaskSetSQL+`
			WHERE t.id = $1 AND `+core.InTenant("t.organization_id", "$2")+`
				AND t.state IN (`+core.FromStates(EventCancelQueued)+`, `+core.FromStates(EventCancelActive)+`)
			RETURNING `+work.TaskColumns, id, tenant.Arg()))
		if err == nil {
			if _, err := tx.Exec(ctx, core.DequeueSQL("t.id = $1"), id); err != nil {
				return fmt.Errorf("dequeue cancelled task: %w", err)
			}
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		task, err = s.readTenantTask(ctx, tx, tenant, id)
		if err != nil {
			return err
		}
		if task.State == TaskCancelling || task.State == TaskCancelled {
			return nil
		}
		return ErrTaskFinished
	})
	if err == nil {
		core.AuditTarget(ctx, task.ID, &task.OrganizationID)
	}
	if err != nil {
		return Task{}, err
	}
	return task, nil
}

// RetryTask (redrive) moves a dead-lettered or cancelled task back to
// pending with a fresh attempt budget. A job of a scan is redriven only
// while no other job of its scan is in flight, and reopens its scan when
// the scan had finished (reopenScanForRedrive).
func (s *Store) RetryTask(ctx context.Context, tenant Tenant, id uuid.UUID) (Task, error) {
	var task Task
	err := s.inTx(ctx, "retry task", func(tx pgx.Tx) error {
		if err := checkRedriveScope(ctx, tx, tenant, id); err != nil {
			return err
		}
		if err := reopenScanForRedrive(ctx, tx, tenant, id); err != nil {
			return err
		}
		var err error
		task, err = work.ReadTask(tx.QueryRow(ctx, `
			WITH redriven AS (
				UPDATE worker_tasks t SET
					state = '`+string(TaskTransitions[EventRedrive].To)+`',
					attempt_count = 0, available_at = now(), cancel_requested_at = NULL, completed_at = NULL,
					execution_deadline_at = CASE WHEN t.execution_deadline_at <= now() THEN NULL ELSE t.execution_deadline_at END,
					updated_at = now()
				WHERE t.id = $1 AND `+core.InTenant("t.organization_id", "$2")+`
					AND t.state IN (`+core.FromStates(EventRedrive)+`)
				RETURNING t.*
			), enqueued AS (
				`+EnqueueSQL("redriven")+`
			)
			SELECT `+work.TaskColumns+` FROM redriven t`, id, tenant.Arg()))
		if errors.Is(err, pgx.ErrNoRows) {
			if _, err := s.readTenantTask(ctx, tx, tenant, id); err != nil {
				return err
			}
			return ErrTaskNotRetryable
		}
		if err != nil {
			return err
		}
		core.AuditTarget(ctx, task.ID, &task.OrganizationID)
		return core.Notify(ctx, tx, Wakeup{Kind: WakeOrganization, Organization: task.OrganizationID, Count: 1})
	})
	if err != nil {
		return Task{}, err
	}
	return task, nil
}

// checkRedriveScope holds a redrive to the scan scope as a new task is
// (work.CheckTaskTargets): the scope may have narrowed since the task was
// created. It reads the task before locking it — its type and payload never
// change — so that the scope lock comes before the task's row lock, the
// order a narrowing takes them in (targetscope.LockForNarrowing). It decides
// whatever the task's state, which is read unlocked here and may yet become
// redrivable (a cancelling task acknowledged).
func checkRedriveScope(ctx context.Context, tx pgx.Tx, tenant Tenant, id uuid.UUID) error {
	var org uuid.UUID
	var taskType string
	var payload json.RawMessage
	err := tx.QueryRow(ctx, `SELECT t.organization_id, t.task_type, t.payload
		FROM worker_tasks t WHERE t.id = $1 AND `+core.InTenant("t.organization_id", "$2"), id, tenant.Arg()).
		Scan(&org, &taskType, &payload)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNotFound
	case err != nil:
		return fmt.Errorf("read task: %w", err)
	}
	return work.CheckTaskTargets(ctx, tx, org, taskType, payload)
}

func (s *Store) readTenantTask(ctx context.Context, ex core.Executor, tenant Tenant, id uuid.UUID) (Task, error) {
	task, err := work.ReadTask(ex.QueryRow(ctx, `SELECT `+work.TaskColumns+` FROM worker_tasks t
		WHERE t.id = $1 AND `+core.InTenant("t.organization_id", "$2"), id, tenant.Arg()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Task{}, ErrNotFound
	}
	return task, err
}
