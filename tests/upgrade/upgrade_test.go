package upgrade

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/protocol"
	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/tests/faults"
	"github.com/worker-gateway/gateway/tests/harness"
)

// TestUpgradeUnderLoad upgrades a serving fleet from the previous release
// to this one, as issue 31 asks:
//
//  1. the previous release migrates a database and two of its replicas
//     serve raw protocol clients, this release's Go runtimes and the
//     previous release's reference workers, tasks created continuously;
//  2. this release's expand migrations run while they serve;
//  3. two replicas of this release start beside them; a lease taken
//     through either release heartbeats and completes through the other
//     (the previous release's replica that granted it killed -9 in
//     between); the old replicas stop, one with SIGTERM and one with
//     SIGKILL;
//  4. the contract step runs while this release serves.
//
// Every step serves work before the next (load.progress). Every worker
// call is recorded; at the end the faults checker (SQL invariants and the
// lease model, porcupine) finds nothing lost, duplicated or stale
// accepted, every task created completed exactly once, no answer was a 5xx
// but 503 with Retry-After, live leases crossed the upgrade both ways, and
// each release leased to the other's workers.
// The log has the census of answers by release and the longest wait of a
// worker for a lease.
//
// Short (make test): a few clients and tens of tasks; FAULTS_LONG=1 (make
// faults): more of each and leases left to expire.
func TestUpgradeUnderLoad(t *testing.T) {
	sc := scaleOf()
	ctx := t.Context()
	began := time.Now()
	prev := buildPreviousRelease(t)
	t.Logf("previous release %s built in %s", previousRelease, time.Since(began).Round(time.Millisecond))
	url := storetest.NewEmptyDatabase(t)
	runBinary(t, prev.gateway, "migrate", "up", "-database-url", url)

	oldG, old := harness.StartProcessesOn(t, 2, harness.Database{URL: url, Binary: prev.gateway})
	f := newFleet(t)
	f.add(previous, old...)
	ctrl := *oldG
	ctrl.Control = f.controlClient(oldG)
	// No scope policy: the previous release knows none (its organizations
	// are unrestricted on the expanded schema).
	w := faults.NewWorkloadIn(t, &ctrl, ctrl.NewOrganizationWithPolicy(t, "upgrade", nil))
	l := &load{t: t, w: w, pool: oldG.Pool, sc: sc}

	for i := range sc.RawClients {
		w.Run(w.RawClient(fmt.Sprintf("raw-%d", i+1), faults.Plan{MaxTasks: 2, WaitSeconds: 2, Batches: 2,
			FailRate: 0.1, AbandonRate: sc.AbandonRate}, f.pick))
	}
	for i := range sc.Runtimes {
		w.StartRuntime(faults.Runtime{Name: fmt.Sprintf("runtime-%d", i+1), Dial: f.dial, Timeout: 20 * time.Second})
	}
	var references []*harness.Process
	referenceClients := map[int]bool{}
	for i := range sc.ReferenceWorkers {
		name := fmt.Sprintf("reference-%d", i+1)
		wk := ctrl.NewWorker(t, name, 2, w.Organization())
		proxy, client := w.StartProxy(name, wk.Cert, f.dial)
		referenceClients[client] = true
		references = append(references, wk.ProcessOf(t, prev.worker, proxy, "-slots", "2", "-wait", "2", "-drain-timeout", "5s"))
	}
	l.progress("the previous release")

	// 2. This release's expand migrations while the old replicas serve.
	require.NoError(t, l.during("the expand migrations", func() error { return migrations.Up(ctx, url) }))
	expanded := time.Now()
	l.progress("the previous release on the expanded schema")
	t.Logf("previous release's /readyz on the expanded schema: %d", readyz(t, oldG, old[0]))

	// 3. This release's replicas beside them.
	_, fresh := harness.StartProcessesOn(t, 2, harness.Database{URL: url})
	f.add(current, fresh...)
	l.progress("both releases")
	leaseThrough(t, l, f, fresh[0]).finishThrough(old[1])
	requireRevocationsToldOnce(t, oldG, w.Organization(), map[string]*harness.Process{previous: old[1], current: fresh[0]})

	stopping := time.Now()
	require.NoError(t, f.stop(old[1], syscall.SIGTERM), "the previous release drains on SIGTERM")
	t.Logf("SIGTERM: the old replica exited after %s", time.Since(stopping).Round(time.Millisecond))
	l.progress("after SIGTERM of an old replica")
	// A lease outlives the old replica that granted it, killed -9.
	orphan := leaseThrough(t, l, f, old[0])
	_ = f.stop(old[0], syscall.SIGKILL) // its exit status says nothing
	orphan.finishThrough(fresh[1])
	l.progress("this release alone")

	// 4. The contract step while this release serves, given the secrets
	// key: it seals the webhook secrets the previous release wrote in
	// plaintext, which the step refuses to erase.
	var contract []byte
	gateway := harness.Binary(t, "gateway")
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	require.NoError(t, os.WriteFile(keyFile, []byte(harness.SecretsKey(t).Encode()), 0o600))
	err := l.during("the contract step", func() (err error) {
		contract, err = runGateway(gateway, "migrate", "up", "-contract", "-database-url", url, "-secrets-key-file", keyFile)
		return err
	})
	require.NoError(t, err, "%s", contract)
	t.Logf("the contract step: %s", strings.TrimSpace(string(contract)))
	l.progress("after the contract step")
	for _, p := range fresh {
		require.Equal(t, http.StatusOK, readyz(t, oldG, p), "this release after its contract step")
	}

	// The load ends; every task created ends.
	draining := time.Now()
	harness.WaitFor(t, sc.Drain, "every task to end", func() bool { return unfinished(t, l) == 0 })
	t.Logf("drained in %s", time.Since(draining).Round(time.Millisecond))
	for _, p := range references {
		require.NoError(t, p.Stop(syscall.SIGTERM))
	}
	w.Stop()
	judge(t, l, f, referenceClients, expanded)
}

// crosser is a raw client with a task of its own, whose lease crosses the
// upgrade: leased through one replica, then renewed, sent a result batch
// and completed through another, of the other release. The crossings of
// the whole history are counted at the end.
type crosser struct {
	t      *testing.T
	c      *faults.RawClient
	target atomic.Value // the URL its calls go to
	lease  faults.RawLease
}

// leaseThrough leases the crosser's task through the replica from.
func leaseThrough(t *testing.T, l *load, f *fleet, from *harness.Process) *crosser {
	t.Helper()
	capability := "cross-from-" + hostOf(from)
	x := &crosser{t: t}
	x.target.Store(from.URL)
	x.c = l.w.RawClient(capability, faults.Plan{MaxTasks: 1, WaitSeconds: 5}, func() string { return x.target.Load().(string) })
	x.c.Advertise(map[string]any{capability: true})
	l.track(l.w.CreateTasks(1, map[string]any{capability: true})...)
	var leases []faults.RawLease
	for range 5 {
		if leases = x.c.Poll(t.Context()); len(leases) > 0 {
			break
		}
	}
	require.Len(t, leases, 1, "a lease through the %s release", f.releaseOf(hostOf(from)))
	x.lease = leases[0]
	return x
}

// finishThrough renews the lease, sends a result batch and completes the
// attempt through the replica to.
func (x *crosser) finishThrough(to *harness.Process) {
	x.t.Helper()
	x.target.Store(to.URL)
	ctx := x.t.Context()
	require.True(x.t, x.c.Heartbeat(ctx, x.lease), "renewed through the other release")
	require.True(x.t, x.c.SendBatch(ctx, x.lease, 1), "a result batch through the other release")
	x.c.Complete(ctx, x.lease, faults.Succeeded) // judged with the history
}

// judge checks the run: the census of answers, the crossings, every task
// completed once, the faults checker; and logs the longest wait.
func judge(t *testing.T, l *load, f *fleet, referenceClients map[int]bool, expanded time.Time) {
	t.Helper()
	calls := l.w.History().Calls()
	unavailable, transportErrors := faults.RequireOnly503(t, calls)
	for _, line := range faults.Census(calls, func(c faults.Call) string { return f.releaseOf(c.Replica) + " " + c.Op }) {
		t.Logf("census: %s", line)
	}
	t.Logf("answers_503=%d transport_errors=%d", unavailable, transportErrors)

	// The worker protocol crosses the upgrade both ways: each release
	// leases to the other's runtime.
	granted := map[string]int{}
	referenceServedByThis, runtimeServedByPrevious := 0, 0
	for _, c := range calls {
		if c.Op != faults.OpLease || c.Status != http.StatusOK || len(c.Items) == 0 {
			continue
		}
		release := f.releaseOf(c.Replica)
		if c.InvokeWall.After(expanded) {
			granted[release] += len(c.Items)
		}
		if referenceClients[c.Client] && release == current {
			referenceServedByThis += len(c.Items)
		}
		if strings.HasPrefix(l.w.History().ClientName(c.Client), "runtime-") && release == previous {
			runtimeServedByPrevious += len(c.Items)
		}
	}
	require.Positive(t, granted[previous], "the previous release leases tasks on the expanded schema")
	require.Positive(t, granted[current], "this release leases tasks")
	require.Positive(t, referenceServedByThis, "this release serves the previous release's reference worker")
	require.Positive(t, runtimeServedByPrevious, "the previous release serves this release's Go runtime")
	rows, err := l.pool.Query(context.Background(), `SELECT coalesce(protocol_version, '') FROM workers WHERE name LIKE 'reference-%'`)
	require.NoError(t, err)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, versions, l.sc.ReferenceWorkers)
	for _, v := range versions {
		require.True(t, protocol.Supported(v), "the previous release's worker speaks protocol %q, which this release serves", v)
	}

	crossed := crossings(calls, f.releaseOf)
	t.Logf("live leases that crossed the upgrade: previous→this %d, this→previous %d",
		crossed[crossing{previous, current}], crossed[crossing{current, previous}])
	require.Positive(t, crossed[crossing{previous, current}], "a lease granted by the previous release is renewed and completed by this one")
	require.Positive(t, crossed[crossing{current, previous}], "a lease granted by this release is renewed and completed by the previous one")

	longest := longestLeaseWait(calls)
	t.Logf("longest wait of a worker for a lease: %s (%s), from a poll's first try to the answer granting it leases",
		longest.wait.Round(time.Millisecond), l.w.History().ClientName(longest.client))
	var queued time.Duration
	require.NoError(t, l.pool.QueryRow(context.Background(), `
		SELECT coalesce(max(first - t.created_at), '0') FROM worker_tasks t
		JOIN LATERAL (SELECT min(a.started_at) AS first FROM worker_task_attempts a WHERE a.task_id = t.id) f ON true`).Scan(&queued))
	t.Logf("longest a task waited from its creation to its first lease: %s", queued.Round(time.Millisecond))

	requireCompletedOnce(t, l)
	faults.Summarize(t, faults.Check(t, l.w), faults.Fault{Kind: "sigterm", Count: 1}, faults.Fault{Kind: "sigkill", Count: 1})
}

// requireCompletedOnce: the tasks of the database are exactly those
// created, and each completed with exactly one succeeded attempt.
func requireCompletedOnce(t *testing.T, l *load) {
	t.Helper()
	var total, completedOnce int
	require.NoError(t, l.pool.QueryRow(context.Background(), `
		SELECT count(*), count(*) FILTER (WHERE t.state = 'completed' AND
			(SELECT count(*) FROM worker_task_attempts a WHERE a.task_id = t.id AND a.status = 'succeeded') = 1)
		FROM worker_tasks t WHERE t.id = ANY($1)`, l.created).Scan(&total, &completedOnce))
	var all int
	require.NoError(t, l.pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_tasks`).Scan(&all))
	require.Equal(t, len(l.created), total, "every task created is in the database")
	require.Equal(t, total, all, "no task the test did not create")
	require.Equal(t, total, completedOnce, "every task completed with one succeeded attempt")
	t.Logf("tasks created and completed once: %d", completedOnce)
}

func unfinished(t *testing.T, l *load) int {
	t.Helper()
	var n int
	require.NoError(t, l.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM worker_tasks WHERE state NOT IN ('completed', 'failed_terminal', 'cancelled')`).Scan(&n))
	return n
}

func readyz(t *testing.T, g *harness.Gateway, p *harness.Process) int {
	t.Helper()
	res, err := g.HTTPClient(nil).Get(p.URL + "/readyz")
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode
}
