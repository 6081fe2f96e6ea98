package netfaults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/faults"
	"github.com/worker-gateway/gateway/tests/harness"
)

// TestPartitionPastLeaseThenHeal cuts two workers off the gateway (every
// byte dropped, connections left open) while they hold tasks: a raw client
// that already reported a result batch, and a Go runtime in the middle of
// its tasks. The partition lasts until their leases have expired; a healthy
// worker takes the tasks over. Once healed, every late write of the cut-off
// raw client is refused — only the replay of a batch stored before the cut
// is answered, as a replay — and every task is done exactly once.
func TestPartitionPastLeaseThenHeal(t *testing.T) {
	g, w := startWorkload(t)
	px := newToxicProxy(t, g.URL)
	n := scaled(20, 80)
	w.CreateTasks(n, faults.LoadCapabilities())
	held := scaled(2, 6)
	raw := w.RawClient("cut-raw", faults.Plan{MaxTasks: held, WaitSeconds: 1}, at(px.URL))
	leases := leaseAll(t, raw, held)
	ctx := context.Background()
	for _, l := range leases {
		require.True(t, raw.SendBatch(ctx, l, 1), "batch 1 of %s before the cut", l.AttemptID)
	}
	cut := w.StartRuntime(runtime("cut-runtime", 3, via(t, px.URL), 3*time.Second))
	harness.WaitFor(t, 20*time.Second, "the runtime behind the proxy holding tasks", func() bool {
		return activeAttempts(t, g, cut) > 0
	})

	px.partition(t)
	cutAt := time.Now()
	w.StartRuntime(runtime("healthy", 3, via(t, g.URL), 100*time.Millisecond))
	harness.WaitFor(t, time.Minute, "every lease behind the partition expired", func() bool {
		return activeAttempts(t, g, raw.Worker())+activeAttempts(t, g, cut) == 0
	})
	px.heal(t)
	t.Logf("partition healed after %s", time.Since(cutAt).Round(time.Millisecond))

	from := len(w.History().Calls())
	var keys []string
	for _, l := range leases {
		raw.Heartbeat(ctx, l)
		raw.SendBatch(ctx, l, 2)
		raw.Complete(ctx, l, faults.Succeeded)
		// The batch stored before the cut stays acknowledged: a replay.
		raw.SendBatch(ctx, l, 1)
		keys = append(keys, l.BatchKey(1))
	}
	refused := faults.RequireFenced(t, w.History().Calls()[from:], raw.ID(), keys...)
	require.Equal(t, 3*held, refused, "every late heartbeat, batch and completion refused")
	waitCompleted(t, g, n)
	finish(t, w, fmt.Sprintf("late_writes_refused=%d", refused), faults.Fault{Kind: "toxics", Count: px.added})
}
