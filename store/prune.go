package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// Retention defaults. A retention of zero or less keeps that kind forever.
const (
	// DefaultTaskRetention is how long a terminal task (completed, cancelled,
	// failed_terminal) is kept after it finished.
	DefaultTaskRetention = 30 * 24 * time.Hour
	// DefaultUploadRetention is how long an expired or failed upload session
	// row is kept after its expiry.
	DefaultUploadRetention = 7 * 24 * time.Hour
	// DefaultAuditRetention is how long audit events are kept: a year.
	// Forever let the table grow without bound (and anyone able to provoke
	// rows could grow it); a year covers the look-back of an incident
	// investigation, which often starts months after the fact, and the
	// twelve months that common audit regimes (PCI DSS 10.5.1, SOC 2
	// evidence periods) ask for. Operators who must keep more export the
	// log or raise the retention.
	DefaultAuditRetention = 365 * 24 * time.Hour
	// DefaultPruneBatch bounds the rows one statement of a Prune call deletes.
	DefaultPruneBatch = 500
)

// PruneParams says what Prune may delete. A retention of zero or less
// disables that kind (keeps it forever); Batch ≤ 0 means DefaultPruneBatch.
type PruneParams struct {
	TaskRetention   time.Duration
	UploadRetention time.Duration
	AuditRetention  time.Duration
	Batch           int
}

// DefaultPruneParams returns the documented defaults.
func DefaultPruneParams() PruneParams {
	return PruneParams{
		TaskRetention:   DefaultTaskRetention,
		UploadRetention: DefaultUploadRetention,
		AuditRetention:  DefaultAuditRetention,
		Batch:           DefaultPruneBatch,
	}
}

// PruneResult counts what one Prune call deleted.
type PruneResult struct {
	// Tasks is the number of worker_tasks rows deleted. Attempts is how many
	// worker_task_attempts rows went with them by ON DELETE CASCADE (their
	// result batches, logs and upload rows went too, uncounted).
	Tasks    int
	Attempts int
	// Uploads is the number of expired or failed upload session rows deleted.
	Uploads int
	// AuditEvents is the number of audit events deleted.
	AuditEvents int
	// ScheduleFires is the number of schedule fire entries deleted.
	ScheduleFires int
	// ConsoleSessions is the number of ended console sessions deleted.
	ConsoleSessions int
	// More is true when some statement deleted a full batch, so another call
	// should follow at once.
	More bool
}

// pruneTasksSQL deletes up to $2 terminal tasks that finished more than $1
// seconds ago. It skips
//
//   - tasks of a scan that is still pending or running (the scan's
//     progression reads its jobs' tasks),
//   - tasks with an upload session still open (prepared or uploaded): the
//     upload sweeper must first expire it and hand its object key to the
//     object deleter, which a cascade would otherwise pre-empt.
//
// The task rows are taken FOR UPDATE SKIP LOCKED, so replicas prune
// disjoint rows and a concurrent redrive (which locks the task) either waits
// for the delete and then finds nothing, or keeps its task out of this
// batch. Attempts, result batches, attempt logs and upload sessions go by
// ON DELETE CASCADE; files stay (they are user-visible artifacts with their
// own object) and only lose their task_id and attempt_id (ON DELETE SET
// NULL). The cascade locks attempts after their task, against the
// documented order, but nothing locks an attempt of a terminal task and
// then its task (every such statement is fenced on an active attempt), and
// inTx retries a deadlock victim anyway.
//
// The candidate scan has no ORDER BY so that, without an index on the
// finish time, a sequential scan stops as soon as the batch is full.
var pruneTasksSQL = `
WITH victims AS (
	SELECT t.id FROM worker_tasks t
	WHERE t.state IN (` + core.SQLStates(TaskCompleted, TaskCancelled, TaskFailedTerminal) + `)
		AND coalesce(t.completed_at, t.updated_at) < now() - make_interval(secs => $1)
		AND NOT EXISTS (SELECT 1 FROM scans s
			WHERE s.id = t.scan_id AND s.state IN (` + core.SQLStates(core.ActiveScanStates...) + `))
		AND NOT EXISTS (SELECT 1 FROM worker_artifact_uploads u
			WHERE u.task_id = t.id AND u.status IN ('prepared', 'uploaded'))
	LIMIT $2
	FOR UPDATE OF t SKIP LOCKED
), deleted AS (
	DELETE FROM worker_tasks t USING victims v WHERE t.id = v.id
	RETURNING t.id
)
SELECT (SELECT count(*) FROM deleted),
	(SELECT count(*) FROM worker_task_attempts a WHERE a.task_id IN (SELECT id FROM deleted))`

// pruneUploadsSQL deletes up to $2 expired or failed upload session rows
// whose expiry is more than $1 seconds ago (a session ends at the latest
// at its expiry, so it ended at least that long ago). Their objects were
// deleted by the upload sweeper, or are orphans the orphan sweep deletes:
// neither status keeps an object live.
const pruneUploadsSQL = `
DELETE FROM worker_artifact_uploads WHERE id IN (
	SELECT id FROM worker_artifact_uploads
	WHERE status IN ('expired', 'failed') AND expires_at < now() - make_interval(secs => $1)
	LIMIT $2
	FOR UPDATE SKIP LOCKED)`

// pruneAuditSQL deletes up to $2 audit events older than $1 seconds, oldest
// first (audit_events_occurred_idx serves the order).
const pruneAuditSQL = `
DELETE FROM audit_events WHERE id IN (
	SELECT id FROM audit_events
	WHERE occurred_at < now() - make_interval(secs => $1)
	ORDER BY occurred_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED)`

// pruneConsoleSessionsSQL deletes up to $1 expired console sessions.
const pruneConsoleSessionsSQL = `
DELETE FROM console_sessions WHERE secret_hash IN (
	SELECT secret_hash FROM console_sessions WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)`

// pruneScheduleFiresSQL deletes up to $2 schedule fire entries recorded
// more than $1 seconds ago, oldest first, except a queued one (its slot
// still waits to run). A fire's id is a UUID version 7 made when it was
// recorded, so the age test is a range of the primary key: the smallest
// id of the cutoff's millisecond is the bound, and no other index is
// needed. A slot pruned here cannot fire again: its schedule moved past it
// when it fired.
const pruneScheduleFiresSQL = `
DELETE FROM schedule_fires WHERE id IN (
	SELECT id FROM schedule_fires
	WHERE id < encode(overlay('\x00000000000000000000000000000000'::bytea
			PLACING substring(int8send((extract(epoch FROM now() - make_interval(secs => $1)) * 1000)::bigint) FROM 3)
			FROM 1 FOR 6), 'hex')::uuid
		AND outcome <> 'queued'
	ORDER BY id
	LIMIT $2
	FOR UPDATE SKIP LOCKED)`

// Prune deletes old rows nobody needs any more, at most p.Batch rows per
// kind: terminal tasks past p.TaskRetention (with their attempts, result
// batches, logs and upload sessions), expired or failed upload sessions
// past p.UploadRetention, audit events past p.AuditRetention, and schedule
// fire entries past p.TaskRetention (the runs they name are gone). It never
// deletes a task that is not terminal, nor one of a pending or running scan.
// Ages are measured against the database's now().
//
// Each kind is one statement in its own transaction, so a call holds its
// locks briefly; SKIP LOCKED lets every replica prune at once without
// waiting or deleting the same row twice. When More is set, call again. On
// an error the counts of the statements that committed are returned.
func (s *Store) Prune(ctx context.Context, p PruneParams) (PruneResult, error) {
	batch := p.Batch
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
	var res PruneResult
	if p.TaskRetention > 0 {
		var tasks, attempts int
		err := s.inTx(ctx, "prune tasks", func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, pruneTasksSQL, p.TaskRetention.Seconds(), batch).Scan(&tasks, &attempts)
		})
		if err != nil {
			return res, err
		}
		res.Tasks, res.Attempts = tasks, attempts
		res.More = res.More || tasks >= batch
		tag, err := s.pool.Exec(ctx, pruneScheduleFiresSQL, p.TaskRetention.Seconds(), batch)
		if err != nil {
			return res, fmt.Errorf("prune schedule fires: %w", err)
		}
		res.ScheduleFires = int(tag.RowsAffected())
		res.More = res.More || res.ScheduleFires >= batch
	}
	if p.UploadRetention > 0 {
		tag, err := s.pool.Exec(ctx, pruneUploadsSQL, p.UploadRetention.Seconds(), batch)
		if err != nil {
			return res, fmt.Errorf("prune uploads: %w", err)
		}
		res.Uploads = int(tag.RowsAffected())
		res.More = res.More || res.Uploads >= batch
	}
	// Ended console sessions open nothing (every lookup checks the expiry);
	// they are deleted so the table holds only the live ones.
	tag, err := s.pool.Exec(ctx, pruneConsoleSessionsSQL, batch)
	if err != nil {
		return res, fmt.Errorf("prune console sessions: %w", err)
	}
	res.ConsoleSessions = int(tag.RowsAffected())
	res.More = res.More || res.ConsoleSessions >= batch
	if p.AuditRetention > 0 {
		tag, err := s.pool.Exec(ctx, pruneAuditSQL, p.AuditRetention.Seconds(), batch)
		if err != nil {
			return res, fmt.Errorf("prune audit events: %w", err)
		}
		res.AuditEvents = int(tag.RowsAffected())
		res.More = res.More || res.AuditEvents >= batch
	}
	return res, nil
}
