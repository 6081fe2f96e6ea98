package operations

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/server/services/pruner"
	"github.com/worker-gateway/gateway/tests/harness"
)

// TestPrunerPrunesOnlyOldTerminalTasks: the gateway's pruner deletes what
// retention no longer keeps; an old finished task goes, an old pending one
// and a recently finished one stay.
func TestPrunerPrunesOnlyOldTerminalTasks(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) {
		c.PruneInterval = time.Hour // it prunes at start, then when kicked
		c.TaskRetention = time.Hour
	}})
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 2, org)
	old := g.CreateTask(t, org, harness.TaskSpec{})
	recent := g.CreateTask(t, org, harness.TaskSpec{})
	for _, l := range lease(t, w, 2, 0) {
		completeAs(t, w, l, "succeeded", nil)
	}
	pending := g.CreateTask(t, org, harness.TaskSpec{})
	_, err := g.Pool.Exec(context.Background(), `UPDATE worker_tasks SET completed_at = now() - interval '2 hours',
		updated_at = now() - interval '2 hours', created_at = now() - interval '3 hours' WHERE id = ANY($1)`, []any{old, pending})
	require.NoError(t, err)

	require.True(t, g.Server.Kick(pruner.Name))
	harness.WaitFor(t, 20*time.Second, "the old finished task pruned", func() bool {
		var n int
		require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_tasks WHERE id = $1`, old).Scan(&n))
		if n > 0 {
			g.Server.Kick(pruner.Name)
		}
		return n == 0
	})
	var attempts int
	require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_task_attempts WHERE task_id = $1`, old).Scan(&attempts))
	require.Zero(t, attempts, "its attempts went with it")
	require.Equal(t, "completed", string(g.Task(t, recent).State))
	require.Equal(t, "pending", string(g.Task(t, pending).State))
}
