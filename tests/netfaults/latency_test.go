package netfaults

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/worker-gateway/gateway/workerclient"
)

// TestLatencyBeyondLease slows a worker's path to the gateway past its
// lease duration: everything it sends arrives after its leases ended. Its
// heartbeats come back lost, its result batches and completions are refused
// with 409 lease-lost, and a healthy worker takes the tasks over and does
// each exactly once.
func TestLatencyBeyondLease(t *testing.T) {
	e := newNetEnv(t)
	px := newToxicProxy(t, e.g.URL)
	caps := map[string]any{"load": true}
	n := scaled(4, 12)
	_, hosts := createTasks(t, e.g, e.org, "late", n, caps)
	_, late := e.rawClient(t, "late", n, px.URL, caps)
	leases := leaseAll(t, late, n)

	// Every byte now reaches the gateway this long after it was sent,
	// later than any of these leases can live.
	delay := (leaseSeconds + 3) * time.Second
	px.add(t, "slow", "latency", "upstream", map[string]any{"latency": delay.Milliseconds()})
	healthy := e.g.NewWorker(t, "healthy", 2, e.org)
	startRuntime(t, healthy, e.g.URL, e.rec, 2, caps, emitHandler(0))

	ctx := context.Background()
	sent := time.Now()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		refusals = map[string]answer{}
		states   []workerclient.LeaseStatus
		hbAnswer answer
	)
	wg.Go(func() { states, hbAnswer = late.heartbeat(ctx, leases...) })
	for _, l := range leases {
		wg.Go(func() {
			a := late.sendResults(ctx, l, 1, hostsOf(l.Task.Payload))
			mu.Lock()
			refusals["results "+l.AttemptId.String()] = a
			mu.Unlock()
		})
		wg.Go(func() {
			a := late.complete(ctx, l, 0)
			mu.Lock()
			refusals["complete "+l.AttemptId.String()] = a
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("late writes answered %s after they were sent", time.Since(sent).Round(time.Millisecond))
	require.NoError(t, hbAnswer.err)
	require.Len(t, states, n)
	for _, st := range states {
		require.Equal(t, workerclient.LeaseState("lost"), st.State, "a heartbeat arriving after the lease ended renews nothing")
	}
	for what, a := range refusals {
		requireRefused(t, what, a)
	}

	px.remove(t, "slow")
	waitCompleted(t, e.g, e.org, n)
	var takenOver int
	require.NoError(t, e.g.Pool.QueryRow(ctx, `SELECT count(*) FROM worker_task_attempts
		WHERE organization_id = $1 AND status = 'succeeded' AND worker_id = $2`, e.org, healthy.ID).Scan(&takenOver))
	require.Equal(t, n, takenOver, "the healthy worker did every task")
	judgeRun(t, e.g.Pool, e.org, hosts, e.rec, px.added, fmt.Sprintf("late_writes_refused=%d", len(refusals)+len(states)), late)
}
