package netfaults

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
)

// outage is how long PostgreSQL stays down in a stop-and-resume fault.
const outage = 3 * time.Second

// TestPostgresRestartUnderLoad crashes PostgreSQL (pg_ctl restart -m
// immediate, and a stop of a few seconds) while two gateway replicas serve
// Go runtime workers and a raw protocol client. Restart keeps the cluster's
// data directory and port, and crash recovery brings back every database
// of this binary's cluster, the template included, so later tests still
// clone it. Proven: callers see 503 with Retry-After and never a 500 while
// it is down; both replicas' LISTEN connections come back; a task created
// after recovery wakes a poll already waiting; in the end every task was
// done exactly once and every result batch stored once.
func TestPostgresRestartUnderLoad(t *testing.T) {
	g, procs := harness.StartProcesses(t, 2)
	var syncCommit string
	require.NoError(t, g.Pool.QueryRow(context.Background(), "SHOW synchronous_commit").Scan(&syncCommit))
	require.Equal(t, "on", syncCommit, "a crash may only drop unacknowledged commits")

	org := g.NewOrganization(t, "netfaults")
	load := map[string]any{"load": true}
	n := scaled(200, 600)
	_, hosts := createTasks(t, g, org, "pg", n, load)

	rec := &recorder{}
	for i := range scaled(3, 4) {
		w := g.NewWorker(t, fmt.Sprintf("runtime-%d", i), 3, org)
		startRuntime(t, w, procs[i%len(procs)].URL, rec, 3, load, emitHandler(200*time.Millisecond))
	}
	rw := g.NewWorker(t, "raw", 2, org)
	raw := newRawClient(procs[1].URL, rec.client(rw.HTTP.Transport, 30*time.Second), load)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { raw.serve(ctx) })
	defer func() {
		cancel()
		wg.Wait()
	}()

	faults := []string{"restart", "stop"}
	if long() {
		faults = []string{"restart", "stop", "restart"}
	}
	total := n
	for i, kind := range faults {
		// Spread the faults over the run: each waits for its share of
		// the work to be done.
		waitCompleted(t, g, org, (i+1)*n/(len(faults)+1))
		began := time.Now()
		switch kind {
		case "restart":
			restartCtx, done := context.WithTimeout(context.Background(), time.Minute)
			require.NoError(t, storetest.Cluster().Restart(restartCtx, "immediate"))
			done()
		case "stop":
			stopAndResume(t, procs, rw, rec)
		}
		waitRecovered(t, g, procs)
		t.Logf("fault %d (%s): both replicas ready with LISTEN up %s after it began", i+1, kind, time.Since(began).Round(time.Millisecond))
		hosts = append(hosts, probeWakeup(t, ctx, g, org, procs[i%len(procs)], rec, i)...)
		total++
	}
	waitCompleted(t, g, org, total)
	cancel()
	wg.Wait()

	var replica5xx float64
	for _, p := range procs {
		// Worker and control routes only: /readyz answers 503 during outages by design.
		s, _ := metricSum(g, p, "gateway_http_requests_total", `code="5xx"`, `route="POST /v1/`)
		replica5xx += s
	}
	judgeRun(t, g.Pool, org, hosts, rec, len(faults), fmt.Sprintf("replicas_5xx_metric=%.0f", replica5xx), raw)
}

// waitCompleted waits until at least n tasks of org are completed. Queries
// fail while PostgreSQL is down or the pool holds connections it killed:
// the condition is then simply not met yet.
func waitCompleted(t *testing.T, g *harness.Gateway, org uuid.UUID, n int) {
	t.Helper()
	harness.WaitFor(t, scaled(90*time.Second, 4*time.Minute), fmt.Sprintf("%d tasks completed", n), func() bool {
		var done int
		err := g.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM worker_tasks WHERE organization_id = $1 AND state = 'completed'`, org).Scan(&done)
		return err == nil && done >= n
	})
}

// stopAndResume kills PostgreSQL, proves that every replica answers a poll
// with 503, problem+json and Retry-After while it is down, and starts it
// again after the outage.
func stopAndResume(t *testing.T, procs []*harness.Process, w *harness.Worker, rec *recorder) {
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
	for _, p := range procs {
		// Any worker will do: a poll needs the database whoever sends it.
		probe := newRawClient(p.URL, rec.client(w.HTTP.Transport, 10*time.Second), nil)
		var last answer
		harness.WaitFor(t, 20*time.Second, "503 while PostgreSQL is down at "+p.URL, func() bool {
			_, last = probe.poll(context.Background(), 1, 0, "")
			return last.status == http.StatusServiceUnavailable
		})
		require.Equal(t, "unavailable", last.code)
		require.Positive(t, last.retryAfter, "503 says when to retry")
	}
	time.Sleep(time.Until(stopped.Add(outage))) // the fault's length, not a synchronisation
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cluster.Resume(ctx))
	resumed = true
}

// probeWakeup proves that no wake-up is lost after a fault: a poll of a
// fresh worker waits on replica p, a task only it can take is created, and
// that very poll must get it. It finishes the task and returns the hosts
// it named.
func probeWakeup(t *testing.T, ctx context.Context, g *harness.Gateway, org uuid.UUID, p *harness.Process, rec *recorder, i int) []string {
	t.Helper()
	w := g.NewWorker(t, fmt.Sprintf("probe-%d", i), 1, org)
	caps := map[string]any{"probe": i}
	probe := newRawClient(p.URL, rec.client(w.HTTP.Transport, 40*time.Second), caps)
	got := make(chan []workerclient.Lease, 1)
	go func() {
		leases, _ := probe.poll(ctx, 1, 25, "")
		got <- leases
	}()
	// The poll's first pass records the worker as seen, then it waits.
	harness.WaitFor(t, 20*time.Second, "probe poll waiting", func() bool {
		var seen bool
		err := g.Pool.QueryRow(context.Background(), `SELECT last_seen_at IS NOT NULL FROM workers WHERE id = $1`, w.ID).Scan(&seen)
		return err == nil && seen
	})
	created := time.Now()
	_, hosts := createTasks(t, g, org, fmt.Sprintf("probe-%d", i), 1, caps)
	var leases []workerclient.Lease
	select {
	case leases = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting poll got nothing within 30 s")
	}
	require.Len(t, leases, 1, "the poll waiting since before the task was created got it")
	t.Logf("wake-up after fault %d: delivered to the waiting poll at %s in %s", i+1, p.URL, time.Since(created).Round(time.Millisecond))
	probe.finish(ctx, leases[0])
	return hosts
}
