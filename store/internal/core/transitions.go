package core

import (
	"slices"
	"strings"
)

// TaskState is worker_tasks.state.
type TaskState string

const (
	TaskPending        TaskState = "pending"
	TaskLeased         TaskState = "leased"
	TaskRunning        TaskState = "running"
	TaskCancelling     TaskState = "cancelling"
	TaskCancelled      TaskState = "cancelled"
	TaskCompleted      TaskState = "completed"
	TaskRetryWait      TaskState = "retry_wait"
	TaskFailedTerminal TaskState = "failed_terminal"
)

// AttemptStatus is worker_task_attempts.status.
type AttemptStatus string

const (
	AttemptLeased     AttemptStatus = "leased"
	AttemptRunning    AttemptStatus = "running"
	AttemptSucceeded  AttemptStatus = "succeeded"
	AttemptFailed     AttemptStatus = "failed"
	AttemptCancelled  AttemptStatus = "cancelled"
	AttemptExpired    AttemptStatus = "expired"
	AttemptSuperseded AttemptStatus = "superseded"
)

// TaskEvent names an edge of the task state machine.
type TaskEvent string

const (
	EventLease        TaskEvent = "lease"         // a worker leases the task
	EventStart        TaskEvent = "start"         // the worker starts (or heartbeats) it
	EventSucceed      TaskEvent = "succeed"       // the attempt succeeded
	EventRetry        TaskEvent = "retry"         // failed or expired with attempts left
	EventFailTerminal TaskEvent = "fail_terminal" // non-retryable, exhausted, or past its deadline
	EventCancelQueued TaskEvent = "cancel_queued" // cancelled while nobody holds it
	EventCancelActive TaskEvent = "cancel_active" // cancel requested while a worker holds it
	EventCancelDone   TaskEvent = "cancel_done"   // the worker acknowledged, or its lease ended
	EventRelease      TaskEvent = "release"       // the attempt ended by policy; the task is leasable again at once
	EventRedrive      TaskEvent = "redrive"       // an operator retries a dead-lettered or cancelled task
)

// TaskTransition is one row of the task state machine.
type TaskTransition struct {
	From []TaskState
	To   TaskState
}

// TaskTransitions is the task state machine, the only place it is written
// down. Every statement that changes worker_tasks.state takes its allowed
// "from" states from here.
var TaskTransitions = map[TaskEvent]TaskTransition{
	EventLease:        {From: []TaskState{TaskPending, TaskRetryWait}, To: TaskLeased},
	EventStart:        {From: []TaskState{TaskLeased}, To: TaskRunning},
	EventSucceed:      {From: []TaskState{TaskLeased, TaskRunning, TaskCancelling}, To: TaskCompleted},
	EventRetry:        {From: []TaskState{TaskLeased, TaskRunning}, To: TaskRetryWait},
	EventFailTerminal: {From: []TaskState{TaskPending, TaskRetryWait, TaskLeased, TaskRunning}, To: TaskFailedTerminal},
	EventCancelQueued: {From: []TaskState{TaskPending, TaskRetryWait}, To: TaskCancelled},
	EventCancelActive: {From: []TaskState{TaskLeased, TaskRunning}, To: TaskCancelling},
	EventCancelDone:   {From: []TaskState{TaskCancelling}, To: TaskCancelled},
	EventRelease:      {From: []TaskState{TaskLeased, TaskRunning}, To: TaskPending},
	EventRedrive:      {From: []TaskState{TaskFailedTerminal, TaskCancelled}, To: TaskPending},
}

// AllowsFrom reports whether the transition leaves state from.
func (t TaskTransition) AllowsFrom(from TaskState) bool { return slices.Contains(t.From, from) }

// FinalTaskStates are the terminal task states (see TaskState.IsFinal).
func FinalTaskStates() []TaskState {
	return []TaskState{TaskCompleted, TaskCancelled, TaskFailedTerminal}
}

// TaskTransitionAllowed reports whether some event moves a task from one
// state to another.
func TaskTransitionAllowed(from, to TaskState) bool {
	for _, t := range TaskTransitions {
		if t.To == to && slices.Contains(t.From, from) {
			return true
		}
	}
	return false
}

// ActiveAttemptStatuses are the statuses of an attempt that holds a lease.
var ActiveAttemptStatuses = []AttemptStatus{AttemptLeased, AttemptRunning}

// AttemptTransitionAllowed reports whether an attempt may move between two
// statuses: leased → running, and any active status → any final one.
func AttemptTransitionAllowed(from, to AttemptStatus) bool {
	switch {
	case from == AttemptLeased && to == AttemptRunning:
		return true
	case slices.Contains(ActiveAttemptStatuses, from):
		return !slices.Contains(ActiveAttemptStatuses, to)
	}
	return false
}

// IsFinal reports whether a task state is terminal (only an operator's
// redrive leaves it).
func (s TaskState) IsFinal() bool { return slices.Contains(FinalTaskStates(), s) }

// SQLStates renders states as a SQL literal list for IN (...). The values
// are compile-time constants, and literals (not parameters) let the planner
// match partial indexes such as "WHERE status IN ('leased', 'running')".
func SQLStates[S ~string](states ...S) string {
	quoted := make([]string, len(states))
	for i, s := range states {
		quoted[i] = "'" + string(s) + "'"
	}
	return strings.Join(quoted, ", ")
}

// FromStates renders an event's allowed "from" states for SQL.
func FromStates(e TaskEvent) string { return SQLStates(TaskTransitions[e].From...) }

// ActiveStatuses is the SQL list of active attempt statuses.
var ActiveStatuses = SQLStates(ActiveAttemptStatuses...)

// WorkerLiveAttempts is how a statement finds one worker's live attempts:
// worker_id and finished_at IS NULL, which only the worker's index of live
// attempts (worker_task_attempts_worker_unfinished_idx) can serve. An
// attempt is live exactly while finished_at is NULL (a CHECK constraint
// holds every row to it); the status would do as well, but would let the
// planner pick another index of live attempts whenever statistics say none
// is live, and read every worker's live leases on each poll (migration
// 000024 tells the story). attempt is the attempt row's SQL name, worker
// the worker id's SQL expression.
func WorkerLiveAttempts(attempt, worker string) string {
	return attempt + `.worker_id = ` + worker + ` AND ` + attempt + `.finished_at IS NULL`
}
