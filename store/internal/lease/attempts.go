package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/fencing"
)

// AttemptRef names an attempt as its worker does: the attempt, the worker
// (from its certificate) and the lease token (from the Lease-Token header).
type AttemptRef struct {
	WorkerID   uuid.UUID
	AttemptID  uuid.UUID
	LeaseToken string
}

// LeaseState is what a worker should do with a lease.
type LeaseState string

const (
	LeaseActive          LeaseState = "active"
	LeaseCancelRequested LeaseState = "cancel_requested"
	LeaseLost            LeaseState = "lost"
)

// LeaseStatus is a lease's state as of the statement that renewed or read it.
type LeaseStatus struct {
	AttemptID      uuid.UUID
	State          LeaseState
	LeaseExpiresAt time.Time
	LeaseTTL       time.Duration
	LeaseDuration  time.Duration
}

// renewSQL renews leases named by (worker, id, token hash) triples and answers
// for every triple in the order given; triples it could not renew come back
// without a state (lost). Renewal is start as well: a leased attempt
// becomes running and its task too.
var renewSQL = `
WITH req AS (
	SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::bytea[]) WITH ORDINALITY AS r(worker, id, token_hash, ord)
), renewed AS (
	UPDATE worker_task_attempts a SET
		lease_expires_at = least(now() + make_interval(secs => t.lease_duration_seconds), a.deadline_at),
		status = '` + string(core.AttemptRunning) + `',
		running_at = coalesce(a.running_at, now()),
		updated_at = now()
	FROM req r, worker_tasks t
	WHERE ` + fencing.LeaseHeld("a", "r.id", "r.worker", "r.token_hash") + `
		AND t.id = a.task_id
	RETURNING a.id, a.task_id, a.lease_expires_at, t.state, t.lease_duration_seconds
), started AS (
	UPDATE worker_tasks t SET state = '` + string(core.TaskTransitions[core.EventStart].To) + `', updated_at = now()
	FROM renewed n
	WHERE t.id = n.task_id AND t.state IN (` + core.FromStates(core.EventStart) + `)
)
SELECT r.id, n.state, n.lease_expires_at,
	coalesce(extract(epoch FROM n.lease_expires_at - now())::float8, 0),
	coalesce(n.lease_duration_seconds, 0)
FROM req r LEFT JOIN renewed n ON n.id = r.id
ORDER BY r.ord`

func renew(ctx context.Context, ex core.Executor, refs []AttemptRef) ([]LeaseStatus, error) {
	workers := make([]uuid.UUID, len(refs))
	ids := make([]uuid.UUID, len(refs))
	for i, r := range refs {
		workers[i], ids[i] = r.WorkerID, r.AttemptID
	}
	rows, err := ex.Query(ctx, renewSQL, workers, ids, TokenHashes(refs))
	if err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	defer rows.Close()
	out := make([]LeaseStatus, 0, len(refs))
	for rows.Next() {
		var (
			st        LeaseStatus
			taskState *string
			expires   *time.Time
			ttl       float64
			leaseSecs int
		)
		if err := rows.Scan(&st.AttemptID, &taskState, &expires, &ttl, &leaseSecs); err != nil {
			return nil, err
		}
		switch {
		case taskState == nil:
			st.State = LeaseLost
		case core.TaskState(*taskState) == core.TaskCancelling:
			st.State = LeaseCancelRequested
		default:
			st.State = LeaseActive
		}
		if expires != nil {
			st.LeaseExpiresAt = *expires
		}
		st.LeaseTTL = core.Seconds(ttl)
		st.LeaseDuration = time.Duration(leaseSecs) * time.Second
		out = append(out, st)
	}
	return out, rows.Err()
}

// HeartbeatAttempt renews one lease (and starts the attempt if it was only
// leased). A lease no longer held is ErrLeaseLost; an attempt that is not this
// worker's is ErrNotFound.
func (s *Engine) HeartbeatAttempt(ctx context.Context, ref AttemptRef) (LeaseStatus, error) {
	var st LeaseStatus
	err := s.inTx(ctx, "heartbeat attempt", func(tx pgx.Tx) error {
		// A worker that only heartbeats (busy, not polling) is still online.
		// Throttled, so most renewals do not write the workers row; first,
		// because the workers row comes before attempts in the lock order.
		if _, err := tx.Exec(ctx, `UPDATE workers SET last_seen_at = now()
			WHERE id = $1 AND (last_seen_at IS NULL OR last_seen_at < now() - interval '2 seconds')`, ref.WorkerID); err != nil {
			return fmt.Errorf("touch worker: %w", err)
		}
		statuses, err := renew(ctx, tx, []AttemptRef{ref})
		if err != nil {
			return err
		}
		st = statuses[0]
		if st.State == LeaseLost {
			return AttemptMissOrLost(ctx, tx, ref)
		}
		return nil
	})
	if err != nil {
		return LeaseStatus{}, err
	}
	return st, nil
}

// StartAttempt moves a leased attempt to running, renewing its lease as a
// heartbeat does. Repeating it is harmless.
func (s *Engine) StartAttempt(ctx context.Context, ref AttemptRef) (LeaseStatus, error) {
	return s.HeartbeatAttempt(ctx, ref)
}

// RenewParams renews all listed leases of one worker in one statement.
type RenewParams struct {
	WorkerID        uuid.UUID
	Leases          []AttemptRef
	Capabilities    []byte
	SoftwareVersion *string
}

// RenewLeases renews every listed lease of a worker in one transaction,
// touches last_seen_at and persists a capability advertisement. Leases it
// cannot renew (expired, ended, not this worker's) come back as lost.
func (s *Engine) RenewLeases(ctx context.Context, p RenewParams) ([]LeaseStatus, error) {
	out := s.RenewLeasesMany(ctx, []RenewParams{p})
	return out[0].Statuses, out[0].Err
}

// touchWorkerSQL locks worker $1 (so one worker's polls and heartbeats take
// turns) and records what its request advertised: $2 capabilities, $3
// software version, $4 protocol version (NULL: not sent). It rewrites the
// row only when something changed or last_seen_at is more than a second
// old — "online" is judged over tens of seconds, and a poll or heartbeat
// that writes nothing leaves no dead row version and no index entry behind.
// It returns the worker's type, capabilities (as advertised now), capacity,
// enabled and revoked flags, whether the capabilities changed, and its
// labels.
const touchWorkerSQL = `
	WITH before AS (
		SELECT id, worker_type, capabilities, max_concurrent_tasks, enabled, revoked_at, labels,
			last_seen_at, software_version, protocol_version,
			$2::jsonb IS NOT NULL AND $2::jsonb <> capabilities AS caps_changed
		FROM workers WHERE id = $1 FOR NO KEY UPDATE
	), touched AS (
		UPDATE workers w SET
			last_seen_at = now(),
			capabilities = coalesce($2::jsonb, w.capabilities),
			software_version = coalesce($3, w.software_version),
			protocol_version = coalesce($4, w.protocol_version),
			updated_at = CASE WHEN b.caps_changed THEN now() ELSE w.updated_at END
		FROM before b
		-- A revoked worker is refused; its row stays as it was revoked.
		WHERE w.id = b.id AND b.revoked_at IS NULL
			AND (b.last_seen_at IS NULL OR b.last_seen_at < now() - interval '1 second'
			OR b.caps_changed OR $3 <> b.software_version OR $4 <> b.protocol_version)
	)
	SELECT worker_type, coalesce($2::jsonb, capabilities), max_concurrent_tasks, enabled, revoked_at IS NOT NULL, caps_changed,
		labels
	FROM before`

// AttemptMissOrLost runs after a fenced write matched nothing, and only
// decides which error to return: the attempt is not this worker's (or does
// not exist) → ErrNotFound, so no hint of its existence leaks; otherwise the
// lease is lost.
func AttemptMissOrLost(ctx context.Context, ex core.Executor, ref AttemptRef) error {
	var exists bool
	err := ex.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM worker_task_attempts WHERE id = $1 AND worker_id = $2)`,
		ref.AttemptID, ref.WorkerID).Scan(&exists)
	if err != nil {
		return fmt.Errorf("classify miss: %w", err)
	}
	if !exists {
		return core.ErrNotFound
	}
	return core.ErrLeaseLost
}
