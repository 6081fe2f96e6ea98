package harness

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/workerclient"
)

// RunEveryTaskOnce is the exactly-once check the multi-replica tests share:
// workers reference-worker runtimes of 4 slots each, spread round-robin
// over the replicas, while 8 producers create tasks (no-op) for org through
// the gateway; it waits until every task completed and requires each to
// have run once, with one successful attempt, no other attempt, and no two
// attempts of a task overlapping in time. It returns the runtimes' stops
// (the runtimes also stop when the test ends).
func RunEveryTaskOnce(t *testing.T, g *Gateway, procs []*Process, org uuid.UUID, workers, tasks int) (stops []func()) {
	t.Helper()
	var runs sync.Map // task id → *atomic.Int32
	for i := range workers {
		w := g.NewWorker(t, "w"+uuid.NewString()[:8], 4, org)
		replica := procs[i%len(procs)]
		stops = append(stops, w.Runtime(t, 4, func(_ context.Context, lt *workerclient.LeasedTask) error {
			n, _ := runs.LoadOrStore(lt.ID, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			return nil
		}, func(c *workerclient.Config) { c.GatewayURL = replica.URL; c.WaitSeconds = 2 }))
	}

	var wg sync.WaitGroup
	var created sync.Map
	for p := range 8 {
		wg.Go(func() {
			for i := p; i < tasks; i += 8 {
				created.Store(g.CreateTask(t, org, TaskSpec{}), true)
			}
		})
	}
	wg.Wait()
	WaitFor(t, 3*time.Minute, "every task completed", func() bool {
		var n int
		require.NoError(t, g.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM worker_tasks WHERE organization_id = $1 AND state = 'completed'`, org).Scan(&n))
		return n == tasks
	})

	var createdCount int
	created.Range(func(id, _ any) bool {
		createdCount++
		n, ok := runs.Load(id)
		require.True(t, ok, "task %s never ran", id)
		require.Equal(t, int32(1), n.(*atomic.Int32).Load(), "task %s ran more than once", id)
		return true
	})
	require.Equal(t, tasks, createdCount)

	var succeeded, other, overlapping int
	require.NoError(t, g.Pool.QueryRow(context.Background(), `
		SELECT count(*) FILTER (WHERE a.status = 'succeeded'), count(*) FILTER (WHERE a.status <> 'succeeded')
		FROM worker_task_attempts a JOIN worker_tasks t ON t.id = a.task_id WHERE t.organization_id = $1`, org).
		Scan(&succeeded, &other))
	require.Equal(t, tasks, succeeded, "exactly one successful attempt per task")
	require.Zero(t, other, "no attempt was lost, expired or superseded")
	require.NoError(t, g.Pool.QueryRow(context.Background(), `
		SELECT count(*) FROM worker_task_attempts a JOIN worker_task_attempts b
			ON a.task_id = b.task_id AND a.id < b.id
			AND tstzrange(a.started_at, a.finished_at) && tstzrange(b.started_at, b.finished_at)`).Scan(&overlapping))
	require.Zero(t, overlapping, "no two attempts of one task overlapped in time")
	return stops
}
