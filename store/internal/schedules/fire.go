package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/worker-gateway/gateway/internal/slots"
	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/work"
)

// runActiveSQL: the schedule s's latest run has not ended (overlap policy).
var runActiveSQL = `(EXISTS (SELECT 1 FROM worker_tasks rt WHERE rt.id = s.last_task_id
		AND rt.state NOT IN (` + core.SQLStates(core.FinalTaskStates()...) + `))
	OR EXISTS (SELECT 1 FROM scans rs WHERE rs.id = s.last_scan_id AND rs.state IN (` + core.SQLStates(core.ActiveScanStates...) + `)))`

// claimSchedulesSQL claims the schedules whose next slot is due at $1
// (NULL: the database's now()), earliest first, and those whose queued
// slot may run (its previous run ended); up to $2 of each, skipping those
// another replica holds.
//
// Each kind is its own locking CTE, so that each walks its own partial
// index (schedules_due_idx in fire-time order, schedules_queued_idx) and
// stops at $2 rows: an OR of the two in one WHERE scans every schedule.
// The due bound is written out, not read from n: compared with a joined
// CTE's column it is a filter, not an index condition, and the walk read
// every schedule's entry (30,000 for 2 due ones). Ties on next_fire_at
// come in index order: the index has no id to order them by without a sort.
// The columns come from the CTEs, which return the row version they
// locked: the outer query's snapshot may predate a fire another replica
// committed meanwhile.
var claimSchedulesSQL = `
	WITH n AS (SELECT coalesce($1::timestamptz, now()) AS now),
	due AS (
		SELECT s.* FROM schedules s
		WHERE s.enabled AND s.next_fire_at <= coalesce($1::timestamptz, now())
		ORDER BY s.next_fire_at
		LIMIT $2
		FOR UPDATE OF s SKIP LOCKED
	), ready AS (
		SELECT s.* FROM schedules s
		WHERE s.enabled AND s.queued_slot_at IS NOT NULL AND NOT ` + runActiveSQL + `
			AND NOT EXISTS (SELECT 1 FROM due WHERE due.id = s.id)
		LIMIT $2
		FOR UPDATE OF s SKIP LOCKED
	), s AS (SELECT * FROM due UNION ALL SELECT * FROM ready)
	SELECT ` + slotterColumns + `, s.organization_id, s.current_version, s.overlap_policy, s.catch_up_policy,
		s.next_slot_at, s.next_fire_at, s.queued_slot_at, s.last_task_id, s.last_scan_id,
		v.definition, ` + runActiveSQL + `, n.now
	FROM n, s JOIN schedule_versions v ON v.schedule_id = s.id AND v.version = s.current_version
	ORDER BY s.next_fire_at NULLS FIRST, s.id`

// claimed is a due schedule, locked by the claim.
type claimed struct {
	sl       slots.Slotter
	org      uuid.UUID
	version  int
	overlap  OverlapPolicy
	catchUp  CatchUpPolicy
	nextSlot *time.Time
	nextFire *time.Time
	queued   *time.Time
	lastTask *uuid.UUID
	lastScan *uuid.UUID
	def      ScheduleDefinition
	active   bool // the latest run has not ended
	now      time.Time
	lastSlot *time.Time // the latest slot handled, if any
	wakeups  []core.Wakeup
	fires    []ScheduleFire
	batch    *fireBatch // while the fast path decides (fire_batch.go)
}

// FireDueSchedules claims up to limit due schedules and fires them, each in
// the transaction that claimed it: creates the slot's scan or task (unless
// the overlap or catch-up policy skips it), records the fire keyed by
// (schedule, slot), and advances the schedule. Any replica may call it at
// any time; a slot fires once whoever crashes (see "Schedules" in store/doc.go).
// It returns what was recorded.
func (s *Calendar) FireDueSchedules(ctx context.Context, limit int) ([]ScheduleFire, error) {
	return s.fireDueSchedules(ctx, nil, limit)
}

// fireDueSchedules is FireDueSchedules deciding at `at` instead of the
// database's now(): tests move time forward without sleeping.
func (s *Calendar) fireDueSchedules(ctx context.Context, at *time.Time, limit int) ([]ScheduleFire, error) {
	var fires []ScheduleFire
	err := s.inTx(ctx, "fire schedules", func(tx pgx.Tx) error {
		fires = nil
		// Generic plans, made once per connection: the claim and the
		// statements of advance_scan were planned again on every call
		// (their custom plans looked cheaper), and planning cost more than
		// running them.
		if _, err := tx.Exec(ctx, core.GenericPlanSQL); err != nil {
			return fmt.Errorf("claim schedules: %w", err)
		}
		rows, err := tx.Query(ctx, claimSchedulesSQL, at, limit)
		if err != nil {
			return fmt.Errorf("claim schedules: %w", err)
		}
		due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*claimed, error) {
			var (
				c          claimed
				cronExpr   *string
				interval   *int
				anchor     time.Time
				zone       string
				jitter     int
				start, end *time.Time
				id         uuid.UUID
				def        []byte
			)
			if err := r.Scan(&id, &cronExpr, &interval, &anchor, &zone, &jitter, &start, &end,
				&c.org, &c.version, &c.overlap, &c.catchUp, &c.nextSlot, &c.nextFire, &c.queued, &c.lastTask, &c.lastScan,
				&def, &c.active, &c.now); err != nil {
				return nil, err
			}
			if err := json.Unmarshal(def, &c.def); err != nil {
				return nil, fmt.Errorf("schedule %s: definition: %w", id, err)
			}
			var err error
			c.sl, err = slotterFrom(id, cronExpr, interval, anchor, zone, jitter, start, end)
			return &c, err
		})
		if err != nil {
			return fmt.Errorf("claim schedules: %w", err)
		}
		wakeups, fired, err := fireClaimed(ctx, tx, due)
		if err != nil {
			return err
		}
		fires = fired
		if len(due) > 0 {
			if err := advance(ctx, tx, due); err != nil {
				return err
			}
		}
		return core.Notify(ctx, tx, wakeups...)
	})
	if err != nil {
		return nil, err
	}
	return fires, nil
}

// FireDueAt is FireDueSchedules deciding at `at` instead of the database's
// now(), for the store's tests (FireDueSchedulesAt in store/export_test.go):
// a function, not a method, so that the Store embedding a Calendar does
// not gain it.
func FireDueAt(ctx context.Context, c *Calendar, at time.Time, limit int) ([]ScheduleFire, error) {
	return c.fireDueSchedules(ctx, &at, limit)
}

// fire applies the schedule's policies at c.now and decides how it
// advances (written for all claimed schedules at once by advance).
func (c *claimed) fire(ctx context.Context, tx pgx.Tx) error {
	// A queued slot whose previous run has ended runs first.
	if c.queued != nil && !c.active {
		if err := c.run(ctx, tx, *c.queued, true, 0); err != nil {
			return err
		}
		c.queued = nil
	}
	if c.nextSlot != nil && c.nextFire != nil && !c.nextFire.After(c.now) {
		if err := c.fireDue(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

// advanceSchedulesSQL moves every claimed schedule on, in one statement:
// its next slot and fire time, its queued slot, its latest run and slot.
const advanceSchedulesSQL = `
	UPDATE schedules s SET next_slot_at = a.next_slot, next_fire_at = a.next_fire, queued_slot_at = a.queued,
		last_task_id = a.last_task, last_scan_id = a.last_scan, last_slot_at = coalesce(a.last_slot, s.last_slot_at),
		updated_at = now()
	FROM unnest($1::uuid[], $2::timestamptz[], $3::timestamptz[], $4::timestamptz[], $5::uuid[], $6::uuid[], $7::timestamptz[])
		AS a(id, next_slot, next_fire, queued, last_task, last_scan, last_slot)
	WHERE s.id = a.id`

// advance writes what the fires of the claimed schedules decided.
func advance(ctx context.Context, tx pgx.Tx, due []*claimed) error {
	n := len(due)
	ids, lastTask, lastScan := make([]uuid.UUID, n), make([]*uuid.UUID, n), make([]*uuid.UUID, n)
	nextSlot, nextFire, queued, lastSlot := make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	for i, c := range due {
		ids[i], nextSlot[i], nextFire[i], queued[i] = c.sl.ID, c.nextSlot, c.nextFire, c.queued
		lastTask[i], lastScan[i], lastSlot[i] = c.lastTask, c.lastScan, c.lastSlot
	}
	if _, err := tx.Exec(ctx, advanceSchedulesSQL, ids, nextSlot, nextFire, queued, lastTask, lastScan, lastSlot); err != nil {
		return fmt.Errorf("advance schedules: %w", err)
	}
	return nil
}

// fireDue handles the slots due by c.now: their number decides the catch-up,
// the last of them may run (overlap policy), and the schedule moves to the
// first slot not yet due.
func (c *claimed) fireDue(ctx context.Context, tx pgx.Tx) error {
	due, slot, ok := c.sl.Due(*c.nextSlot, c.now)
	c.nextSlot, c.nextFire = nil, nil
	if ok {
		f := c.sl.FireAt(slot)
		c.nextSlot, c.nextFire = &slot, &f
	}
	last := due[len(due)-1]
	c.lastSlot = &last
	missed := len(due) - 1
	if c.catchUp == CatchUpSkip {
		late := c.sl.Late(last, c.now)
		if late {
			missed = len(due)
		}
		if missed > 0 {
			// One entry for all the missed slots, under the latest of them.
			if err := c.record(ctx, tx, due[missed-1], FireSkipped, SkipMissed, missed-1); err != nil {
				return err
			}
		}
		if late {
			return nil
		}
		missed = 0
	}
	switch {
	case !c.active || c.overlap == OverlapAllow:
		return c.run(ctx, tx, last, false, missed)
	case c.overlap == OverlapQueueOne && c.queued == nil:
		c.queued = &last
		return c.record(ctx, tx, last, FireQueued, "", missed)
	case c.overlap == OverlapQueueOne:
		return c.record(ctx, tx, last, FireSkipped, SkipQueueFull, missed)
	default:
		return c.record(ctx, tx, last, FireSkipped, SkipOverlap, missed)
	}
}

// record writes a fire that creates nothing. A slot already recorded is
// left as it is: the key (schedule, slot) makes a repeat harmless.
func (c *claimed) record(ctx context.Context, tx pgx.Tx, slot time.Time, outcome, reason string, missed int) error {
	if c.batch != nil {
		c.batch.record(c, slot, outcome, reason, missed)
		return nil
	}
	var id uuid.UUID
	var firedAt time.Time
	err := tx.QueryRow(ctx, `INSERT INTO schedule_fires (schedule_id, organization_id, version, slot_at, trigger_kind,
			outcome, skip_reason, missed_slots)
		VALUES ($1, $2, $3, $4, 'schedule', $5, $6, $7)
		ON CONFLICT (schedule_id, slot_at) WHERE trigger_kind = 'schedule' DO NOTHING
		RETURNING id, fired_at`, c.sl.ID, c.org, c.version, slot, outcome, reason, missed).Scan(&id, &firedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record schedule fire: %w", err)
	}
	c.fires = append(c.fires, ScheduleFire{ID: id, ScheduleID: c.sl.ID, Version: c.version, SlotAt: slot,
		Trigger: work.TriggerSchedule, Outcome: outcome, SkipReason: reason, MissedSlots: missed, FiredAt: firedAt})
	return nil
}

// run fires a slot: it creates the scan or task, then claims the key
// (schedule, slot) — or, for a queued slot, its queued entry — with it,
// all within a savepoint. A key already claimed rolls the run back, so a
// slot never creates twice; a run the database refuses rolls back and its
// slot is recorded as skipped (error), so that it cannot fail every
// schedule claimed with it, forever. Creating first and then claiming
// writes each fire once (its run known) instead of inserting it and then
// updating it.
func (c *claimed) run(ctx context.Context, tx pgx.Tx, slot time.Time, queued bool, missed int) error {
	if c.batch != nil {
		return c.batch.run(ctx, tx, c, slot, queued, missed)
	}
	version := c.version
	tr := work.Trigger{Kind: work.TriggerSchedule, ScheduleID: &c.sl.ID, ScheduleVersion: &version, SlotAt: &slot}
	f := ScheduleFire{ScheduleID: c.sl.ID, Version: c.version, SlotAt: slot, Trigger: work.TriggerSchedule,
		Outcome: FireCreated, MissedSlots: missed}
	if !queued {
		due := c.sl.FireAt(slot)
		f.DueAt = &due
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("schedule savepoint: %w", err)
	}
	if _, err := createRun(ctx, sp, c.org, c.def, tr, runKey{}, &f); err != nil {
		if !isRefusedData(err) {
			return err
		}
		if err := sp.Rollback(ctx); err != nil {
			return fmt.Errorf("schedule savepoint: %w", err)
		}
		if queued {
			_, err := tx.Exec(ctx, `UPDATE schedule_fires SET outcome = 'skipped', skip_reason = 'error', version = $3
				WHERE schedule_id = $1 AND slot_at = $2 AND trigger_kind = 'schedule' AND outcome = 'queued'`,
				c.sl.ID, slot, c.version)
			if err != nil {
				return fmt.Errorf("record failed schedule fire: %w", err)
			}
			return nil
		}
		return c.record(ctx, tx, slot, FireSkipped, SkipError, missed)
	}
	if queued {
		err = sp.QueryRow(ctx, `UPDATE schedule_fires SET outcome = 'created', version = $3, fired_at = now(),
				task_id = $4, scan_id = $5
			WHERE schedule_id = $1 AND slot_at = $2 AND trigger_kind = 'schedule' AND outcome = 'queued'
			RETURNING id, fired_at`, c.sl.ID, slot, c.version, f.TaskID, f.ScanID).Scan(&f.ID, &f.FiredAt)
	} else {
		err = sp.QueryRow(ctx, `INSERT INTO schedule_fires (schedule_id, organization_id, version, slot_at, trigger_kind,
				outcome, missed_slots, task_id, scan_id)
			VALUES ($1, $2, $3, $4, 'schedule', 'created', $5, $6, $7)
			ON CONFLICT (schedule_id, slot_at) WHERE trigger_kind = 'schedule' DO NOTHING
			RETURNING id, fired_at`, c.sl.ID, c.org, c.version, slot, missed, f.TaskID, f.ScanID).Scan(&f.ID, &f.FiredAt)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// This slot already fired: its run stays the only one.
		if err := sp.Rollback(ctx); err != nil {
			return fmt.Errorf("schedule savepoint: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("record schedule fire: %w", err)
	}
	if err := sp.Commit(ctx); err != nil {
		return fmt.Errorf("schedule savepoint: %w", err)
	}
	c.fires = append(c.fires, f)
	c.ranOn(f)
	return nil
}

// ranOn notes the run fire f created: it is the schedule's latest run, and
// its task (a scan's first task) wakes a poller of the organization. The
// wake-ups of a claim are summed per organization (wakeupPayloads):
// advance_scan's own notice for each scan is the same text each time, and
// PostgreSQL delivers it once per transaction.
func (c *claimed) ranOn(f ScheduleFire) {
	c.lastTask, c.lastScan, c.active = f.TaskID, f.ScanID, true
	c.wakeups = append(c.wakeups, core.Wakeup{Kind: core.WakeOrganization, Organization: c.org, Count: 1})
}

// isRefusedData: the database refused the run's data (a data exception or
// an integrity constraint, SQLSTATE classes 22 and 23), or its scan's
// targets lie outside its organization's scan scope, which repeating
// cannot change.
func isRefusedData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23")) ||
		errors.Is(err, core.ErrOutOfScope)
}

// runKey is a manual run's creation key (see Idempotency in store/doc.go);
// scheduled runs have none, their key is (schedule, slot).
type runKey struct{ key, requestSHA256 string }

// createRun creates the definition's scan or task with trigger tr and sets
// f's TaskID or ScanID (and RunState) to it. Replayed: the key had already
// created it.
func createRun(ctx context.Context, tx pgx.Tx, org uuid.UUID, def ScheduleDefinition, tr work.Trigger, key runKey,
	f *ScheduleFire) (replayed bool, err error) {
	switch def.Kind {
	case ScheduleScan:
		if def.Scan == nil {
			return false, fmt.Errorf("schedule %s: scan definition missing", f.ScheduleID)
		}
		var id uuid.UUID
		id, replayed, err = work.CreateScan(ctx, tx, scheduledScanParams(org, def.Scan, &tr, key))
		if err != nil {
			return false, fmt.Errorf("schedule %s: create scan: %w", f.ScheduleID, err)
		}
		f.ScanID, f.RunState = &id, "pending"
	case ScheduleTask:
		if def.Task == nil {
			return false, fmt.Errorf("schedule %s: task definition missing", f.ScheduleID)
		}
		d := def.Task
		var task work.Task
		task, replayed, err = work.CreateTask(ctx, tx, work.CreateTaskParams{OrganizationID: org, TaskType: d.TaskType, Payload: d.Payload,
			RequiredCapabilities: d.RequiredCapabilities, Priority: d.Priority, MaxAttempts: d.MaxAttempts,
			LeaseDurationSeconds: d.LeaseDurationSeconds, AttemptTimeoutSeconds: d.AttemptTimeoutSeconds,
			ExecutionTimeout: time.Duration(d.ExecutionTimeoutSeconds) * time.Second,
			RetryBaseSeconds: d.RetryBaseSeconds, RetryMaxSeconds: d.RetryMaxSeconds, Trigger: &tr,
			LabelSelector: d.LabelSelector, PinnedWorkerID: d.PinnedWorkerID,
			IdempotencyKey: key.key, RequestSHA256: key.requestSHA256, SecretRefs: d.SecretRefs})
		if err != nil {
			return false, fmt.Errorf("schedule %s: create task: %w", f.ScheduleID, err)
		}
		f.TaskID, f.RunState = &task.ID, string(task.State)
	default:
		return false, fmt.Errorf("schedule %s: unknown kind %q", f.ScheduleID, def.Kind)
	}
	return replayed, nil
}

// scheduledScanParams is the scan a scheduled scan definition creates.
func scheduledScanParams(org uuid.UUID, scan *ScheduledScan, tr *work.Trigger, key runKey) work.CreateScanParams {
	plugins := make([]work.ScanPlugin, len(scan.Plugins))
	for i, p := range scan.Plugins {
		plugins[i] = work.ScanPlugin(p)
	}
	return work.CreateScanParams{OrganizationID: org, Targets: scan.Targets, Plugins: plugins, Priority: scan.Priority,
		Trigger: tr, IdempotencyKey: key.key, RequestSHA256: key.requestSHA256}
}

// RunScheduleParams is who asks for a manual run, and its creation key.
type RunScheduleParams struct {
	TokenID *uuid.UUID
	// IdempotencyKey and RequestSHA256 make the call repeatable, as for
	// CreateTask: the same key and checksum answer the first run.
	IdempotencyKey string
	RequestSHA256  string
}

// RunScheduleNow fires a schedule at once (a manual trigger), paused or
// not; its slot is the database's now(), and the schedule's own slots are
// unchanged. Replayed is true when the idempotency key already made this
// run. While the schedule's latest run is still active and its overlap
// policy is not allow, a new run is ErrScheduleRunInProgress: the policy
// says runs of the schedule never overlap, whoever starts them.
func (s *Calendar) RunScheduleNow(ctx context.Context, tenant core.Tenant, id uuid.UUID, p RunScheduleParams) (f ScheduleFire, replayed bool, err error) {
	err = s.inTx(ctx, "run schedule", func(tx pgx.Tx) error {
		sc, err := readSchedule(ctx, tx, tenant, id, true)
		if err != nil {
			return err
		}
		core.AuditTarget(ctx, id, &sc.OrganizationID)
		// Read after the lock, in a statement of its own: it sees the run
		// of a fire or manual run that held the lock before.
		var active bool
		if err := tx.QueryRow(ctx, `SELECT s.overlap_policy <> 'allow' AND `+runActiveSQL+` FROM schedules s WHERE s.id = $1`,
			id).Scan(&active); err != nil {
			return fmt.Errorf("read schedule's latest run: %w", err)
		}
		f = ScheduleFire{ScheduleID: id, Version: sc.Version, Trigger: work.TriggerManual, TokenID: p.TokenID, Outcome: FireCreated}
		if err := tx.QueryRow(ctx, `INSERT INTO schedule_fires (schedule_id, organization_id, version, slot_at,
				trigger_kind, token_id, outcome)
			VALUES ($1, $2, $3, now(), 'manual', $4, 'created') RETURNING id, slot_at, fired_at`,
			id, sc.OrganizationID, sc.Version, p.TokenID).Scan(&f.ID, &f.SlotAt, &f.FiredAt); err != nil {
			return fmt.Errorf("record manual fire: %w", err)
		}
		version := sc.Version
		tr := work.Trigger{Kind: work.TriggerManual, ScheduleID: &id, ScheduleVersion: &version, SlotAt: &f.SlotAt, TokenID: p.TokenID}
		replayed, err = createRun(ctx, tx, sc.OrganizationID, sc.Definition, tr, runKey{p.IdempotencyKey, p.RequestSHA256}, &f)
		if err != nil {
			return err
		}
		if !replayed && active {
			// Checked after creating, so that a repeat of an earlier run's
			// key is answered as before; returning rolls the run back.
			return core.ErrScheduleRunInProgress
		}
		if !replayed {
			if _, err := tx.Exec(ctx, `UPDATE schedule_fires SET task_id = $2, scan_id = $3 WHERE id = $1`,
				f.ID, f.TaskID, f.ScanID); err != nil {
				return fmt.Errorf("record schedule run: %w", err)
			}
		}
		if replayed {
			// The key made a run before: answer its fire, keep no new one.
			if _, err := tx.Exec(ctx, `DELETE FROM schedule_fires WHERE id = $1`, f.ID); err != nil {
				return fmt.Errorf("drop repeated manual fire: %w", err)
			}
			f, err = scanFire(tx.QueryRow(ctx, `SELECT `+fireColumns+` FROM schedule_fires f
					LEFT JOIN worker_tasks t ON t.id = f.task_id LEFT JOIN scans sc ON sc.id = f.scan_id
				WHERE f.schedule_id = $1 AND f.trigger_kind = 'manual' AND (f.task_id = $2 OR f.scan_id = $3)`,
				id, f.TaskID, f.ScanID))
			if errors.Is(err, pgx.ErrNoRows) {
				// The key created something else than a run of this schedule.
				return core.ErrIdempotencyKeyReused
			}
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE schedules SET last_task_id = $2, last_scan_id = $3, updated_at = now()
			WHERE id = $1`, id, f.TaskID, f.ScanID); err != nil {
			return fmt.Errorf("record manual run: %w", err)
		}
		core.AuditDetail(ctx, "fire_id", f.ID.String())
		if f.TaskID != nil {
			return core.Notify(ctx, tx, core.Wakeup{Kind: core.WakeOrganization, Organization: sc.OrganizationID, Count: 1})
		}
		return nil
	})
	if err != nil {
		return ScheduleFire{}, false, err
	}
	return f, replayed, nil
}

// NextScheduleFire is when the earliest schedule fires, as the database's
// time and as a delay from its now(): a timer sleeps for In, which no
// replica's clock skew can move.
type NextScheduleFire struct {
	At time.Time
	In time.Duration
}

// NextScheduleFireAt is the earliest fire of any enabled schedule, or false
// when none will fire. A queued slot whose previous run has ended is due
// now. A schedule change sends WakeSchedules, after which the timer asks
// again; so does the end of a run a queued slot waits for (a trigger of
// migration 000016). The one end the trigger cannot see — a run ending
// while the fire that queues its successor has not committed yet — this
// query sees, because the timer asks it right after that fire commits.
func (s *Calendar) NextScheduleFireAt(ctx context.Context) (NextScheduleFire, bool, error) {
	var at *time.Time
	var inMicros *int64
	err := s.pool.QueryRow(ctx, `
		WITH next AS (
			SELECT least(
				(SELECT min(next_fire_at) FROM schedules WHERE enabled AND next_fire_at IS NOT NULL),
				(SELECT now() FROM schedules s WHERE s.enabled AND s.queued_slot_at IS NOT NULL AND NOT `+runActiveSQL+` LIMIT 1)
			) AS at
		)
		SELECT at, (extract(epoch FROM greatest(at - now(), interval '0')) * 1000000)::bigint
		FROM next`).Scan(&at, &inMicros)
	if err != nil {
		return NextScheduleFire{}, false, fmt.Errorf("next schedule fire: %w", err)
	}
	if at == nil || inMicros == nil {
		return NextScheduleFire{}, false, nil
	}
	return NextScheduleFire{At: *at, In: time.Duration(*inMicros) * time.Microsecond}, true, nil
}
