package work

import (
	"time"

	"github.com/google/uuid"
)

// TriggerKind says what caused a scan or task.
type TriggerKind string

// Trigger kinds.
const (
	TriggerSchedule TriggerKind = "schedule"
	TriggerManual   TriggerKind = "manual"
	TriggerAPI      TriggerKind = "api"
)

// Trigger is what caused a scan or task: a schedule's slot, a manual run of
// a schedule, or an API call, and the token that asked.
type Trigger struct {
	Kind            TriggerKind
	ScheduleID      *uuid.UUID
	ScheduleVersion *int
	SlotAt          *time.Time
	TokenID         *uuid.UUID
}

// triggerColumns are a task's or scan's trigger columns, read by
// triggerRow; only control-plane reads select them (see "Shape" in store/doc.go).
func triggerColumns(alias string) string {
	return alias + ".trigger_kind, " + alias + ".trigger_schedule_id, " + alias + ".trigger_schedule_version, " +
		alias + ".trigger_slot_at, " + alias + ".trigger_token_id"
}

// triggerRow receives triggerColumns.
type triggerRow struct {
	kind     *string
	schedule *uuid.UUID
	version  *int
	slot     *time.Time
	token    *uuid.UUID
}

func (r *triggerRow) dest() []any {
	return []any{&r.kind, &r.schedule, &r.version, &r.slot, &r.token}
}

// trigger is nil for rows written before triggers were recorded.
func (r *triggerRow) trigger() *Trigger {
	if r.kind == nil {
		return nil
	}
	return &Trigger{Kind: TriggerKind(*r.kind), ScheduleID: r.schedule, ScheduleVersion: r.version, SlotAt: r.slot, TokenID: r.token}
}

// orAPI is the trigger to record: an API call unless told otherwise.
func (t *Trigger) orAPI() Trigger {
	var out Trigger
	if t != nil {
		out = *t
	}
	if out.Kind == "" {
		out.Kind = TriggerAPI
	}
	return out
}
