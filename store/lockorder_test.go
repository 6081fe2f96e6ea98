package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestHeartbeatLockOrder: UpdateWorker (disable with CancelActive) and
// RenewLeases lock the workers row first and the worker's attempts after it.
// A heartbeat must take them in the same order, or a heartbeat racing an
// operator's disable deadlocks (PostgreSQL then aborts one of them after
// deadlock_timeout and inTx runs it again: correct, but a stall of a second
// on both sides and a deadlock in the logs).
//
// The operator's side is a hand-run transaction doing what UpdateWorker does,
// so the interleaving is exact: it holds the workers row while the heartbeat
// runs, then updates the worker's attempts. It checks for deadlocks after
// 10 ms instead of 1 s, so that if there is one, it is the victim.
func TestHeartbeatLockOrder(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	createTask(t, s, b.org.ID, store.CreateTaskParams{})
	lease := acquireOne(t, s, b.worker.ID)
	// Seen long ago, so the heartbeat records that it saw the worker.
	exec(t, b.pool, `UPDATE workers SET last_seen_at = now() - interval '1 hour' WHERE id = $1`, b.worker.ID)
	ctx := withTimeout(t, 30*time.Second)

	op, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = op.Rollback(ctx) }()
	_, err = op.Exec(ctx, `SET LOCAL deadlock_timeout = '10ms'`)
	require.NoError(t, err)
	var opPID int
	require.NoError(t, op.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&opPID))
	_, err = op.Exec(ctx, `UPDATE workers SET enabled = false, updated_at = now() WHERE id = $1`, b.worker.ID)
	require.NoError(t, err)

	done := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := s.HeartbeatAttempt(ctx, refOf(b.worker.ID, lease))
		done <- err
	})
	t.Cleanup(wg.Wait)

	// Until the heartbeat waits behind the operator's transaction (or, if it
	// never touches the workers row, has already finished).
	var (
		heartbeatErr error
		finished     bool
	)
	for blocked := false; !blocked && !finished; {
		select {
		case heartbeatErr = <-done:
			finished = true
		default:
			require.NoError(t, b.pool.QueryRow(ctx,
				`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))`, opPID).Scan(&blocked))
		}
	}

	_, err = op.Exec(ctx, `UPDATE worker_task_attempts SET status = 'superseded', finished_at = now(), updated_at = now()
		WHERE worker_id = $1 AND status IN ('leased', 'running')`, b.worker.ID)
	require.NoError(t, err, "a waiting heartbeat must not hold the worker's attempts")
	require.NoError(t, op.Commit(ctx))

	if finished {
		require.NoError(t, heartbeatErr, "it renewed before the release")
		return
	}
	require.ErrorIs(t, <-done, store.ErrLeaseLost, "the heartbeat, let through after the release, finds its lease gone")
}
