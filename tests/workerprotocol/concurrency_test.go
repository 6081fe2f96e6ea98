package workerprotocol

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestManyWorkersOnTwoReplicasCompleteEveryTaskExactlyOnce runs workers
// against two gateway processes sharing one database: 8 workers and 200
// tasks in `make test`, 20 workers and 1,000 tasks with FAULTS_LONG=1
// (`make faults`).
func TestManyWorkersOnTwoReplicasCompleteEveryTaskExactlyOnce(t *testing.T) {
	t.Parallel()
	if harness.Long() {
		manyWorkersOnTwoReplicas(t, 20, 1000)
		return
	}
	manyWorkersOnTwoReplicas(t, 8, 200)
}

// TestAcquisitionPerPollCompletesEveryTaskExactlyOnce: the same with every
// poll in a transaction of its own (-lease-group-commit=false), each walking
// the queue past the others' locked rows: 8 workers and 150 tasks, 20
// workers and 600 tasks with FAULTS_LONG=1.
func TestAcquisitionPerPollCompletesEveryTaskExactlyOnce(t *testing.T) {
	t.Parallel()
	if harness.Long() {
		manyWorkersOnTwoReplicas(t, 20, 600, "-lease-group-commit=false")
		return
	}
	manyWorkersOnTwoReplicas(t, 8, 150, "-lease-group-commit=false")
}

func manyWorkersOnTwoReplicas(t *testing.T, workers, tasks int, gatewayArgs ...string) {
	g, procs := harness.StartProcesses(t, 2, gatewayArgs...)
	harness.RunEveryTaskOnce(t, g, procs, g.NewOrganization(t, "acme"), workers, tasks)
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

	got := harness.LeaseAsync(onB, apiclient.LeaseRequest{MaxTasks: harness.Ptr(1), WaitSeconds: harness.Ptr(25)})
	harness.WaitFor(t, 10*time.Second, "the poll on replica B", func() bool { return waitingPolls(t, g) == 1 })
	// g.Control talks to replica A.
	task := g.CreateTask(t, org, harness.TaskSpec{})
	leases := <-got
	require.Len(t, leases, 1, "replica B's poll was woken by replica A's task before its 25 s wait ended")
	require.Equal(t, task, leases[0].Task.Id)
}
