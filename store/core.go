package store

import (
	"context"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// The store's vocabulary lives in its core (store/internal/core): the
// transaction runners, states and transitions, wake-ups, the audit context
// and the webhook emitter. Callers name it through this package, as
// before; the files of this package call the core by its own names. The
// Tenant is the core's too (core/tenant.go), so that a
// control-plane domain outside this package filters by it the same way.

// TaskState is worker_tasks.state.
type TaskState = core.TaskState

const (
	TaskPending        = core.TaskPending
	TaskLeased         = core.TaskLeased
	TaskRunning        = core.TaskRunning
	TaskCancelling     = core.TaskCancelling
	TaskCancelled      = core.TaskCancelled
	TaskCompleted      = core.TaskCompleted
	TaskRetryWait      = core.TaskRetryWait
	TaskFailedTerminal = core.TaskFailedTerminal
)

// AttemptStatus is worker_task_attempts.status.
type AttemptStatus = core.AttemptStatus

const (
	AttemptLeased     = core.AttemptLeased
	AttemptRunning    = core.AttemptRunning
	AttemptSucceeded  = core.AttemptSucceeded
	AttemptFailed     = core.AttemptFailed
	AttemptCancelled  = core.AttemptCancelled
	AttemptExpired    = core.AttemptExpired
	AttemptSuperseded = core.AttemptSuperseded
)

// TaskEvent names an edge of the task state machine.
type TaskEvent = core.TaskEvent

const (
	EventLease        = core.EventLease
	EventStart        = core.EventStart
	EventSucceed      = core.EventSucceed
	EventRetry        = core.EventRetry
	EventFailTerminal = core.EventFailTerminal
	EventCancelQueued = core.EventCancelQueued
	EventCancelActive = core.EventCancelActive
	EventCancelDone   = core.EventCancelDone
	EventRelease      = core.EventRelease
	EventRedrive      = core.EventRedrive
)

// TaskTransitions is the task state machine (core/transitions.go).
var TaskTransitions = core.TaskTransitions

// ActiveAttemptStatuses are the statuses of an attempt that holds a lease.
var ActiveAttemptStatuses = core.ActiveAttemptStatuses

// TaskTransitionAllowed reports whether some event moves a task from one
// state to another.
func TaskTransitionAllowed(from, to TaskState) bool { return core.TaskTransitionAllowed(from, to) }

// AttemptTransitionAllowed reports whether an attempt may move between two
// statuses.
func AttemptTransitionAllowed(from, to AttemptStatus) bool {
	return core.AttemptTransitionAllowed(from, to)
}

// ScanState is scans.state.
type ScanState = core.ScanState

const (
	ScanPending   = core.ScanPending
	ScanRunning   = core.ScanRunning
	ScanCompleted = core.ScanCompleted
	ScanFailed    = core.ScanFailed
	ScanCancelled = core.ScanCancelled
)

// ScanJobState is scan_jobs.state.
type ScanJobState = core.ScanJobState

const (
	ScanJobPending   = core.ScanJobPending
	ScanJobRunning   = core.ScanJobRunning
	ScanJobCompleted = core.ScanJobCompleted
	ScanJobFailed    = core.ScanJobFailed
	ScanJobCancelled = core.ScanJobCancelled
)

// ScanJobStateOf maps every task state to the state of its scan job.
var ScanJobStateOf = core.ScanJobStateOf

// NotifyChannel is the one LISTEN/NOTIFY channel the gateway uses.
const NotifyChannel = core.NotifyChannel

// WakeupKind says who a wake-up is for; Wakeup is one decoded notification.
type (
	WakeupKind = core.WakeupKind
	Wakeup     = core.Wakeup
)

const (
	WakeOrganization    = core.WakeOrganization
	WakeOrganizationAt  = core.WakeOrganizationAt
	WakeWorker          = core.WakeWorker
	WakeWorkerRevoked   = core.WakeWorkerRevoked
	WakeCapacity        = core.WakeCapacity
	WakeIdentityChanged = core.WakeIdentityChanged
	WakeSchedules       = core.WakeSchedules
	WakeWebhooks        = core.WakeWebhooks
)

// ParseWakeup decodes a notification payload.
func ParseWakeup(payload string) (Wakeup, error) { return core.ParseWakeup(payload) }

// AuditEvent is who did what to what, and when.
type AuditEvent = core.AuditEvent

// WithAudit returns ctx carrying the audit record of the change the store
// makes with it (core/auditctx.go).
func WithAudit(ctx context.Context, e AuditEvent, details map[string]any) context.Context {
	return core.WithAudit(ctx, e, details)
}

// WithAuditEach is WithAudit for a call that commits in batches: each
// committed transaction writes its own row.
func WithAuditEach(ctx context.Context, e AuditEvent, details map[string]any) context.Context {
	return core.WithAuditEach(ctx, e, details)
}

// AuditWritten reports whether ctx declared an audit record and whether a
// committed transaction wrote it (or the verb dropped it as no change).
func AuditWritten(ctx context.Context) (declared, done bool) { return core.AuditWritten(ctx) }

// Event is a change a webhook may announce; Audience is who hears it
// (core/events.go, the one emitter).
type (
	Event    = core.Event
	Audience = core.Audience
)

// QueueMismatchSQL counts tasks whose queue row does not follow their
// state; ResyncQueueSQL repairs them (store/internal/core/queue.go).
var (
	QueueMismatchSQL = core.QueueMismatchSQL
	ResyncQueueSQL   = core.ResyncQueueSQL
)

// EnqueueSQL inserts the queue rows of the leasable tasks of rel.
func EnqueueSQL(rel string) string { return core.EnqueueSQL(rel) }
