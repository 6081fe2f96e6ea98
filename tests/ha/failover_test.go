package ha

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/tests/faults"
	"github.com/worker-gateway/gateway/tests/harness"
)

// TestFailoverUnderLoad runs two gateway replicas on a pg_auto_failover
// formation — a monitor, a primary and a synchronous standby, all real
// processes — through a multi-host URL (target_session_attrs=read-write),
// with Go runtime workers and a raw protocol client at work, every call
// recorded. The primary is crashed (SIGKILL of the whole node; with
// FAULTS_LONG=1 also, once it is back as the standby, the new primary's
// keeper killed and PostgreSQL stopped with pg_ctl stop -m immediate); the
// monitor promotes the standby; the gateways reconnect (LISTEN
// re-established, then a catch-up pass) and the workers' idempotent
// retries settle the calls whose outcome the crash made unknown. Proven:
// replicas answer nothing but 503 with Retry-After meanwhile, and the
// faults checker finds no acknowledged write lost (an acknowledged commit
// was on the standby's disk: synchronous replication), no effect
// duplicated, no stale write accepted, and the history linearizable; and
// a poll waiting on one replica is woken by a task created through the
// other, over the new primary's NOTIFY. The log reports, per crash, the time from the crash to the first lease
// granted afterwards and to both replicas ready, and the 503s seen.
func TestFailoverUnderLoad(t *testing.T) {
	if !long() {
		// Building the formation alone (initdb twice, a base backup, the
		// monitor's state machine) takes half a minute or more.
		t.Skip("a long test: run it with FAULTS_LONG=1 (make faults)")
	}
	began := time.Now()
	f := startFormation(t)
	t.Logf("formation ready in %s", time.Since(began).Round(time.Millisecond))
	ctx := context.Background()
	require.NoError(t, migrations.Up(ctx, f.nodeURL(f.primary())))
	g, procs := harness.StartProcessesOn(t, 2, harness.Database{URL: f.URL()})

	var syncNames, syncCommit string
	require.NoError(t, g.Pool.QueryRow(ctx, "SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit')").
		Scan(&syncNames, &syncCommit))
	require.NotEmpty(t, syncNames, "the standby is synchronous")
	require.Equal(t, "on", syncCommit, "a commit is acknowledged once on the standby's disk")

	w := faults.NewWorkload(t, g)
	n, crashes := 300, []string{"kill", "immediate"} // n tasks per crash
	for i := range 3 {
		u, err := url.Parse(procs[i%len(procs)].URL)
		require.NoError(t, err)
		// A second of work per task: some 9 tasks a second, so that two
		// thirds of a crash's share still wait when the failover is over.
		w.StartRuntime(faults.Runtime{Name: fmt.Sprintf("runtime-%d", i), Slots: 3, Dial: faults.DialTo(u.Host),
			Work: time.Second, Timeout: 10 * time.Second})
	}
	replica := 0
	w.Run(w.RawClient("raw", faults.Plan{MaxTasks: 2, WaitSeconds: 2, Batches: 1}, func() string {
		replica++ // both replicas in turn
		return procs[replica%len(procs)].URL
	}))

	total := 0
	for i, how := range crashes {
		// Each crash gets its share of the tasks, created now and a third
		// of them done when it strikes: the work outlasts the failover
		// (and the rejoin of the previous crash does not eat it).
		var created sync.WaitGroup
		for range 10 { // at once, so that the work does not drain as it is created
			created.Go(func() { w.CreateTasks(n/10, faults.LoadCapabilities()) })
		}
		created.Wait()
		waitCompleted(t, g, total+n/3)
		total += n
		victim := f.primary()
		require.NotNil(t, victim, "a primary before crash %d", i+1)
		from := len(w.History().Calls())
		crashed := time.Now()
		f.crash(victim, how)
		harness.WaitFor(t, 90*time.Second, "a lease granted after the crash", func() bool {
			return firstLeaseAfter(w.History().Calls()[from:], crashed) > 0
		})
		leased := firstLeaseAfter(w.History().Calls()[from:], crashed)
		for _, p := range procs {
			g.WaitReady(t, p)
		}
		ready := time.Since(crashed)
		calls := w.History().Calls()[from:]
		t.Logf("crash %d (%s of %s): first lease %s after it, both replicas ready after %s; meanwhile %d calls answered 503, %d got no answer",
			i+1, how, victim.name, leased.Round(time.Millisecond), ready.Round(time.Millisecond), count(calls, http.StatusServiceUnavailable), count(calls, 0))
		if i < len(crashes)-1 {
			// The old primary comes back as the standby, so that the
			// next crash again finds a synchronous standby to promote.
			rejoined := time.Now()
			f.rejoin(victim)
			f.waitSettled(2 * time.Minute)
			t.Logf("%s back as the synchronous standby in %s", victim.name, time.Since(rejoined).Round(time.Millisecond))
		}
	}
	waitCompleted(t, g, total)
	w.Stop()
	unavailable, transportErrors := faults.RequireOnly503(t, w.History().Calls())
	t.Logf("answers_503=%d transport_errors=%d", unavailable, transportErrors)
	faults.Summarize(t, faults.Check(t, w), faults.Fault{Kind: "primary_crash", Count: len(crashes)})
	// Wake-ups travel again: a poll on one replica is woken through the
	// other's NOTIFY on the new primary (in an organization of its own,
	// after the checker, which wants every task of the run ended).
	wakeUpAcrossReplicas(t, g, procs, g.NewOrganization(t, "after-failover"))
}

// firstLeaseAfter is how long after at the first call granting a lease
// returned, among calls invoked after at; 0 when none did yet.
func firstLeaseAfter(calls []faults.Call, at time.Time) time.Duration {
	var first time.Duration
	for _, c := range calls {
		if c.Op != faults.OpLease || c.Status != http.StatusOK || len(c.Items) == 0 || c.InvokeWall.Before(at) {
			continue
		}
		if d := c.ReturnWall.Sub(at); first == 0 || d < first {
			first = d
		}
	}
	return first
}

// count counts the calls answered status (0: no answer at all).
func count(calls []faults.Call, status int) int {
	n := 0
	for _, c := range calls {
		if c.Status == status {
			n++
		}
	}
	return n
}

// waitCompleted waits until n tasks are completed.
func waitCompleted(t *testing.T, g *harness.Gateway, n int) {
	t.Helper()
	harness.WaitFor(t, 3*time.Minute, fmt.Sprintf("%d tasks completed", n), func() bool {
		var done int
		err := g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_tasks WHERE state = 'completed'`).Scan(&done)
		return err == nil && done >= n
	})
}
