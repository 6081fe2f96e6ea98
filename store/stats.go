package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// Stats is the operators' overview (GET /v1/stats, the console's overview,
// `gateway ctl stats`): the queue by organization and state, the workers
// online against their capacity, the lease rate and the recent failures.
type Stats struct {
	Queue []QueueDepth
	// WorkersOnline are the enabled, unrevoked workers seen within the
	// online window; WorkersTotal every unrevoked one. Capacity is the sum
	// of the online workers' max_concurrent_tasks; ActiveAttempts the leases
	// held now (by any worker, online or not).
	WorkersOnline  int64
	WorkersTotal   int64
	Capacity       int64
	ActiveAttempts int64
	// LeaseWindow is the window leases are counted over; Leases how many
	// were granted in it.
	LeaseWindow time.Duration
	Leases      int64
	// FailureWindow is the window failures are counted over; Failures how
	// many attempts leased in it failed or expired; RecentFailures the
	// latest few of them.
	FailureWindow  time.Duration
	Failures       int64
	RecentFailures []RecentFailure
}

// QueueDepth is how many unfinished tasks of an organization are in a state.
type QueueDepth struct {
	OrganizationID uuid.UUID
	State          TaskState
	Count          int64
}

// RecentFailure is one failed or expired attempt.
type RecentFailure struct {
	TaskID         uuid.UUID
	AttemptID      uuid.UUID
	OrganizationID uuid.UUID
	TaskType       string
	AttemptNumber  int
	Status         string
	ErrorCode      string
	ErrorMessage   string
	FinishedAt     *time.Time
}

// StatsParams are the windows of Stats.
type StatsParams struct {
	OnlineWindow  time.Duration
	LeaseWindow   time.Duration
	FailureWindow time.Duration
	// RecentFailures bounds the failures listed.
	RecentFailures int
}

// v7Since is the smallest time-ordered (version 7) id made at now() minus $n
// seconds: attempts leased since then have ids at or above it, so a recent
// window is a range of the attempts' primary key. Attempts leased before
// 000014 have random ids; the started_at filter beside it leaves them out.
func v7Since(param string) string {
	return `(lpad(to_hex(floor(extract(epoch FROM now() - make_interval(secs => ` + param + `::float8)) * 1000)::bigint), 12, '0')
		|| '70008000000000000000')::uuid`
}

// Stats reads the overview for a scope: an organization's caller sees its
// organization's queue, attempts and failures and the workers it may see.
// Every part is read from a small table or an index range: the queue of
// leasable tasks and the live attempts (each joined to its task for the
// state), the workers, and the attempts leased within the windows (their
// time-ordered ids).
func (s *Store) Stats(ctx context.Context, tenant Tenant, p StatsParams) (Stats, error) {
	st := Stats{LeaseWindow: p.LeaseWindow, FailureWindow: p.FailureWindow, Queue: []QueueDepth{}, RecentFailures: []RecentFailure{}}
	rows, err := s.pool.Query(ctx, `
		SELECT t.organization_id, t.state, count(*)
		FROM worker_task_queue q JOIN worker_tasks t ON t.id = q.task_id
		WHERE `+core.InTenant("q.organization_id", "$1")+`
		GROUP BY 1, 2
		UNION ALL
		SELECT t.organization_id, t.state, count(*)
		FROM worker_task_attempts a JOIN worker_tasks t ON t.id = a.task_id
		WHERE a.status IN ('leased', 'running') AND `+core.InTenant("a.organization_id", "$1")+`
		GROUP BY 1, 2
		ORDER BY 1, 2`, tenant.Arg())
	if err != nil {
		return Stats{}, fmt.Errorf("stats: queue: %w", err)
	}
	for rows.Next() {
		var d QueueDepth
		if err := rows.Scan(&d.OrganizationID, &d.State, &d.Count); err != nil {
			rows.Close()
			return Stats{}, fmt.Errorf("stats: queue: %w", err)
		}
		// A task's state may be read between the two parts (a lease in
		// between): merge, never list a pair twice.
		if n := len(st.Queue); n > 0 && st.Queue[n-1].OrganizationID == d.OrganizationID && st.Queue[n-1].State == d.State {
			st.Queue[n-1].Count += d.Count
			continue
		}
		st.Queue = append(st.Queue, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Stats{}, fmt.Errorf("stats: queue: %w", err)
	}

	err = s.pool.QueryRow(ctx, `
		WITH visible AS (
			SELECT w.max_concurrent_tasks,
				w.enabled AND coalesce(w.last_seen_at > now() - make_interval(secs => $1::float8), false) AS online
			FROM workers w
			WHERE w.revoked_at IS NULL AND `+scopeSeesWorker+`)
		SELECT count(*) FILTER (WHERE online), count(*), coalesce(sum(max_concurrent_tasks) FILTER (WHERE online), 0),
			(SELECT count(*) FROM worker_task_attempts a WHERE a.status IN ('leased', 'running') AND `+core.InTenant("a.organization_id", "$2")+`),
			(SELECT count(*) FROM worker_task_attempts a
				WHERE a.id >= `+v7Since("$3")+` AND a.started_at > now() - make_interval(secs => $3::float8)
					AND `+core.InTenant("a.organization_id", "$2")+`)
		FROM visible`,
		p.OnlineWindow.Seconds(), tenant.Arg(), p.LeaseWindow.Seconds()).
		Scan(&st.WorkersOnline, &st.WorkersTotal, &st.Capacity, &st.ActiveAttempts, &st.Leases)
	if err != nil {
		return Stats{}, fmt.Errorf("stats: workers and leases: %w", err)
	}

	rows, err = s.pool.Query(ctx, `
		SELECT a.task_id, a.id, a.organization_id, t.task_type, a.attempt_number, a.status, a.error_code, a.error_message,
			a.finished_at, count(*) OVER ()
		FROM worker_task_attempts a JOIN worker_tasks t ON t.id = a.task_id
		WHERE a.id >= `+v7Since("$2")+` AND a.started_at > now() - make_interval(secs => $2::float8)
			AND a.status IN ('failed', 'expired') AND `+core.InTenant("a.organization_id", "$1")+`
		ORDER BY a.finished_at DESC NULLS LAST, a.id DESC
		LIMIT $3`,
		tenant.Arg(), p.FailureWindow.Seconds(), max(p.RecentFailures, 1))
	if err != nil {
		return Stats{}, fmt.Errorf("stats: failures: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var f RecentFailure
		if err := rows.Scan(&f.TaskID, &f.AttemptID, &f.OrganizationID, &f.TaskType, &f.AttemptNumber, &f.Status,
			&f.ErrorCode, &f.ErrorMessage, &f.FinishedAt, &st.Failures); err != nil {
			return Stats{}, fmt.Errorf("stats: failures: %w", err)
		}
		if len(st.RecentFailures) < p.RecentFailures {
			st.RecentFailures = append(st.RecentFailures, f)
		}
	}
	if err := rows.Err(); err != nil {
		return Stats{}, fmt.Errorf("stats: failures: %w", err)
	}
	return st, nil
}
