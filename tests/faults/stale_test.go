package faults

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
)

// TestStaleWriterIsFenced stalls workers past their leases while the
// workload runs: a raw client that then sends what it had left, and a
// reference worker process stopped with SIGSTOP. Their tasks are taken over
// and completed by other workers; once resumed, nothing they send is
// accepted (a batch they had sent before is only replayed).
func TestStaleWriterIsFenced(t *testing.T) {
	sc := scaleOf()
	cl := startCluster(t, harness.Database{}, nil)
	w := newWorkload(t, cl)
	w.startRaw(sc.RawClients, Plan{MaxTasks: 2, WaitSeconds: 2, Batches: batches, FailRate: 0.1})
	w.startRuntimes(1)
	rounds := 1
	if sc.Long {
		rounds = 6
	}
	for r := range rounds {
		w.wave(sc)
		staleRawClient(t, w, r+1)
		staleProcess(t, w, r+1)
	}
	w.drain(sc.Drain)
	Summarize(t, Check(t, w), cl.faults()...)
}

// staleRawClient leases a task, sends a batch, goes silent past its lease
// and, once another worker completed the task, sends a new batch, the old
// batch again, a heartbeat and its completion.
func staleRawClient(t *testing.T, w *Workload, round int) {
	t.Helper()
	capability := fmt.Sprintf("stale-raw-%d", round)
	task := w.CreateTasks(1, map[string]any{capability: true})[0]
	c := w.RawClient(capability, Plan{MaxTasks: 1, WaitSeconds: 5}, w.cl.pick)
	c.Advertise(map[string]any{capability: true})
	leases := c.Poll(context.Background())
	require.Len(t, leases, 1)
	l := leases[0]
	require.True(t, c.Heartbeat(context.Background(), l))
	require.True(t, c.SendBatch(context.Background(), l, 1))

	w.caps.add(capability, true) // the stall: other workers may take the task once the lease expires
	waitCompletedByOther(t, w, task, l.AttemptID)
	resumed := len(w.h.Calls())

	ctx := context.Background()
	c.SendBatch(ctx, l, 2)
	c.SendBatch(ctx, l, 1)
	c.Heartbeat(ctx, l)
	c.Complete(ctx, l, Succeeded)
	require.Equal(t, 3, RequireFenced(t, w.h.Calls()[resumed:], c.id, l.BatchKey(1)),
		"the new batch, the heartbeat and the completion are refused, the batch sent in time only replayed")
	t.Logf("stale raw client: %d calls after its lease ended, none accepted", len(CallsOf(w.h.Calls()[resumed:], c.id)))
}

// staleProcess runs the reference worker on a long task, stops it with
// SIGSTOP past its lease, lets another worker complete the task and resumes
// it with SIGCONT: whatever it sends about its attempt is refused. The task
// is in an organization of its own, which the raw clients are assigned to
// only once the worker is stopped.
func staleProcess(t *testing.T, w *Workload, round int) {
	t.Helper()
	org := w.g.NewOrganization(t, fmt.Sprintf("stalled-%d", round))
	w.caps.add("plugins", []string{"sleep"})
	task := w.createTask(org, map[string]any{"plugins": []string{"sleep"}}, `{"plugin": "sleep", "input": {"seconds": 120}}`)
	worker := w.g.NewWorker(t, fmt.Sprintf("stale-process-%d", round), 1, org)
	proxy, client := w.startProxy(worker.ID.String(), worker.Cert)
	p := worker.Process(t, proxy, "-slots", "1", "-wait", "2")
	harness.WaitFor(t, 30*time.Second, "the worker process to run its task", func() bool {
		return attemptOf(t, w, task, worker.ID) != uuid.Nil && stateOf(t, w, task) == "running"
	})
	attempt := attemptOf(t, w, task, worker.ID)

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGSTOP))
	w.assignRaw(org)
	waitCompletedByOther(t, w, task, attempt)
	resumed := len(w.h.Calls())
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGCONT))
	harness.WaitFor(t, 30*time.Second, "a call of the resumed worker", func() bool {
		return len(CallsOf(w.h.Calls()[resumed:], client)) > 0
	})
	require.NoError(t, p.Stop(syscall.SIGTERM))

	after := CallsOf(w.h.Calls()[resumed:], client)
	for _, call := range after {
		for _, it := range call.Items {
			if it.Attempt == attempt {
				require.NotContains(t, []Result{ResOK, ResReplayed}, it.Result, "%s of the stale attempt after SIGCONT", call.Op)
			}
		}
	}
	t.Logf("stale worker process: %d calls after SIGCONT %v, none accepted for its attempt", len(after), ops(after))
}

// waitCompletedByOther waits until a task completed with another attempt
// than stale.
func waitCompletedByOther(t *testing.T, w *Workload, task, stale uuid.UUID) {
	t.Helper()
	harness.WaitFor(t, 60*time.Second, "another worker to complete the stalled task", func() bool {
		var n int
		require.NoError(t, w.g.Pool.QueryRow(context.Background(), `
			SELECT count(*) FROM worker_task_attempts a JOIN worker_tasks t ON t.id = a.task_id
			WHERE a.task_id = $1 AND a.id <> $2 AND a.status = 'succeeded' AND t.state = 'completed'`, task, stale).Scan(&n))
		return n == 1
	})
}

// attemptOf is the worker's attempt of a task, or uuid.Nil.
func attemptOf(t *testing.T, w *Workload, task, worker uuid.UUID) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	err := w.g.Pool.QueryRow(context.Background(),
		`SELECT coalesce(max(id::text), '00000000-0000-0000-0000-000000000000')::uuid FROM worker_task_attempts WHERE task_id = $1 AND worker_id = $2`,
		task, worker).Scan(&id)
	require.NoError(t, err)
	return id
}

func stateOf(t *testing.T, w *Workload, task uuid.UUID) string {
	t.Helper()
	return string(w.g.Task(t, task).State)
}

// ops counts calls by operation and status, for the log.
func ops(calls []Call) map[string]int {
	out := map[string]int{}
	for _, c := range calls {
		out[c.Op+" "+strconv.Itoa(c.Status)+" "+c.Code]++
	}
	return out
}
