package netfaults

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/tests/faults"
	"github.com/worker-gateway/gateway/tests/harness"
)

// outage is how long PostgreSQL stays down in a stop-and-resume fault.
const outage = 3 * time.Second

// TestPostgresRestartUnderLoad crashes PostgreSQL (pg_ctl restart -m
// immediate, and a stop of a few seconds) while two gateway replicas serve
// Go runtime workers and a raw protocol client, every call recorded.
// Restart keeps the cluster's data directory and port, and crash recovery
// brings back every database of this binary's cluster, the template
// included, so later tests still clone it. Proven: callers see 503 with
// Retry-After and never a 500 while it is down; both replicas' LISTEN
// connections come back; a task created after recovery wakes a poll
// already waiting; and the faults checker finds every task done exactly
// once, every acknowledged effect stored once and the history
// linearizable.
func TestPostgresRestartUnderLoad(t *testing.T) {
	g, procs := harness.StartProcesses(t, 2)
	var syncCommit string
	require.NoError(t, g.Pool.QueryRow(context.Background(), "SHOW synchronous_commit").Scan(&syncCommit))
	require.Equal(t, "on", syncCommit, "a crash may only drop unacknowledged commits")

	w := faults.NewWorkload(t, g)
	n := scaled(200, 600)
	w.CreateTasks(n, faults.LoadCapabilities())
	for i := range scaled(3, 4) {
		w.StartRuntime(runtime(fmt.Sprintf("runtime-%d", i), 3, via(t, procs[i%len(procs)].URL), 200*time.Millisecond))
	}
	w.Run(w.RawClient("raw", faults.Plan{MaxTasks: 2, WaitSeconds: 2, Batches: 1}, at(procs[1].URL)))
	// The outage probes are registered while the database is up.
	outageProbes := make([]*faults.RawClient, len(procs))
	for i, p := range procs {
		outageProbes[i] = w.RawClient(fmt.Sprintf("outage-%d", i), faults.Plan{MaxTasks: 1}, at(p.URL))
		outageProbes[i].Advertise(map[string]any{"outage-probe": true}) // no task needs it
	}

	kinds := []string{"restart", "stop"}
	if long() {
		kinds = []string{"restart", "stop", "restart"}
	}
	injected := map[string]int{}
	total := n
	for i, kind := range kinds {
		// Spread the faults over the run: each waits for its share of
		// the work to be done.
		waitCompleted(t, g, (i+1)*n/(len(kinds)+1))
		began := time.Now()
		switch kind {
		case "restart":
			restartCtx, done := context.WithTimeout(context.Background(), time.Minute)
			require.NoError(t, storetest.Cluster().Restart(restartCtx, "immediate"))
			done()
		case "stop":
			stopAndResume(t, w, outageProbes)
		}
		injected[kind]++
		waitRecovered(t, g, procs)
		t.Logf("fault %d (%s): both replicas ready with LISTEN up %s after it began", i+1, kind, time.Since(began).Round(time.Millisecond))
		probeWakeup(t, g, w, procs[i%len(procs)], i)
		total++
	}
	waitCompleted(t, g, total)

	var replica5xx float64
	for _, p := range procs {
		// Worker and control routes only: /readyz answers 503 during outages by design.
		s, _ := metricSum(g, p, "gateway_http_requests_total", `code="5`, `route="POST /v1/`)
		replica5xx += s
	}
	finish(t, w, fmt.Sprintf("replicas_5xx_metric=%.0f", replica5xx),
		faults.Fault{Kind: "pg_restart", Count: injected["restart"]}, faults.Fault{Kind: "pg_stop", Count: injected["stop"]})
}

// stopAndResume kills PostgreSQL, proves that every replica answers a
// probe's poll with 503 unavailable, problem+json and Retry-After while it
// is down, and starts it again after the outage.
func stopAndResume(t *testing.T, w *faults.Workload, probes []*faults.RawClient) {
	t.Helper()
	cluster := storetest.Cluster()
	stopped := time.Now()
	require.NoError(t, cluster.StopImmediate())
	resumed := false
	defer func() {
		if !resumed {
			_ = cluster.Resume(context.Background())
		}
	}()
	for _, probe := range probes {
		var unavailable *faults.Call
		harness.WaitFor(t, 20*time.Second, "503 while PostgreSQL is down", func() bool {
			from := len(w.History().Calls())
			probe.Poll(context.Background())
			unavailable = answered(faults.CallsOf(w.History().Calls()[from:], probe.ID()), http.StatusServiceUnavailable)
			return unavailable != nil
		})
		require.Equal(t, "unavailable", unavailable.Code, "503 at %s", unavailable.Replica)
		retryAfter, err := strconv.Atoi(unavailable.RetryAfter)
		require.NoError(t, err, "503 at %s says when to retry", unavailable.Replica)
		require.Positive(t, retryAfter, "503 at %s says when to retry", unavailable.Replica)
		require.Equal(t, "application/problem+json", unavailable.ContentType)
	}
	time.Sleep(time.Until(stopped.Add(outage))) // the fault's length, not a synchronisation
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cluster.Resume(ctx))
	resumed = true
}

// answered is the first of calls answered status, or nil.
func answered(calls []faults.Call, status int) *faults.Call {
	for i, c := range calls {
		if c.Status == status {
			return &calls[i]
		}
	}
	return nil
}

// probeWakeup proves that no wake-up is lost after a fault: a poll of a
// fresh raw client waits on replica p, a task only it can take is created,
// and that very poll — the client's only one — must get it. The client
// then works the task to its end.
func probeWakeup(t *testing.T, g *harness.Gateway, w *faults.Workload, p *harness.Process, i int) {
	t.Helper()
	caps := map[string]any{"probe": i}
	probe := w.RawClient(fmt.Sprintf("probe-%d", i), faults.Plan{MaxTasks: 1, WaitSeconds: 25, Batches: 1}, at(p.URL))
	probe.Advertise(caps)
	ctx := context.Background()
	got := make(chan []faults.RawLease, 1)
	go func() { got <- probe.Poll(ctx) }()
	// The poll's first pass records the worker as seen, then it waits.
	harness.WaitFor(t, 20*time.Second, "probe poll waiting", func() bool {
		var seen bool
		err := g.Pool.QueryRow(ctx, `SELECT last_seen_at IS NOT NULL FROM workers WHERE id = $1`, probe.Worker()).Scan(&seen)
		return err == nil && seen
	})
	created := time.Now()
	w.CreateTasks(1, caps)
	var leases []faults.RawLease
	select {
	case leases = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting poll got nothing within 30 s")
	}
	require.Len(t, leases, 1, "the poll waiting since before the task was created got it")
	require.Len(t, faults.CallsOf(w.History().Calls(), probe.ID()), 1, "the task went to the poll already waiting, not to a retry")
	t.Logf("wake-up after fault %d: delivered to the waiting poll at %s in %s", i+1, p.URL, time.Since(created).Round(time.Millisecond))
	probe.Work(ctx, leases[0])
}
