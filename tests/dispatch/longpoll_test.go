package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

func TestIdlePollReturnsEmptyAfterItsWait(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	require.Empty(t, lease(t, w, 1, 1))
	require.Zero(t, g.Server.Hub().Waiting(), "the poll unregistered")
}

func TestTaskCreatedWhileWaitingIsDeliveredToTheWaitingPoll(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)

	// The poll waits up to 25 s; it can only return a lease if the
	// creation woke it, since nothing else would make it look again.
	got := harness.LeaseAsync(w.Client, apiclient.LeaseRequest{MaxTasks: harness.Ptr(1), WaitSeconds: harness.Ptr(25)})
	harness.WaitFor(t, 10*time.Second, "the poll to wait in the hub", func() bool { return g.Server.Hub().Waiting() == 1 })
	task := g.CreateTask(t, org, harness.TaskSpec{})
	leases := <-got
	require.Len(t, leases, 1)
	require.Equal(t, task, leases[0].Task.Id)
}

func TestWakeOnlyAsManyWaitersAsTasks(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	const pollers = 5
	var wg sync.WaitGroup
	results := make(chan int, pollers)
	// Every worker first, then every poll: each poll must still be waiting
	// when the last one starts, on a loaded machine too.
	workers := make([]*harness.Worker, pollers)
	for i := range workers {
		workers[i] = g.NewWorker(t, "w"+string(rune('a'+i)), 1, org)
	}
	for _, w := range workers {
		wg.Go(func() { results <- len(lease(t, w, 1, 10)) })
	}
	harness.WaitFor(t, 10*time.Second, "all polls waiting", func() bool { return g.Server.Hub().Waiting() == pollers })
	g.CreateTask(t, org, harness.TaskSpec{})
	harness.WaitFor(t, 10*time.Second, "one poll woken", func() bool { return g.Server.Hub().Waiting() == pollers-1 })
	wg.Wait()
	close(results)
	total := 0
	for n := range results {
		total += n
	}
	require.Equal(t, 1, total, "exactly one poll got the one task")
}

func TestAWokenPollThatCannotTakeTheTaskPassesItOn(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	plain := g.NewWorker(t, "plain", 1, org)
	gpu := g.NewWorker(t, "gpu", 1, org)
	caps := apiclient.Capabilities(`{"gpu": true}`)
	plainDone := make(chan struct{})
	// The plain worker registers first, so the hub wakes it first.
	go func() {
		defer close(plainDone)
		lease(t, plain, 1, 3)
	}()
	harness.WaitFor(t, 10*time.Second, "plain poll waiting", func() bool { return g.Server.Hub().Waiting() == 1 })
	gpuLeases := harness.LeaseAsync(gpu.Client, apiclient.LeaseRequest{MaxTasks: harness.Ptr(1), WaitSeconds: harness.Ptr(25), Capabilities: &caps})
	harness.WaitFor(t, 10*time.Second, "both polls waiting", func() bool { return g.Server.Hub().Waiting() == 2 })
	task := g.CreateTask(t, org, harness.TaskSpec{RequiredCapabilities: map[string]any{"gpu": true}})
	leases := <-gpuLeases
	require.Len(t, leases, 1, "the GPU worker got the task well before its 25 s wait ended")
	require.Equal(t, task, leases[0].Task.Id)
	<-plainDone
	require.GreaterOrEqual(t, scrape(t, g, g.AdminToken)["gateway_wakeups_passed_on_total"], 1.0)
}

// TestAWokenPollWhoseTaskWasTakenPassesNothingOn: a poll woken for a task
// another poll took first (on this replica or another) leases nothing and
// waits again without waking the next waiter: passing the notice on would
// wake poll after poll for a task that is gone.
func TestAWokenPollWhoseTaskWasTakenPassesNothingOn(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	const pollers = 3
	for i := range pollers {
		w := g.NewWorker(t, "w"+string(rune('a'+i)), 1, org)
		go func() {
			_, _ = w.Client.AcquireLeasesWithResponse(context.Background(), nil, apiclient.LeaseRequest{WaitSeconds: ptr(20)})
		}()
	}
	harness.WaitFor(t, 10*time.Second, "all polls waiting", func() bool { return g.Server.Hub().Waiting() == pollers })
	before := scrape(t, g, g.AdminToken)["gateway_lease_acquisition_seconds_count"]

	// The notice of a task that is already gone.
	g.Server.Hub().WakeOrganization(org, 1)
	harness.WaitFor(t, 10*time.Second, "the woken poll waiting again", func() bool {
		return g.Server.Hub().Waiting() == pollers && scrape(t, g, g.AdminToken)["gateway_lease_acquisition_seconds_count"] == before+1
	})
	// It registered again after deciding not to pass the notice on.
	m := scrape(t, g, g.AdminToken)
	require.Zero(t, m["gateway_wakeups_passed_on_total"])
	require.Equal(t, before+1, m["gateway_lease_acquisition_seconds_count"], "one woken poll looked; nobody else was woken")
}

func TestLeaseIdempotencyKeyReturnsTheSameLeases(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 5, org)
	for range 3 {
		g.CreateTask(t, org, harness.TaskSpec{})
	}
	key := "poll-1"
	poll := func() []apiclient.Lease {
		n, wait := 2, 0
		res, err := w.Client.AcquireLeasesWithResponse(context.Background(), &apiclient.AcquireLeasesParams{IdempotencyKey: &key},
			apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode())
		return res.JSON200.Leases
	}
	first := poll()
	require.Len(t, first, 2)
	second := poll()
	require.Len(t, second, 2)
	require.ElementsMatch(t, []any{first[0].AttemptId, first[1].AttemptId}, []any{second[0].AttemptId, second[1].AttemptId})
}

// TestSIGTERMAnswersEveryWaiterAtOnce runs a real gateway process with
// waiting polls and stops it: every poll is answered with an empty list and
// the process exits cleanly, long before the polls' 25 s waits would end.
func TestSIGTERMAnswersEveryWaiterAtOnce(t *testing.T) {
	t.Parallel()
	g, procs := harness.StartProcesses(t, 1)
	org := g.NewOrganization(t, "acme")
	const pollers = 6
	var wg sync.WaitGroup
	statuses := make(chan int, pollers)
	bodies := make(chan []byte, pollers)
	for i := range pollers {
		w := g.NewWorker(t, "w"+string(rune('a'+i)), 1, org)
		wg.Go(func() {
			body, _ := json.Marshal(map[string]any{"max_tasks": 1, "wait_seconds": 25})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, procs[0].URL+"/v1/leases", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			res, err := w.HTTP.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			defer res.Body.Close()
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(res.Body)
			statuses <- res.StatusCode
			bodies <- buf.Bytes()
		})
	}
	harness.WaitFor(t, 10*time.Second, "polls waiting", func() bool { return waitingPolls(t, g) == pollers })
	require.NoError(t, procs[0].Stop(syscall.SIGTERM), "clean exit")
	wg.Wait()
	close(statuses)
	close(bodies)
	for s := range statuses {
		require.Equal(t, http.StatusOK, s, "answered before the client's 20 s timeout")
	}
	for b := range bodies {
		require.JSONEq(t, `{"leases": []}`, string(b))
	}
}

// TestListenReconnectsAndCatchesUp kills the replica's LISTEN connection:
// the hub reconnects, wakes its waiters for a catch-up pass, and wake-ups
// work again afterwards.
func TestListenReconnectsAndCatchesUp(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 2, org)
	before := g.Server.ListenerConnects()

	got := make(chan []apiclient.Lease, 1)
	go func() { got <- lease(t, w, 1, 25) }()
	harness.WaitFor(t, 10*time.Second, "poll waiting", func() bool { return g.Server.Hub().Waiting() == 1 })

	// A task committed without a NOTIFY, as if it had been sent while the
	// replica was not listening: only a catch-up pass can deliver it.
	_, err := g.Pool.Exec(context.Background(), `WITH created AS (
		INSERT INTO worker_tasks (task_type, organization_id, payload)
		VALUES ('scanner_plugin', $1, '{"plugin": "echo"}') RETURNING *)
		`+store.EnqueueSQL("created"), org)
	require.NoError(t, err)
	var killed int
	require.NoError(t, g.Pool.QueryRow(context.Background(), `
		SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&killed))
	require.Equal(t, 1, killed)
	harness.WaitFor(t, 20*time.Second, "LISTEN reconnected", func() bool { return g.Server.ListenerConnects() > before })
	require.Len(t, <-got, 1, "the catch-up pass woke the waiting poll")

	// And NOTIFY wake-ups work on the new connection.
	go func() { got <- lease(t, w, 1, 25) }()
	harness.WaitFor(t, 10*time.Second, "poll waiting again", func() bool { return g.Server.Hub().Waiting() == 1 })
	g.CreateTask(t, org, harness.TaskSpec{})
	require.Len(t, <-got, 1)
}
