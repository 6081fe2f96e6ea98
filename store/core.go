package store

import (
	"context"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/fencing"
)

// The store's vocabulary lives in its core (store/internal/core): the
// transaction runners, states and transitions, wake-ups, the audit context
// and the webhook emitter. Callers name it through this package, as
// before; the files of this package call the core through the unexported
// names below. The Tenant is the core's too (core/tenant.go), so that a
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

// executor is what both a pool and a transaction can do.
type executor = core.Executor

// psql builds statements with $n placeholders.
var psql = core.Psql

// The core's SQL fragments and helpers, by the names this package's files
// use. Functions, not function values, so that calls inline as before.
var (
	activeStatuses   = core.ActiveStatuses
	activeScanStates = core.ActiveScanStates
	finalScanStates  = core.FinalScanStates
	scanStartedBy    = core.ScanStartedBy
)

func finalTaskStates() []TaskState  { return core.FinalTaskStates() }
func fromStates(e TaskEvent) string { return core.FromStates(e) }
func workerLiveAttempts(attempt, worker string) string {
	return core.WorkerLiveAttempts(attempt, worker)
}
func sqlStates[S ~string](states ...S) string { return core.SQLStates(states...) }

func notify(ctx context.Context, ex executor, wakeups ...Wakeup) error {
	return core.Notify(ctx, ex, wakeups...)
}
func creationReplay(ctx context.Context, ex executor, table string, org uuid.UUID, key, requestSHA256 string) (uuid.UUID, error) {
	return core.CreationReplay(ctx, ex, table, org, key, requestSHA256)
}
func insertAudit(ctx context.Context, ex executor, e AuditEvent) error {
	return core.InsertAudit(ctx, ex, e)
}
func auditDetail(ctx context.Context, key string, value any) { core.AuditDetail(ctx, key, value) }
func auditSkip(ctx context.Context)                          { core.AuditSkip(ctx) }
func auditTarget(ctx context.Context, id uuid.UUID, org *uuid.UUID) {
	core.AuditTarget(ctx, id, org)
}
func auditTokenActor(ctx context.Context, token uuid.UUID, org *uuid.UUID) {
	core.AuditTokenActor(ctx, token, org)
}
func auditWorkerActor(ctx context.Context, worker uuid.UUID) { core.AuditWorkerActor(ctx, worker) }

// The fencing predicates (store/internal/fencing), for the worker-facing
// verbs that stay in this package (results, logs, uploads).
func leaseHeld(attempt, id, worker, tokenHash string) string {
	return fencing.LeaseHeld(attempt, id, worker, tokenHash)
}
func leaseLive(attempt string) string { return fencing.LeaseLive(attempt) }

// Event is a change a webhook may announce; Audience is who hears it
// (core/events.go, the one emitter).
type (
	Event    = core.Event
	Audience = core.Audience
)

func emitEvent(ctx context.Context, ex executor, e Event) (int, error) {
	return core.EmitEvent(ctx, ex, e)
}
func workerAudience(worker uuid.UUID) Audience { return core.WorkerAudience(worker) }
