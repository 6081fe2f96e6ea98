package work

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/internal/labels"
	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/secrets"
)

// errOrganizationMissing is a creation's missing organization, before the
// facade words it for its caller's tenant (core.MissingOrganization). It is
// ErrNotFound, not a sentinel of its own.
var errOrganizationMissing = fmt.Errorf("%w: organization", core.ErrNotFound)

// IsOrganizationMissing reports whether a creation failed because its
// organization does not exist.
func IsOrganizationMissing(err error) bool { return errors.Is(err, errOrganizationMissing) }

// Task is a worker_tasks row as producers see it.
type Task struct {
	ID                    uuid.UUID
	TaskType              string
	OrganizationID        uuid.UUID
	ScanID                *uuid.UUID
	ScanJobID             *uuid.UUID
	State                 core.TaskState
	Priority              int
	Payload               json.RawMessage
	RequiredCapabilities  json.RawMessage
	AttemptCount          int
	MaxAttempts           int
	AvailableAt           time.Time
	ExecutionDeadlineAt   *time.Time
	LeaseDurationSeconds  int
	AttemptTimeoutSeconds *int
	CancelRequestedAt     *time.Time
	CompletedAt           *time.Time
	LastErrorCode         string
	LastError             string
	CreatedAt             time.Time
	UpdatedAt             time.Time
	// LabelSelector, when set, is the labels a worker needs to run the
	// task; PinnedWorkerID, when set, the one worker that may run it.
	LabelSelector  *labels.Selector
	PinnedWorkerID *uuid.UUID
	// PendingReason is set by GetTask while the task waits to be leased.
	PendingReason string
	// Trigger is what created the task; nil for tasks older than triggers.
	Trigger *Trigger
}

// TaskColumns are the columns of worker_tasks t that ReadTask reads.
const TaskColumns = `t.id, t.task_type, t.organization_id, t.scan_id, t.scan_job_id, t.state, t.priority,
	t.payload, t.required_capabilities, t.attempt_count, t.max_attempts, t.available_at,
	t.execution_deadline_at, t.lease_duration_seconds, t.attempt_timeout_seconds,
	t.cancel_requested_at, t.completed_at, t.last_error_code, t.last_error, t.created_at, t.updated_at,
	t.trigger_kind, t.trigger_schedule_id, t.trigger_schedule_version, t.trigger_slot_at, t.trigger_token_id,
	t.label_selector, t.pinned_worker_id`

// ReadTask reads a row of TaskColumns.
func ReadTask(row pgx.Row) (Task, error) {
	var t Task
	var tr triggerRow
	err := row.Scan(append([]any{&t.ID, &t.TaskType, &t.OrganizationID, &t.ScanID, &t.ScanJobID, &t.State, &t.Priority,
		&t.Payload, &t.RequiredCapabilities, &t.AttemptCount, &t.MaxAttempts, &t.AvailableAt,
		&t.ExecutionDeadlineAt, &t.LeaseDurationSeconds, &t.AttemptTimeoutSeconds,
		&t.CancelRequestedAt, &t.CompletedAt, &t.LastErrorCode, &t.LastError, &t.CreatedAt, &t.UpdatedAt},
		append(tr.dest(), &t.LabelSelector, &t.PinnedWorkerID)...)...)
	t.Trigger = tr.trigger()
	return t, err
}

// CreateTaskParams describes a new task. Zero values take the defaults.
type CreateTaskParams struct {
	OrganizationID       uuid.UUID
	TaskType             string
	Payload              json.RawMessage
	RequiredCapabilities json.RawMessage
	// CriticalCapabilities are capabilities the task cannot lose mid-run.
	CriticalCapabilities  json.RawMessage
	Priority              int
	Delay                 time.Duration
	ExecutionTimeout      time.Duration
	MaxAttempts           int
	LeaseDurationSeconds  int
	AttemptTimeoutSeconds *int
	RetryBaseSeconds      float64
	RetryMaxSeconds       float64
	ScanID                *uuid.UUID
	ScanJobID             *uuid.UUID
	// IdempotencyKey and RequestSHA256 make creation repeatable: the same key
	// and checksum return the first task, another checksum is refused.
	IdempotencyKey string
	RequestSHA256  string
	// Trigger is what caused the task; nil is the API.
	Trigger *Trigger
	// LabelSelector restricts the task to workers whose labels match it;
	// PinnedWorkerID to one worker, which the organization must be able to
	// see. Both may be given: the pinned worker must then match too.
	LabelSelector  *labels.Selector
	PinnedWorkerID *uuid.UUID
	// SecretRefs names secrets of the organization the task receives in
	// its lease (checked with secrets.CheckSecretRefs).
	SecretRefs []string
}

// CreateTask inserts a task in tx, and its queue row when it is leasable
// at once. Replayed is true when an earlier request with the same
// idempotency key created it. It neither checks a pin (CheckPinnedWorker:
// a schedule checks its definition's once, when it is saved) nor wakes
// pollers: the caller does, once it knows what its transaction made.
func CreateTask(ctx context.Context, tx pgx.Tx, p CreateTaskParams) (Task, bool, error) {
	if err := secrets.CheckSecretRefs("secret_refs", p.SecretRefs); err != nil {
		return Task{}, false, err
	}
	if len(p.Payload) == 0 {
		p.Payload = json.RawMessage(`{}`)
	}
	if len(p.RequiredCapabilities) == 0 {
		p.RequiredCapabilities = json.RawMessage(`{}`)
	}
	if len(p.CriticalCapabilities) == 0 {
		p.CriticalCapabilities = json.RawMessage(`{}`)
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 3
	}
	if p.LeaseDurationSeconds == 0 {
		p.LeaseDurationSeconds = 30
	}
	if p.RetryMaxSeconds == 0 && p.RetryBaseSeconds == 0 {
		p.RetryBaseSeconds, p.RetryMaxSeconds = 1, 300
	}
	var execTimeout *float64
	if p.ExecutionTimeout > 0 {
		v := p.ExecutionTimeout.Seconds()
		execTimeout = &v
	}
	selector, err := CanonicalSelector("label_selector", p.LabelSelector)
	if err != nil {
		return Task{}, false, err
	}
	if err := checkTaskScope(ctx, tx, p); err != nil {
		return Task{}, false, err
	}
	tr := p.Trigger.orAPI()
	row := tx.QueryRow(ctx, `
		WITH created AS (
		INSERT INTO worker_tasks AS t (task_type, organization_id, scan_id, scan_job_id, required_capabilities, payload,
			priority, available_at, execution_deadline_at, max_attempts, lease_duration_seconds,
			attempt_timeout_seconds, retry_base_seconds, retry_max_seconds, idempotency_key, request_sha256, critical_capabilities,
			trigger_kind, trigger_schedule_id, trigger_schedule_version, trigger_slot_at, trigger_token_id, secret_refs,
			label_selector, pinned_worker_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8),
			now() + make_interval(secs => $9::float8), $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23,
			$24, $25)
		ON CONFLICT (organization_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
		RETURNING *
		), enqueued AS (
			`+core.EnqueueSQL("created")+`
		)
		SELECT `+TaskColumns+` FROM created t`,
		p.TaskType, p.OrganizationID, p.ScanID, p.ScanJobID, string(p.RequiredCapabilities), string(p.Payload),
		p.Priority, p.Delay.Seconds(), execTimeout, p.MaxAttempts, p.LeaseDurationSeconds,
		p.AttemptTimeoutSeconds, p.RetryBaseSeconds, p.RetryMaxSeconds, core.NullString(p.IdempotencyKey), p.RequestSHA256,
		string(p.CriticalCapabilities), tr.Kind, tr.ScheduleID, tr.ScheduleVersion, tr.SlotAt, tr.TokenID, secrets.RefsArg(p.SecretRefs),
		core.NullJSON(selector), p.PinnedWorkerID)
	task, err := ReadTask(row)
	switch {
	case err == nil:
		return task, false, nil
	case errors.Is(err, pgx.ErrNoRows):
		// The key exists: the same request is a replay, another is refused.
		id, err := core.CreationReplay(ctx, tx, "worker_tasks", p.OrganizationID, p.IdempotencyKey, p.RequestSHA256)
		if err != nil {
			return Task{}, false, err
		}
		task, err = ReadTask(tx.QueryRow(ctx, `SELECT `+TaskColumns+` FROM worker_tasks t WHERE t.id = $1`, id))
		if err != nil {
			return Task{}, false, fmt.Errorf("read idempotent task: %w", err)
		}
		return task, true, nil
	case core.IsForeignKeyViolation(err):
		// The only foreign key a created task can miss: the API names no
		// scan, and the orchestrator's scan exists in its transaction.
		return Task{}, false, errOrganizationMissing
	default:
		return Task{}, false, fmt.Errorf("insert task: %w", err)
	}
}
