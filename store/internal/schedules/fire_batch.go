package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/targetscope"
	"github.com/worker-gateway/gateway/store/internal/work"
)

// The fast path of a claim's fires. Firing one slot at a time costs five
// statements and a savepoint per fire (a scan, its jobs, advance_scan, the
// fire row), and at 1,000 fires a second that was most of two cores. A
// claim's fires are instead decided first, as if every run succeeds, and
// written together: all scans and their jobs in one statement, all first
// jobs started in one, all fire rows in one. Tasks are still created one
// by one (work.CreateTask), inside the same savepoint.
//
// The optimism is checked, not assumed: when a slot turns out to have
// fired already (its fire row conflicts), a run's data is refused, or a
// queued slot is due, the savepoint rolls back and the claim fires one slot
// at a time, as before, where each of those cases has its answer. Either
// way the transaction commits the same rows.

// errFireOneByOne sends a claim to the one-slot-at-a-time path.
var errFireOneByOne = errors.New("schedule fires need the one-by-one path")

// fireBatch is the writes a claim's fires decided, not yet made.
type fireBatch struct {
	scans []batchedScan
	fires []batchedFire
	// scopes is each organization's scan scope, read once per claim.
	scopes map[uuid.UUID]targetscope.Scope
}

type batchedScan struct {
	id uuid.UUID
	work.CreateScanParams
}

// batchedFire is a fire row to insert; index is its entry in c.fires,
// whose ID and FiredAt the insert fills in.
type batchedFire struct {
	c       *claimed
	index   int
	slot    time.Time
	outcome string
	reason  string
	missed  int
}

// fireClaimed fires the claimed schedules: in a batch when it can, else
// one slot at a time. It returns the wake-ups and the fires recorded.
func fireClaimed(ctx context.Context, tx pgx.Tx, due []*claimed) ([]core.Wakeup, []ScheduleFire, error) {
	before := make([]claimed, len(due))
	for i, c := range due {
		before[i] = *c
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("schedule savepoint: %w", err)
	}
	err = fireBatched(ctx, sp, due)
	if err == nil {
		if err := sp.Commit(ctx); err != nil {
			return nil, nil, fmt.Errorf("schedule savepoint: %w", err)
		}
		return collectFires(due)
	}
	if !errors.Is(err, errFireOneByOne) && !isRefusedData(err) {
		return nil, nil, err
	}
	if err := sp.Rollback(ctx); err != nil {
		return nil, nil, fmt.Errorf("schedule savepoint: %w", err)
	}
	for i, c := range due {
		*c = before[i]
		if err := c.fire(ctx, tx); err != nil {
			return nil, nil, err
		}
	}
	return collectFires(due)
}

func collectFires(due []*claimed) ([]core.Wakeup, []ScheduleFire, error) {
	var wakeups []core.Wakeup
	var fires []ScheduleFire
	for _, c := range due {
		wakeups = append(wakeups, c.wakeups...)
		for _, f := range c.fires {
			if f.ID != uuid.Nil { // a batched record whose slot was already recorded has none
				fires = append(fires, f)
			}
		}
	}
	return wakeups, fires, nil
}

// fireBatched decides every claimed schedule's fires with runs deferred to
// the batch, then writes the batch.
func fireBatched(ctx context.Context, tx pgx.Tx, due []*claimed) error {
	b := &fireBatch{}
	for _, c := range due {
		c.batch = b
		err := c.fire(ctx, tx)
		c.batch = nil
		if err != nil {
			return err
		}
	}
	return b.write(ctx, tx)
}

// run is claimed.run for the batch: a scan is created later with the
// others, a task now; the fire row is written later.
func (b *fireBatch) run(ctx context.Context, tx pgx.Tx, c *claimed, slot time.Time, queued bool, missed int) error {
	if queued {
		return errFireOneByOne // its fire row exists already, as queued
	}
	version := c.version
	due := c.sl.FireAt(slot)
	f := ScheduleFire{ScheduleID: c.sl.ID, Version: c.version, SlotAt: slot, Trigger: work.TriggerSchedule,
		Outcome: FireCreated, MissedSlots: missed, DueAt: &due}
	tr := work.Trigger{Kind: work.TriggerSchedule, ScheduleID: &c.sl.ID, ScheduleVersion: &version, SlotAt: &slot}
	switch {
	case c.def.Kind == ScheduleScan && c.def.Scan != nil:
		p := scheduledScanParams(c.org, c.def.Scan, &tr, runKey{})
		if err := b.checkScope(ctx, tx, p); err != nil {
			return err // out of scope: one by one records the slot as skipped
		}
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("scan id: %w", err)
		}
		b.scans = append(b.scans, batchedScan{id: id, CreateScanParams: p})
		f.ScanID, f.RunState = &id, "pending"
	default:
		if _, err := createRun(ctx, tx, c.org, c.def, tr, runKey{}, &f); err != nil {
			return err
		}
	}
	b.fires = append(b.fires, batchedFire{c: c, index: len(c.fires), slot: slot, outcome: FireCreated, missed: missed})
	c.fires = append(c.fires, f)
	c.ranOn(f)
	return nil
}

// checkScope holds a scan to its organization's scope, as work.CreateScan does.
func (b *fireBatch) checkScope(ctx context.Context, tx pgx.Tx, p work.CreateScanParams) error {
	ts, ok := b.scopes[p.OrganizationID]
	if !ok {
		var err error
		if ts, err = targetscope.Load(ctx, tx, p.OrganizationID); err != nil {
			return err
		}
		if b.scopes == nil {
			b.scopes = map[uuid.UUID]targetscope.Scope{}
		}
		b.scopes[p.OrganizationID] = ts
	}
	return work.CheckScanScopeIn(ts, p, nil) // a scheduled scan names no assets
}

// record is claimed.record for the batch.
func (b *fireBatch) record(c *claimed, slot time.Time, outcome, reason string, missed int) {
	b.fires = append(b.fires, batchedFire{c: c, index: len(c.fires), slot: slot, outcome: outcome, reason: reason, missed: missed})
	c.fires = append(c.fires, ScheduleFire{ScheduleID: c.sl.ID, Version: c.version, SlotAt: slot,
		Trigger: work.TriggerSchedule, Outcome: outcome, SkipReason: reason, MissedSlots: missed})
}

// createScansSQL creates scans and their jobs from arrays, as work.CreateScan
// does one at a time; advance_scan then starts each scan's first job.
const createScansSQL = `
WITH scan AS (
	INSERT INTO scans (id, organization_id, targets, priority, trigger_kind,
		trigger_schedule_id, trigger_schedule_version, trigger_slot_at, asset_targets, scope_key)
	SELECT id, organization_id, targets, priority, 'schedule', schedule_id, schedule_version, slot_at, '[]', scope_key
	FROM unnest($1::uuid[], $2::uuid[], $3::jsonb[], $4::int[], $5::uuid[], $6::int[], $7::timestamptz[], $15::text[])
		AS i(id, organization_id, targets, priority, schedule_id, schedule_version, slot_at, scope_key)
)
INSERT INTO scan_jobs (scan_id, organization_id, position, plugin_name, input, timeout_seconds, required_capabilities)
SELECT * FROM unnest($8::uuid[], $9::uuid[], $10::int[], $11::text[], $12::jsonb[], $13::int[], $14::jsonb[])`

// insertFiresSQL records fires; a slot already recorded is left as it is
// and not returned.
const insertFiresSQL = `
INSERT INTO schedule_fires (schedule_id, organization_id, version, slot_at, trigger_kind,
	outcome, skip_reason, missed_slots, task_id, scan_id)
SELECT schedule_id, organization_id, version, slot_at, 'schedule', outcome, skip_reason, missed_slots, task_id, scan_id
FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::timestamptz[], $5::text[], $6::text[], $7::int[], $8::uuid[], $9::uuid[])
	AS f(schedule_id, organization_id, version, slot_at, outcome, skip_reason, missed_slots, task_id, scan_id)
ON CONFLICT (schedule_id, slot_at) WHERE trigger_kind = 'schedule' DO NOTHING
RETURNING schedule_id, slot_at, id, fired_at`

// write makes the batch's scans, starts them, and records its fires. A
// created fire whose slot was recorded already sends the claim one by one
// (its run must not stay); a record whose slot was is dropped, as
// claimed.record drops it.
func (b *fireBatch) write(ctx context.Context, tx pgx.Tx) error {
	if err := b.createScans(ctx, tx); err != nil {
		return err
	}
	if len(b.fires) == 0 {
		return nil
	}
	n := len(b.fires)
	schedules, orgs, versions := make([]uuid.UUID, n), make([]uuid.UUID, n), make([]int, n)
	slots, outcomes, reasons, missed := make([]time.Time, n), make([]string, n), make([]string, n), make([]int, n)
	tasks, scans := make([]*uuid.UUID, n), make([]*uuid.UUID, n)
	type key struct {
		schedule uuid.UUID
		slot     int64
	}
	byKey := make(map[key]batchedFire, n)
	for i, bf := range b.fires {
		f := bf.c.fires[bf.index]
		schedules[i], orgs[i], versions[i], slots[i] = bf.c.sl.ID, bf.c.org, bf.c.version, bf.slot
		outcomes[i], reasons[i], missed[i], tasks[i], scans[i] = bf.outcome, bf.reason, bf.missed, f.TaskID, f.ScanID
		byKey[key{bf.c.sl.ID, bf.slot.UnixMicro()}] = bf
	}
	rows, err := tx.Query(ctx, insertFiresSQL, schedules, orgs, versions, slots, outcomes, reasons, missed, tasks, scans)
	if err != nil {
		return fmt.Errorf("record schedule fires: %w", err)
	}
	var (
		schedule uuid.UUID
		slot     time.Time
		id       uuid.UUID
		firedAt  time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&schedule, &slot, &id, &firedAt}, func() error {
		bf, ok := byKey[key{schedule, slot.UnixMicro()}]
		if !ok {
			return fmt.Errorf("record schedule fires: unexpected slot %s of schedule %s", slot, schedule)
		}
		f := &bf.c.fires[bf.index]
		f.ID, f.FiredAt = id, firedAt
		return nil
	})
	if err != nil {
		return fmt.Errorf("record schedule fires: %w", err)
	}
	for _, bf := range b.fires {
		if bf.c.fires[bf.index].ID == uuid.Nil && bf.outcome == FireCreated {
			return errFireOneByOne // this slot fired before: its run must go
		}
	}
	return nil
}

// createScans inserts the batch's scans and jobs, then starts each scan's
// first job with advance_scan, the one place that turns a job into a task.
func (b *fireBatch) createScans(ctx context.Context, tx pgx.Tx) error {
	if len(b.scans) == 0 {
		return nil
	}
	n := len(b.scans)
	ids, orgs, targets := make([]uuid.UUID, n), make([]uuid.UUID, n), make([]string, n)
	priorities, schedules, versions, slots := make([]int, n), make([]uuid.UUID, n), make([]int, n), make([]time.Time, n)
	scopeKeys := make([]string, n)
	var (
		jobScans, jobOrgs     []uuid.UUID
		positions             []int
		timeouts              []*int
		names, inputs, capses []string
	)
	for i, s := range b.scans {
		t, err := json.Marshal(s.Targets)
		if err != nil {
			return fmt.Errorf("scan targets: %w", err)
		}
		ids[i], orgs[i], targets[i], priorities[i] = s.id, s.OrganizationID, string(t), s.Priority
		schedules[i], versions[i], slots[i] = *s.Trigger.ScheduleID, *s.Trigger.ScheduleVersion, *s.Trigger.SlotAt
		scopeKeys[i] = work.ScanScopeKey(s.CreateScanParams, nil)
		for pos, p := range s.Plugins {
			jobScans, jobOrgs = append(jobScans, s.id), append(jobOrgs, s.OrganizationID)
			positions, names, timeouts = append(positions, pos), append(names, p.Name), append(timeouts, p.TimeoutSeconds)
			inputs, capses = append(inputs, jsonOrEmpty(p.Input)), append(capses, jsonOrEmpty(p.RequiredCapabilities))
		}
	}
	if _, err := tx.Exec(ctx, createScansSQL, ids, orgs, targets, priorities, schedules, versions, slots,
		jobScans, jobOrgs, positions, names, inputs, timeouts, capses, scopeKeys); err != nil {
		return fmt.Errorf("create scheduled scans: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT advance_scan(id) FROM unnest($1::uuid[]) AS id`, ids); err != nil {
		return fmt.Errorf("start scheduled scans: %w", err)
	}
	return nil
}

// jsonOrEmpty is a JSON value, or {} when absent (as work.CreateScan stores it).
func jsonOrEmpty(v json.RawMessage) string {
	if len(v) == 0 {
		return `{}`
	}
	return string(v)
}
