package webhooks

// The catalogue of events, as the contract names them: what a target
// subscribes to. Each is emitted through the one emitter (core.EmitEvent,
// core.TaskEventsSQL or webhook_emit), which TestEveryEventHasOneEmitter
// (tests/security) checks against this file.

// The event types a webhook target may subscribe to.
const (
	EventTaskCompleted       = "task.completed"
	EventTaskFailedTerminal  = "task.failed_terminal"
	EventScanCompleted       = "scan.completed"
	EventScanFailed          = "scan.failed"
	EventWorkerOffline       = "worker.offline"
	EventWorkerRevoked       = "worker.revoked"
	EventOrgNoEligibleWorker = "organization.no_eligible_worker"
	EventScheduleFireSkipped = "schedule.fire_skipped"
)

// WebhookEventTypes lists every event type, in the contract's order.
var WebhookEventTypes = []string{EventTaskFailedTerminal, EventTaskCompleted, EventScanCompleted, EventScanFailed,
	EventWorkerOffline, EventWorkerRevoked, EventOrgNoEligibleWorker, EventScheduleFireSkipped}
