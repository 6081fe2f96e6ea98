package core

import (
	"strings"
)

// The queue: worker_task_queue holds one row per leasable task (pending or
// retry_wait) with the columns the acquisition walk, the retry timer and
// the deadline sweep need; worker_tasks stays the record. Keeping the
// leasable set apart lets a task's state changes be HOT updates (no index
// of worker_tasks names the state), which is most of what leasing costs
// the database (migration 000012 has the numbers' reasons).
//
// The rule, checked after every step of the randomized test and at the end
// of every fault run (QueueMismatchSQL): a task has a queue row exactly
// while its state is pending or retry_wait, and the row's copies of its
// columns are the task's.
//
//   - A statement that moves tasks into a leasable state inserts their rows
//     (EnqueueSQL over its RETURNING rows): creation, retry, release,
//     redrive.
//   - A statement that moves tasks out of one deletes them: acquisition
//     and the deadline sweep (the rows they walked and took), cancellation
//     (DequeueSQL, right after).
//
// Lock order: whoever starts from a queue row (acquisition, the deadline
// sweep) locks it first and then takes its task with SKIP LOCKED, never
// waiting for it; everyone else locks the task first and then deletes the
// queue row, waiting if need be. So the two orders never wait on each
// other in a cycle, and the row is deleted in the same transaction that
// changes the state: there are no stale rows to clean up.
//
// The rule is the core's, not the lease engine's: creating work
// (store/internal/work), a redrive and a cancellation keep it as much as
// the engine's leases, releases and sweeps do.

// LeasableStates are the task states that have a queue row.
var LeasableStates = FromStates(EventLease)

// copiedColumns are the worker_tasks columns a queue row copies, under the
// same names; the queue's key is task_id, the task's id. Every list below
// is made from this one, so a column added here is copied, checked and
// resynced everywhere.
var copiedColumns = []string{"organization_id", "lease_class", "task_type", "required_capabilities",
	"priority", "created_at", "available_at", "execution_deadline_at", "label_selector", "pinned_worker_id"}

// prefixed is copiedColumns, each prefixed (an alias and dot), comma-separated.
func prefixed(prefix string) string {
	out := make([]string, len(copiedColumns))
	for i, c := range copiedColumns {
		out[i] = prefix + c
	}
	return strings.Join(out, ", ")
}

// queueColumns are the queue's columns, and taskQueueColumns the
// worker_tasks columns they copy, in the same order.
var (
	queueColumns     = "task_id, " + prefixed("")
	taskQueueColumns = "id, " + prefixed("")
)

// QueueSourceColumns are the columns of worker_tasks row alias that
// EnqueueSQL reads: an UPDATE that feeds it returns these rather than the
// whole row (payload included), which would be copied for nothing.
func QueueSourceColumns(alias string) string {
	return alias + ".state, " + alias + ".id, " + prefixed(alias+".")
}

// EnqueueSQL inserts the queue rows of the tasks in rel — a relation of
// worker_tasks rows as they are after the statement's change, such as an
// UPDATE's RETURNING t.* or RETURNING QueueSourceColumns("t") — that are
// leasable.
func EnqueueSQL(rel string) string {
	return `INSERT INTO worker_task_queue (` + queueColumns + `)
		SELECT ` + taskQueueColumns + ` FROM ` + rel + ` WHERE state IN (` + LeasableStates + `)`
}

// DequeueSQL deletes the queue rows of the tasks t matching where (an SQL
// condition over worker_tasks t) that are no longer leasable. It must be a
// statement of its own, after the one that changed the tasks: that one may
// have waited for a transaction that queued the task again (a failed
// attempt's retry) and then moved it on, and a later part of the same
// statement would not see the queue row that transaction inserted (a
// statement reads with the snapshot it started with). Once the task is
// locked nobody else can queue it, so the next statement sees every row.
func DequeueSQL(where string) string {
	return `DELETE FROM worker_task_queue q USING worker_tasks t
		WHERE q.task_id = t.id AND (` + where + `) AND t.state NOT IN (` + LeasableStates + `)`
}

// QueueMismatchSQL counts the tasks that break the queue's rule: leasable
// without a queue row, or with a row that is stale or should not exist.
// Tests and the fault checker run it; it is zero when the rule holds.
var QueueMismatchSQL = `
SELECT count(*) FROM worker_tasks t FULL JOIN worker_task_queue q ON q.task_id = t.id
WHERE (t.state IN (` + LeasableStates + `)) IS DISTINCT FROM (q.task_id IS NOT NULL AND t.id IS NOT NULL)
	OR (q.task_id IS NOT NULL AND (` + prefixed("q.") + `) IS DISTINCT FROM (` + prefixed("t.") + `))`

// ResyncQueueSQL makes the queue rows of the tasks $1 (uuid[]) follow their
// task rows: it deletes the rows of tasks that are not leasable and inserts
// or refreshes those of tasks that are. The gateway never needs it (its
// statements keep the rule themselves); tests and tools that edit task rows
// in SQL run it afterwards (storetest.EditTasks).
var ResyncQueueSQL = `
WITH gone AS (
	DELETE FROM worker_task_queue q USING worker_tasks t
	WHERE q.task_id = t.id AND t.id = ANY($1::uuid[]) AND t.state NOT IN (` + LeasableStates + `)
)
INSERT INTO worker_task_queue (` + queueColumns + `)
SELECT ` + taskQueueColumns + ` FROM worker_tasks
WHERE id = ANY($1::uuid[]) AND state IN (` + LeasableStates + `)
ON CONFLICT (task_id) DO UPDATE SET (` + prefixed("") + `) = (` + prefixed("EXCLUDED.") + `)`
