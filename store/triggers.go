package store

// DatabaseTrigger is a trigger of the schema: what a statement on Table
// sets off in the database, beyond the rows it writes.
type DatabaseTrigger struct {
	Name, Table, Function string
	// Effect says what it does, for a reader of the statements that fire it.
	Effect string
}

// DatabaseTriggers lists every trigger of the schema (after the contract
// step), so that a statement's side effects are read where it is written:
// moveTasksSQL, the sweeper, cancellations and leases all fire the
// worker_tasks ones. TestDatabaseTriggersAreListed holds the schema to this
// list; each function is defined in migrations/functions/<Function>.sql.
var DatabaseTriggers = []DatabaseTrigger{
	{Name: "worker_tasks_mirror_scan_job", Table: "worker_tasks", Function: "mirror_task_state_to_scan_job",
		Effect: "a scan task's state change: its job takes the state (ScanJobStateOf); a taken task starts its scan; " +
			"an ended one advances it (advance_scan: the next job's task, queued and woken, or the scan's end and history)"},
	{Name: "worker_tasks_wake_schedule", Table: "worker_tasks", Function: "wake_schedule_of_ended_run",
		Effect: "a schedule's task ended: wakes the schedule timer when a queued slot waits for it"},
	{Name: "scans_wake_schedule", Table: "scans", Function: "wake_schedule_of_ended_run",
		Effect: "a schedule's scan ended: wakes the schedule timer when a queued slot waits for it"},
	{Name: "scans_webhook_ended", Table: "scans", Function: "webhook_scan_ended",
		Effect: "a scan completed or failed: emits scan.completed / scan.failed (webhook_emit)"},
	{Name: "schedule_fires_webhook_skipped", Table: "schedule_fires", Function: "webhook_fire_skipped",
		Effect: "a slot recorded as skipped: emits schedule.fire_skipped (webhook_emit)"},
	{Name: "schedule_fires_webhook_skipped_later", Table: "schedule_fires", Function: "webhook_fire_skipped",
		Effect: "a fire turned to skipped: emits schedule.fire_skipped (webhook_emit)"},
	{Name: "webhook_deliveries_notify", Table: "webhook_deliveries", Function: "webhook_delivery_notify",
		Effect: "deliveries queued: wakes the deliverers, once per organization and statement"},
}
