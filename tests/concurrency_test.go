package tests

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestManyWorkersOnTwoReplicasCompleteEveryTaskExactlyOnce runs 20 workers
// against two gateway processes sharing one database and 2,000 tasks.
func TestManyWorkersOnTwoReplicasCompleteEveryTaskExactlyOnce(t *testing.T) {
	t.Parallel()
	manyWorkersOnTwoReplicas(t, 2000)
}

// TestAcquisitionPerPollCompletesEveryTaskExactlyOnce: the same with every
// poll in a transaction of its own (-lease-group-commit=false), each walking
// the queue past the others' locked rows.
func TestAcquisitionPerPollCompletesEveryTaskExactlyOnce(t *testing.T) {
	t.Parallel()
	manyWorkersOnTwoReplicas(t, 600, "-lease-group-commit=false")
}

func manyWorkersOnTwoReplicas(t *testing.T, tasks int, gatewayArgs ...string) {
	g, procs := harness.StartProcesses(t, 2, gatewayArgs...)
	org := g.NewOrganization(t, "acme")
	const workers = 20

	var (
		runs      sync.Map // task id → *atomic.Int32
		completed atomic.Int32
	)
	for i := range workers {
		w := g.NewWorker(t, "w"+uuid.NewString()[:8], 4, org)
		replica := procs[i%len(procs)]
		w.Runtime(t, 4, func(_ context.Context, lt *workerclient.LeasedTask) error {
			n, _ := runs.LoadOrStore(lt.ID, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			completed.Add(1)
			return nil
		}, func(c *workerclient.Config) { c.GatewayURL = replica.URL; c.WaitSeconds = 2 })
	}

	// Producers create the tasks through both replicas while workers run.
	var wg sync.WaitGroup
	var created sync.Map
	for p := range 8 {
		wg.Go(func() {
			for i := p; i < tasks; i += 8 {
				created.Store(g.CreateTask(t, org, harness.TaskSpec{}), true)
			}
		})
	}
	wg.Wait()
	harness.WaitFor(t, 3*time.Minute, "every task completed", func() bool {
		var n int
		require.NoError(t, g.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM worker_tasks WHERE state = 'completed'`).Scan(&n))
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

	var succeeded, other, doubleActive int
	require.NoError(t, g.Pool.QueryRow(context.Background(), `
		SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status <> 'succeeded')
		FROM worker_task_attempts`).Scan(&succeeded, &other))
	require.Equal(t, tasks, succeeded, "exactly one successful attempt per task")
	require.Zero(t, other, "no attempt was lost, expired or superseded")
	// No two attempts of one task ever overlapped in time.
	require.NoError(t, g.Pool.QueryRow(context.Background(), `
		SELECT count(*) FROM worker_task_attempts a JOIN worker_task_attempts b
			ON a.task_id = b.task_id AND a.id < b.id
			AND tstzrange(a.started_at, a.finished_at) && tstzrange(b.started_at, b.finished_at)`).Scan(&doubleActive))
	require.Zero(t, doubleActive)
}

// TestWakeUpsCrossReplicas: a poll waiting on one replica is woken by a task
// created through the other, through PostgreSQL's NOTIFY.
func TestWakeUpsCrossReplicas(t *testing.T) {
	t.Parallel()
	g, procs := harness.StartProcesses(t, 2)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	onB, err := apiclient.NewClientWithResponses(procs[1].URL, apiclient.WithHTTPClient(w.HTTP))
	require.NoError(t, err)

	got := make(chan []apiclient.Lease, 1)
	go func() {
		n, wait := 1, 25
		res, err := onB.AcquireLeasesWithResponse(context.Background(), nil, apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait})
		if err != nil || res.StatusCode() != http.StatusOK {
			got <- nil
			return
		}
		got <- res.JSON200.Leases
	}()
	harness.WaitFor(t, 10*time.Second, "the poll on replica B", func() bool { return waitingPolls(t, g) == 1 })
	// g.Control talks to replica A.
	task := g.CreateTask(t, org, harness.TaskSpec{})
	leases := <-got
	require.Len(t, leases, 1, "replica B's poll was woken by replica A's task before its 25 s wait ended")
	require.Equal(t, task, leases[0].Task.Id)
}
