package netfaults

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/faults"
)

// TestLatencyBeyondLease slows a worker's path to the gateway past its
// lease duration: everything it sends arrives after its leases ended. Its
// heartbeats come back lost, its result batches and completions are refused
// with 409 lease-lost, and a healthy worker takes the tasks over and does
// each exactly once.
func TestLatencyBeyondLease(t *testing.T) {
	g, w := startWorkload(t)
	px := newToxicProxy(t, g.URL)
	n := scaled(4, 12)
	w.CreateTasks(n, faults.LoadCapabilities())
	late := w.RawClient("late", faults.Plan{MaxTasks: n, WaitSeconds: 1}, at(px.URL))
	leases := leaseAll(t, late, n)

	// Every byte now reaches the gateway this long after it was sent,
	// later than any of these leases can live.
	delay := (leaseSeconds + 3) * time.Second
	px.add(t, "slow", "latency", "upstream", map[string]any{"latency": delay.Milliseconds()})
	healthy := w.StartRuntime(runtime("healthy", 2, via(t, g.URL), 0))

	ctx := context.Background()
	sent, from := time.Now(), len(w.History().Calls())
	var wg sync.WaitGroup
	for _, l := range leases {
		wg.Go(func() { late.Heartbeat(ctx, l) })
		wg.Go(func() { late.SendBatch(ctx, l, 1) })
		wg.Go(func() { late.Complete(ctx, l, faults.Succeeded) })
	}
	wg.Wait()
	t.Logf("late writes answered %s after they were sent", time.Since(sent).Round(time.Millisecond))
	refused := faults.RequireFenced(t, w.History().Calls()[from:], late.ID())
	require.Equal(t, 3*n, refused, "every late heartbeat, batch and completion refused")

	px.remove(t, "slow")
	waitCompleted(t, g, n)
	var takenOver int
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM worker_task_attempts
		WHERE status = 'succeeded' AND worker_id = $1`, healthy).Scan(&takenOver))
	require.Equal(t, n, takenOver, "the healthy worker did every task")
	finish(t, w, fmt.Sprintf("late_writes_refused=%d", refused), faults.Fault{Kind: "toxics", Count: px.added})
}
