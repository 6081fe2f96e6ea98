package schedules

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/internal/labels"
	"github.com/worker-gateway/gateway/internal/slots"
	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/secrets"
	"github.com/worker-gateway/gateway/store/internal/work"
)

// OverlapPolicy says what a slot does while the schedule's previous run is
// still active.
type OverlapPolicy string

// Overlap policies.
const (
	OverlapSkip     OverlapPolicy = "skip"      // the slot is skipped
	OverlapAllow    OverlapPolicy = "allow"     // runs overlap
	OverlapQueueOne OverlapPolicy = "queue_one" // one slot waits; more are skipped
)

// CatchUpPolicy says what the slots missed while nothing claimed them do.
type CatchUpPolicy string

// Catch-up policies.
const (
	CatchUpOnce CatchUpPolicy = "once" // one run for all missed slots
	CatchUpSkip CatchUpPolicy = "skip" // missed slots are skipped
)

// ScheduleKind is what a schedule creates.
type ScheduleKind string

// Schedule kinds.
const (
	ScheduleScan ScheduleKind = "scan"
	ScheduleTask ScheduleKind = "task"
)

// ScheduleTiming is when a schedule fires and its policies. Exactly one of
// Cron and IntervalSeconds is set.
type ScheduleTiming struct {
	Cron            string        `json:"cron,omitempty"`
	IntervalSeconds int           `json:"interval_seconds,omitempty"`
	TimeZone        string        `json:"time_zone"`
	JitterSeconds   int           `json:"jitter_seconds,omitempty"`
	StartAt         *time.Time    `json:"start_at,omitempty"`
	EndAt           *time.Time    `json:"end_at,omitempty"`
	Overlap         OverlapPolicy `json:"overlap"`
	CatchUp         CatchUpPolicy `json:"catch_up"`
}

// ScheduleDefinition is what each fire creates: a scan or a task.
type ScheduleDefinition struct {
	Kind ScheduleKind   `json:"kind"`
	Scan *ScheduledScan `json:"scan,omitempty"`
	Task *ScheduledTask `json:"task,omitempty"`
}

// ScheduledScan is the scan a schedule creates.
type ScheduledScan struct {
	Targets  []string          `json:"targets"`
	Plugins  []ScheduledPlugin `json:"plugins"`
	Priority int               `json:"priority,omitempty"`
}

// ScheduledPlugin is one step of a scheduled scan.
type ScheduledPlugin struct {
	Name                 string          `json:"name"`
	Input                json.RawMessage `json:"input,omitempty"`
	TimeoutSeconds       *int            `json:"timeout_seconds,omitempty"`
	RequiredCapabilities json.RawMessage `json:"required_capabilities,omitempty"`
}

// ScheduledTask is the task a schedule creates.
type ScheduledTask struct {
	TaskType                string          `json:"task_type"`
	Payload                 json.RawMessage `json:"payload,omitempty"`
	RequiredCapabilities    json.RawMessage `json:"required_capabilities,omitempty"`
	Priority                int             `json:"priority,omitempty"`
	MaxAttempts             int             `json:"max_attempts,omitempty"`
	LeaseDurationSeconds    int             `json:"lease_duration_seconds,omitempty"`
	AttemptTimeoutSeconds   *int            `json:"attempt_timeout_seconds,omitempty"`
	ExecutionTimeoutSeconds int             `json:"execution_timeout_seconds,omitempty"`
	RetryBaseSeconds        float64         `json:"retry_base_seconds,omitempty"`
	RetryMaxSeconds         float64         `json:"retry_max_seconds,omitempty"`
	SecretRefs              []string        `json:"secret_refs,omitempty"`
	// LabelSelector and PinnedWorkerID pass to every task the schedule
	// creates (work.CreateTaskParams).
	LabelSelector  *labels.Selector `json:"label_selector,omitempty"`
	PinnedWorkerID *uuid.UUID       `json:"pinned_worker_id,omitempty"`
}

// ScheduleParams creates a schedule or its next version.
type ScheduleParams struct {
	Name       string
	Timing     ScheduleTiming
	Definition ScheduleDefinition
	// TokenID is the API token that made this version.
	TokenID *uuid.UUID
}

// Schedule is a schedule with its current version.
type Schedule struct {
	ID             uuid.UUID
	OrganizationID uuid.UUID
	Name           string
	Version        int
	Enabled        bool
	Timing         ScheduleTiming
	Definition     ScheduleDefinition
	// NextSlotAt is the next slot and NextFireAt when it fires (slot plus
	// jitter); nil once the schedule has ended.
	NextSlotAt   *time.Time
	NextFireAt   *time.Time
	LastSlotAt   *time.Time
	QueuedSlotAt *time.Time
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// ScheduleFire is one entry of a schedule's history.
type ScheduleFire struct {
	ID          uuid.UUID
	ScheduleID  uuid.UUID
	Version     int
	SlotAt      time.Time
	Trigger     work.TriggerKind
	TokenID     *uuid.UUID
	Outcome     string // created, skipped or queued
	SkipReason  string // missed, overlap, queue_full or error
	MissedSlots int    // slots this entry stands for besides its own
	TaskID      *uuid.UUID
	ScanID      *uuid.UUID
	// RunState is the created task's or scan's state now.
	RunState string
	FiredAt  time.Time
	// DueAt is when a slot the timer fired on time was due (slot plus
	// jitter), for the lag metric; nil for a manual run or a queued slot.
	DueAt *time.Time
}

// Fire outcomes and skip reasons.
const (
	FireCreated       = "created"
	FireSkipped       = "skipped"
	FireQueued        = "queued"
	SkipMissed        = "missed"
	SkipOverlap       = "overlap"
	SkipQueueFull     = "queue_full"
	SkipError         = "error" // the database refused the run
	maxScheduleJitter = 24 * time.Hour
)

// ScheduleSlot is a future fire: its slot and when it fires.
type ScheduleSlot struct {
	SlotAt time.Time
	FireAt time.Time
}

// compiled is a validated schedule: its canonical timing and definition and
// what computes its slots.
type compiled struct {
	timing     ScheduleTiming
	definition ScheduleDefinition
	timingJSON []byte
	defJSON    []byte
	slots      slots.Slotter
}

// compileSchedule validates p and fills in defaults. Each refusal is
// ErrInvalid naming the field.
func compileSchedule(p ScheduleParams) (compiled, error) {
	t := p.Timing
	var c compiled
	if t.TimeZone == "" {
		t.TimeZone = "UTC"
	}
	loc, err := time.LoadLocation(t.TimeZone)
	if err != nil || t.TimeZone == "Local" {
		return c, core.Invalid("time_zone: unknown IANA time zone")
	}
	c.slots.Location = loc
	switch {
	case t.Cron != "" && t.IntervalSeconds != 0:
		return c, core.Invalid("cron: give either cron or interval_seconds, not both")
	case t.Cron != "":
		if c.slots.Cron, err = slots.ParseCron(t.Cron); err != nil {
			return c, core.InvalidBecause(err)
		}
	case t.IntervalSeconds > 0:
		c.slots.Interval = time.Duration(t.IntervalSeconds) * time.Second
	case t.IntervalSeconds < 0:
		return c, core.Invalid("interval_seconds: must be positive")
	default:
		return c, core.Invalid("cron: give cron or interval_seconds")
	}
	if t.JitterSeconds < 0 || time.Duration(t.JitterSeconds)*time.Second > maxScheduleJitter {
		return c, core.Invalid("jitter_seconds: must be between 0 and 86400")
	}
	if c.slots.Cron == nil && t.JitterSeconds >= t.IntervalSeconds && t.JitterSeconds > 0 {
		return c, core.Invalid("jitter_seconds: must be less than interval_seconds")
	}
	c.slots.Jitter = time.Duration(t.JitterSeconds) * time.Second
	// The database keeps microseconds: slots must survive the round trip.
	if t.StartAt != nil {
		v := t.StartAt.Truncate(time.Microsecond).UTC()
		t.StartAt = &v
	}
	if t.EndAt != nil {
		v := t.EndAt.Truncate(time.Microsecond).UTC()
		t.EndAt = &v
	}
	if t.StartAt != nil && t.EndAt != nil && !t.EndAt.After(*t.StartAt) {
		return c, core.Invalid("end_at: must be after start_at")
	}
	c.slots.Start, c.slots.End = t.StartAt, t.EndAt
	switch t.Overlap {
	case "":
		t.Overlap = OverlapSkip
	case OverlapSkip, OverlapAllow, OverlapQueueOne:
	default:
		return c, core.Invalid("overlap: must be skip, allow or queue_one")
	}
	switch t.CatchUp {
	case "":
		t.CatchUp = CatchUpOnce
	case CatchUpOnce, CatchUpSkip:
	default:
		return c, core.Invalid("catch_up: must be once or skip")
	}
	if err := validateDefinition(p.Definition); err != nil {
		return c, err
	}
	if tk := p.Definition.Task; tk != nil && tk.LabelSelector != nil {
		// Stored canonical, as the tasks it creates will carry it.
		canonical, err := work.CanonicalSelector("definition.task.label_selector", tk.LabelSelector)
		if err != nil {
			return c, err
		}
		task := *tk
		task.LabelSelector = nil
		if canonical != nil {
			task.LabelSelector = new(labels.Selector)
			if err := json.Unmarshal(canonical, task.LabelSelector); err != nil {
				return c, fmt.Errorf("decode selector: %w", err)
			}
		}
		p.Definition.Task = &task
	}
	c.timing, c.definition = t, p.Definition
	if c.timingJSON, err = json.Marshal(t); err != nil {
		return c, fmt.Errorf("encode timing: %w", err)
	}
	if c.defJSON, err = json.Marshal(p.Definition); err != nil {
		return c, core.Invalid("definition: not encodable as JSON")
	}
	return c, nil
}

func isJSONObject(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return true
	}
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

func validateDefinition(d ScheduleDefinition) error {
	switch d.Kind {
	case ScheduleScan:
		if d.Task != nil {
			return core.Invalid("definition.task: a scan schedule has no task")
		}
		if d.Scan == nil || len(d.Scan.Plugins) == 0 {
			return core.Invalid("definition.scan.plugins: at least one plugin")
		}
		if len(d.Scan.Targets) == 0 {
			return core.Invalid("definition.scan.targets: at least one target")
		}
		for _, pl := range d.Scan.Plugins {
			if pl.Name == "" {
				return core.Invalid("definition.scan.plugins.name: required")
			}
			if !isJSONObject(pl.Input) {
				return core.Invalid("definition.scan.plugins.input: must be a JSON object")
			}
			if !isJSONObject(pl.RequiredCapabilities) {
				return core.Invalid("definition.scan.plugins.required_capabilities: must be a JSON object")
			}
			if pl.TimeoutSeconds != nil && *pl.TimeoutSeconds <= 0 {
				return core.Invalid("definition.scan.plugins.timeout_seconds: must be positive")
			}
		}
	case ScheduleTask:
		if d.Scan != nil {
			return core.Invalid("definition.scan: a task schedule has no scan")
		}
		if d.Task == nil {
			return core.Invalid("definition.task: required")
		}
		tk := d.Task
		switch {
		case tk.TaskType != "scanner_plugin" && tk.TaskType != "ai":
			return core.Invalid("definition.task.task_type: must be scanner_plugin or ai")
		case !isJSONObject(tk.Payload):
			return core.Invalid("definition.task.payload: must be a JSON object")
		case !isJSONObject(tk.RequiredCapabilities):
			return core.Invalid("definition.task.required_capabilities: must be a JSON object")
		case tk.MaxAttempts < 0:
			return core.Invalid("definition.task.max_attempts: must not be negative")
		case tk.LeaseDurationSeconds < 0:
			return core.Invalid("definition.task.lease_duration_seconds: must not be negative")
		case tk.AttemptTimeoutSeconds != nil && *tk.AttemptTimeoutSeconds <= 0:
			return core.Invalid("definition.task.attempt_timeout_seconds: must be positive")
		case tk.ExecutionTimeoutSeconds < 0:
			return core.Invalid("definition.task.execution_timeout_seconds: must not be negative")
		case tk.RetryBaseSeconds < 0 || tk.RetryMaxSeconds < tk.RetryBaseSeconds:
			return core.Invalid("definition.task.retry_max_seconds: must be at least retry_base_seconds, both non-negative")
		}
		if err := secrets.CheckSecretRefs("definition.task.secret_refs", tk.SecretRefs); err != nil {
			return err
		}
	default:
		return core.Invalid("definition.kind: must be scan or task")
	}
	return nil
}

// scheduleColumns are read by scanSchedule; the version's timing and
// definition travel as JSON.
const scheduleColumns = `s.id, s.organization_id, s.name, s.current_version, s.enabled, v.timing, v.definition,
	s.next_slot_at, s.next_fire_at, s.last_slot_at, s.queued_slot_at, s.created_at, s.updated_at`

const scheduleFrom = `schedules s JOIN schedule_versions v ON v.schedule_id = s.id AND v.version = s.current_version`

func scanSchedule(row pgx.Row) (Schedule, error) {
	var sc Schedule
	var timing, def []byte
	err := row.Scan(&sc.ID, &sc.OrganizationID, &sc.Name, &sc.Version, &sc.Enabled, &timing, &def,
		&sc.NextSlotAt, &sc.NextFireAt, &sc.LastSlotAt, &sc.QueuedSlotAt, &sc.CreatedAt, &sc.UpdatedAt)
	if err != nil {
		return Schedule{}, err
	}
	if err := json.Unmarshal(timing, &sc.Timing); err != nil {
		return Schedule{}, fmt.Errorf("schedule timing: %w", err)
	}
	if err := json.Unmarshal(def, &sc.Definition); err != nil {
		return Schedule{}, fmt.Errorf("schedule definition: %w", err)
	}
	return sc, nil
}

// readSchedule reads a schedule the scope may see and that is not deleted
// (a deleted one is ErrNotFound to every verb), locking its row if asked.
func readSchedule(ctx context.Context, ex core.Executor, tenant core.Tenant, id uuid.UUID, lock bool) (Schedule, error) {
	q := `SELECT ` + scheduleColumns + ` FROM ` + scheduleFrom + ` WHERE s.id = $1 AND s.deleted_at IS NULL AND ` +
		core.InTenant("s.organization_id", "$2")
	if lock {
		q += ` FOR UPDATE OF s`
	}
	sc, err := scanSchedule(ex.QueryRow(ctx, q, id, tenant.Arg()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Schedule{}, core.ErrNotFound
	}
	if err != nil {
		return Schedule{}, fmt.Errorf("read schedule: %w", err)
	}
	return sc, nil
}

// dbNow is the transaction's now(): slots are decided on the database's
// clock, as leases are.
func dbNow(ctx context.Context, ex core.Executor) (time.Time, error) {
	var now time.Time
	if err := ex.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read now: %w", err)
	}
	return now, nil
}

// nextFire is the first slot after `after` and when it fires, or nils when
// the schedule has ended.
func nextFire(sl slots.Slotter, after time.Time) (slot, fire *time.Time) {
	s, ok := sl.Next(after)
	if !ok {
		return nil, nil
	}
	f := sl.FireAt(s)
	return &s, &f
}

// compileLimited is compileSchedule with the calendar's minimum interval: the
// one check of it, for a schedule's first version and every later one.
func (s *Calendar) compileLimited(p ScheduleParams) (compiled, error) {
	c, err := compileSchedule(p)
	if err != nil {
		return c, err
	}
	return c, checkMinInterval(c, s.limits.MinInterval)
}

// CreateSchedule creates a schedule of org at version 1. Its first slot is
// the first after now (or at start_at); nothing already past fires. An
// organization that has its quota of schedules is ErrQuotaExceeded.
func (s *Calendar) CreateSchedule(ctx context.Context, tenant core.Tenant, org uuid.UUID, p ScheduleParams) (Schedule, error) {
	if !tenant.Allows(org) {
		return Schedule{}, core.ErrNotFound
	}
	c, err := s.compileLimited(p)
	if err != nil {
		return Schedule{}, err
	}
	var sc Schedule
	err = s.inTx(ctx, "create schedule", func(tx pgx.Tx) error {
		if err := lockScheduleQuota(ctx, tx, tenant, org, s.limits.Quota); err != nil {
			return err
		}
		if err := checkSchedulePin(ctx, tx, org, c.definition); err != nil {
			return err
		}
		if err := checkScheduleScope(ctx, tx, org, c.definition); err != nil {
			return err
		}
		now, err := dbNow(ctx, tx)
		if err != nil {
			return err
		}
		id := uuid.Must(uuid.NewV7())
		c.slots.ID = id
		c.slots.Anchor = now.Truncate(time.Microsecond)
		if c.timing.StartAt != nil {
			c.slots.Anchor = *c.timing.StartAt
		}
		slot, fire := nextFire(c.slots, now)
		_, err = tx.Exec(ctx, `
			INSERT INTO schedules (id, organization_id, name, cron_expr, interval_seconds, interval_anchor, time_zone,
				jitter_seconds, start_at, end_at, overlap_policy, catch_up_policy, next_slot_at, next_fire_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
			id, org, p.Name, core.NullString(c.timing.Cron), nullInt(c.timing.IntervalSeconds), c.slots.Anchor, c.timing.TimeZone,
			c.timing.JitterSeconds, c.timing.StartAt, c.timing.EndAt, string(c.timing.Overlap), string(c.timing.CatchUp), slot, fire)
		if core.IsForeignKeyViolation(err) {
			return core.MissingOrganization(tenant, org)
		}
		if err != nil {
			return fmt.Errorf("insert schedule: %w", err)
		}
		if err := insertVersion(ctx, tx, id, 1, c, p.TokenID); err != nil {
			return err
		}
		core.AuditTarget(ctx, id, &org)
		core.AuditDetail(ctx, "version", 1)
		if sc, err = readSchedule(ctx, tx, tenant, id, false); err != nil {
			return err
		}
		return core.Notify(ctx, tx, core.Wakeup{Kind: core.WakeSchedules, Organization: org})
	})
	if err != nil {
		return Schedule{}, err
	}
	return sc, nil
}

// checkSchedulePin refuses a task definition pinned to a worker the
// schedule's organization cannot see. The worker may stop being visible
// later: the tasks the schedule then creates wait, explained by
// pinned_worker_unavailable.
func checkSchedulePin(ctx context.Context, tx pgx.Tx, org uuid.UUID, d ScheduleDefinition) error {
	if d.Task == nil {
		return nil
	}
	return work.CheckPinnedWorker(ctx, tx, "definition.task.pinned_worker_id", org, d.Task.PinnedWorkerID)
}

// checkScheduleScope refuses a definition whose scan or scanner task names
// targets outside the organization's scan scope, as creating that scan or
// task would be refused. The scope may change later: a slot whose run is
// out of scope by then is skipped (error).
func checkScheduleScope(ctx context.Context, tx pgx.Tx, org uuid.UUID, d ScheduleDefinition) error {
	switch {
	case d.Scan != nil:
		return work.CheckScanScope(ctx, tx, scheduledScanParams(org, d.Scan, nil, runKey{}), nil)
	case d.Task != nil:
		return work.CheckTaskTargets(ctx, tx, org, d.Task.TaskType, d.Task.Payload)
	}
	return nil
}

func nullInt(v int) *int {
	if v == 0 {
		return nil
	}
	return &v
}

func insertVersion(ctx context.Context, tx pgx.Tx, id uuid.UUID, version int, c compiled, token *uuid.UUID) error {
	_, err := tx.Exec(ctx, `INSERT INTO schedule_versions (schedule_id, version, kind, definition, timing, created_by_token_id)
		VALUES ($1, $2, $3, $4, $5, $6)`, id, version, string(c.definition.Kind), string(c.defJSON), string(c.timingJSON), token)
	if err != nil {
		return fmt.Errorf("insert schedule version: %w", err)
	}
	return nil
}

// UpdateSchedule stores p as the schedule's next version; versions are
// never changed. When the timing changes, the next slot is computed afresh
// from now; otherwise the pending slot stays.
func (s *Calendar) UpdateSchedule(ctx context.Context, tenant core.Tenant, id uuid.UUID, p ScheduleParams) (Schedule, error) {
	c, err := s.compileLimited(p)
	if err != nil {
		return Schedule{}, err
	}
	var sc Schedule
	err = s.inTx(ctx, "update schedule", func(tx pgx.Tx) error {
		old, err := readSchedule(ctx, tx, tenant, id, true)
		if err != nil {
			return err
		}
		if err := checkSchedulePin(ctx, tx, old.OrganizationID, c.definition); err != nil {
			return err
		}
		if err := checkScheduleScope(ctx, tx, old.OrganizationID, c.definition); err != nil {
			return err
		}
		oldTiming, err := json.Marshal(old.Timing)
		if err != nil {
			return fmt.Errorf("encode timing: %w", err)
		}
		if !bytes.Equal(oldTiming, c.timingJSON) {
			now, err := dbNow(ctx, tx)
			if err != nil {
				return err
			}
			c.slots.ID = id
			c.slots.Anchor = now.Truncate(time.Microsecond)
			if c.timing.StartAt != nil {
				c.slots.Anchor = *c.timing.StartAt
			}
			slot, fire := nextFire(c.slots, now)
			if _, err := tx.Exec(ctx, `UPDATE schedules SET cron_expr = $2, interval_seconds = $3, interval_anchor = $4,
				time_zone = $5, jitter_seconds = $6, start_at = $7, end_at = $8, overlap_policy = $9, catch_up_policy = $10,
				next_slot_at = $11, next_fire_at = $12 WHERE id = $1`,
				id, core.NullString(c.timing.Cron), nullInt(c.timing.IntervalSeconds), c.slots.Anchor, c.timing.TimeZone,
				c.timing.JitterSeconds, c.timing.StartAt, c.timing.EndAt, string(c.timing.Overlap), string(c.timing.CatchUp),
				slot, fire); err != nil {
				return fmt.Errorf("update schedule timing: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE schedules SET name = $2, current_version = current_version + 1, updated_at = now()
			WHERE id = $1`, id, p.Name); err != nil {
			return fmt.Errorf("update schedule: %w", err)
		}
		if err := insertVersion(ctx, tx, id, old.Version+1, c, p.TokenID); err != nil {
			return err
		}
		core.AuditTarget(ctx, id, &old.OrganizationID)
		core.AuditDetail(ctx, "version", old.Version+1)
		if sc, err = readSchedule(ctx, tx, tenant, id, false); err != nil {
			return err
		}
		return core.Notify(ctx, tx, core.Wakeup{Kind: core.WakeSchedules, Organization: sc.OrganizationID})
	})
	if err != nil {
		return Schedule{}, err
	}
	return sc, nil
}

// PauseSchedule stops a schedule firing; pausing twice is harmless.
func (s *Calendar) PauseSchedule(ctx context.Context, tenant core.Tenant, id uuid.UUID) (Schedule, error) {
	return s.setScheduleEnabled(ctx, tenant, id, false)
}

// ResumeSchedule lets a paused schedule fire again from its first slot after
// now: slots that passed while it was paused never fire.
func (s *Calendar) ResumeSchedule(ctx context.Context, tenant core.Tenant, id uuid.UUID) (Schedule, error) {
	return s.setScheduleEnabled(ctx, tenant, id, true)
}

func (s *Calendar) setScheduleEnabled(ctx context.Context, tenant core.Tenant, id uuid.UUID, enabled bool) (Schedule, error) {
	name := "pause schedule"
	if enabled {
		name = "resume schedule"
	}
	var sc Schedule
	err := s.inTx(ctx, name, func(tx pgx.Tx) error {
		old, err := readSchedule(ctx, tx, tenant, id, true)
		if err != nil {
			return err
		}
		core.AuditTarget(ctx, id, &old.OrganizationID)
		if old.Enabled == enabled {
			sc = old
			return nil
		}
		if enabled {
			sl, err := loadSlotter(ctx, tx, id)
			if err != nil {
				return err
			}
			now, err := dbNow(ctx, tx)
			if err != nil {
				return err
			}
			slot, fire := nextFire(sl, now)
			if _, err := tx.Exec(ctx, `UPDATE schedules SET next_slot_at = $2, next_fire_at = $3 WHERE id = $1`,
				id, slot, fire); err != nil {
				return fmt.Errorf("resume schedule: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE schedules SET enabled = $2, updated_at = now() WHERE id = $1`, id, enabled); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if sc, err = readSchedule(ctx, tx, tenant, id, false); err != nil {
			return err
		}
		return core.Notify(ctx, tx, core.Wakeup{Kind: core.WakeSchedules, Organization: sc.OrganizationID})
	})
	if err != nil {
		return Schedule{}, err
	}
	return sc, nil
}

// DeleteSchedule deletes a schedule: from its COMMIT on it never fires
// again and every verb answers ErrNotFound for it. The row stays (its
// versions name what its kept runs came from) but is disabled and has no
// next slot, so no claim can take it; a claim already holding it commits
// its fire first, since the delete waits for the row. A slot queued behind
// a run is dropped; runs already created go on.
func (s *Calendar) DeleteSchedule(ctx context.Context, tenant core.Tenant, id uuid.UUID) (Schedule, error) {
	var sc Schedule
	err := s.inTx(ctx, "delete schedule", func(tx pgx.Tx) error {
		var err error
		if sc, err = readSchedule(ctx, tx, tenant, id, true); err != nil {
			return err
		}
		core.AuditTarget(ctx, sc.ID, &sc.OrganizationID)
		core.AuditDetail(ctx, "version", sc.Version)
		if _, err := tx.Exec(ctx, `UPDATE schedules SET deleted_at = now(), enabled = false, next_slot_at = NULL,
			next_fire_at = NULL, queued_slot_at = NULL, updated_at = now() WHERE id = $1`, id); err != nil {
			return fmt.Errorf("delete schedule: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM schedule_fires WHERE schedule_id = $1 AND outcome = 'queued'`, id); err != nil {
			return fmt.Errorf("drop queued slot: %w", err)
		}
		return core.Notify(ctx, tx, core.Wakeup{Kind: core.WakeSchedules, Organization: sc.OrganizationID})
	})
	if err != nil {
		return Schedule{}, err
	}
	return sc, nil
}

// slotterColumns are what a schedule's slots.Slotter is built from
// (slotterFrom).
const slotterColumns = `s.id, s.cron_expr, s.interval_seconds, s.interval_anchor, s.time_zone, s.jitter_seconds, s.start_at, s.end_at`

func slotterFrom(id uuid.UUID, cronExpr *string, interval *int, anchor time.Time, zone string, jitter int,
	start, end *time.Time) (slots.Slotter, error) {
	sl := slots.Slotter{ID: id, Anchor: anchor, Start: start, End: end, Jitter: time.Duration(jitter) * time.Second}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return sl, fmt.Errorf("schedule %s: time zone: %w", id, err)
	}
	sl.Location = loc
	if cronExpr != nil {
		if sl.Cron, err = slots.ParseCron(*cronExpr); err != nil {
			return sl, fmt.Errorf("schedule %s: stored cron: %w", id, err)
		}
	} else if interval != nil {
		sl.Interval = time.Duration(*interval) * time.Second
	}
	return sl, nil
}

func loadSlotter(ctx context.Context, ex core.Executor, id uuid.UUID) (slots.Slotter, error) {
	var (
		cronExpr   *string
		interval   *int
		anchor     time.Time
		zone       string
		jitter     int
		start, end *time.Time
		sid        uuid.UUID
	)
	err := ex.QueryRow(ctx, `SELECT `+slotterColumns+` FROM schedules s WHERE s.id = $1`, id).
		Scan(&sid, &cronExpr, &interval, &anchor, &zone, &jitter, &start, &end)
	if err != nil {
		return slots.Slotter{}, fmt.Errorf("read schedule timing: %w", err)
	}
	return slotterFrom(sid, cronExpr, interval, anchor, zone, jitter, start, end)
}

// GetSchedule returns a schedule the scope may see.
func (s *Calendar) GetSchedule(ctx context.Context, tenant core.Tenant, id uuid.UUID) (Schedule, error) {
	return readSchedule(ctx, s.pool, tenant, id, false)
}

// ListSchedules pages the schedules the tenant may see, newest first,
// optionally of one organization.
func (s *Calendar) ListSchedules(ctx context.Context, tenant core.Tenant, org *uuid.UUID, after *core.Cursor, limit int) ([]Schedule, *core.Cursor, error) {
	q := core.Psql.Select(scheduleColumns).From(scheduleFrom).Where(tenant.Where("s.organization_id")).Where("s.deleted_at IS NULL")
	if org != nil {
		q = q.Where(sq.Eq{"s.organization_id": *org})
	}
	list, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("s.created_at", "s.id", func(sc Schedule) core.Cursor { return core.Cursor{Time: sc.CreatedAt, ID: sc.ID} }),
		after, limit, scanSchedule)
	if err != nil {
		return nil, nil, fmt.Errorf("list schedules: %w", err)
	}
	if err := core.CheckListedOrganization(ctx, s.pool, tenant, org, len(list) == 0); err != nil {
		return nil, nil, err
	}
	return list, next, nil
}

const fireColumns = `f.id, f.schedule_id, f.version, f.slot_at, f.trigger_kind, f.token_id, f.outcome, f.skip_reason,
	f.missed_slots, f.task_id, f.scan_id, coalesce(t.state, sc.state, ''), f.fired_at`

func scanFire(row pgx.Row) (ScheduleFire, error) {
	var f ScheduleFire
	err := row.Scan(&f.ID, &f.ScheduleID, &f.Version, &f.SlotAt, &f.Trigger, &f.TokenID, &f.Outcome, &f.SkipReason,
		&f.MissedSlots, &f.TaskID, &f.ScanID, &f.RunState, &f.FiredAt)
	return f, err
}

// ScheduleFires pages a schedule's history, latest slot first (a manual
// run's slot is when it was asked for): each slot fired,
// skipped (and why) or queued, with its run's state now.
func (s *Calendar) ScheduleFires(ctx context.Context, tenant core.Tenant, id uuid.UUID, after *core.Cursor, limit int) ([]ScheduleFire, *core.Cursor, error) {
	if _, err := readSchedule(ctx, s.pool, tenant, id, false); err != nil {
		return nil, nil, err
	}
	q := core.Psql.Select(fireColumns).From("schedule_fires f").
		LeftJoin("worker_tasks t ON t.id = f.task_id").LeftJoin("scans sc ON sc.id = f.scan_id").
		Where(tenant.Where("f.organization_id")).Where(sq.Eq{"f.schedule_id": id})
	fires, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("f.slot_at", "f.id", func(f ScheduleFire) core.Cursor { return core.Cursor{Time: f.SlotAt, ID: f.ID} }),
		after, limit, scanFire)
	if err != nil {
		return nil, nil, fmt.Errorf("schedule fires: %w", err)
	}
	return fires, next, nil
}

// maxNextFireTimes bounds NextFireTimes' work.
const maxNextFireTimes = 1000

// NextFireTimes lists a schedule's next n slots (at most 1000) from its
// pending one (from now if it is paused), fewer when it ends sooner.
func (s *Calendar) NextFireTimes(ctx context.Context, tenant core.Tenant, id uuid.UUID, n int) ([]ScheduleSlot, error) {
	n = min(n, maxNextFireTimes)
	sc, err := readSchedule(ctx, s.pool, tenant, id, false)
	if err != nil {
		return nil, err
	}
	sl, err := loadSlotter(ctx, s.pool, id)
	if err != nil {
		return nil, err
	}
	var slot time.Time
	var ok bool
	if sc.Enabled && sc.NextSlotAt != nil {
		slot, ok = *sc.NextSlotAt, true
	} else if sc.Enabled {
		return nil, nil
	} else {
		now, err := dbNow(ctx, s.pool)
		if err != nil {
			return nil, err
		}
		slot, ok = sl.Next(now)
	}
	var out []ScheduleSlot
	for ; ok && len(out) < n; slot, ok = sl.Next(slot) {
		out = append(out, ScheduleSlot{SlotAt: slot.UTC(), FireAt: sl.FireAt(slot).UTC()})
	}
	return out, nil
}
