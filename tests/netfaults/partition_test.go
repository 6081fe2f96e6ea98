package netfaults

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
)

// TestPartitionPastLeaseThenHeal cuts two workers off the gateway (every
// byte dropped, connections left open) while they hold tasks: a raw client
// that already reported a result batch, and a Go runtime in the middle of
// its tasks. The partition lasts until their leases have expired; a healthy
// worker takes the tasks over. Once healed, every late write of the cut-off
// workers is refused — only the replay of a batch stored before the cut is
// answered, as a replay — and every task is done exactly once.
func TestPartitionPastLeaseThenHeal(t *testing.T) {
	e := newNetEnv(t)
	px := newToxicProxy(t, e.g.URL)
	caps := map[string]any{"load": true}
	n := scaled(20, 80)
	_, hosts := createTasks(t, e.g, e.org, "cut", n, caps)
	held := scaled(2, 6)
	rw, raw := e.rawClient(t, "cut-raw", held, px.URL, caps)
	leases := leaseAll(t, raw, held)
	ctx := context.Background()
	for _, l := range leases {
		a := retry(ctx, func() answer { return raw.sendResults(ctx, l, 1, hostsOf(l.Task.Payload)) })
		require.Equal(t, http.StatusOK, a.status, string(a.body))
	}
	cut := e.g.NewWorker(t, "cut-runtime", 3, e.org)
	startRuntime(t, cut, px.URL, e.rec, 3, caps, emitHandler(3*time.Second))
	harness.WaitFor(t, 20*time.Second, "the runtime behind the proxy holding tasks", func() bool {
		return e.activeAttempts(t, cut.ID) > 0
	})

	px.partition(t)
	cutAt := time.Now()
	healthy := e.g.NewWorker(t, "healthy", 3, e.org)
	startRuntime(t, healthy, e.g.URL, e.rec, 3, caps, emitHandler(100*time.Millisecond))
	harness.WaitFor(t, time.Minute, "every lease behind the partition expired", func() bool {
		return e.activeAttempts(t, rw.ID)+e.activeAttempts(t, cut.ID) == 0
	})
	px.heal(t)
	t.Logf("partition healed after %s", time.Since(cutAt).Round(time.Millisecond))

	refused := 0
	for _, l := range leases {
		var states []workerclient.LeaseStatus
		retry(ctx, func() answer {
			var a answer
			states, a = raw.heartbeat(ctx, l)
			return a
		})
		require.Len(t, states, 1)
		require.Equal(t, workerclient.LeaseState("lost"), states[0].State, "a heartbeat after the partition renews nothing")
		hosts := hostsOf(l.Task.Payload)
		requireRefused(t, "late result batch", retry(ctx, func() answer { return raw.sendResults(ctx, l, 2, hosts) }))
		requireRefused(t, "late completion", retry(ctx, func() answer { return raw.complete(ctx, l, 1) }))
		refused += 3
		// The batch stored before the cut stays acknowledged: a replay.
		a := retry(ctx, func() answer { return raw.sendResults(ctx, l, 1, hosts) })
		require.Equal(t, http.StatusOK, a.status, string(a.body))
		require.True(t, a.replayed, "the repeated batch is a replay, not applied again")
	}
	waitCompleted(t, e.g, e.org, n)
	judgeRun(t, e.g.Pool, e.org, hosts, e.rec, px.added, fmt.Sprintf("late_writes_refused=%d", refused), raw)
}
