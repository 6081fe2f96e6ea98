package workerprotocol

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// crashAt starts a gateway process that dies (exit 137, like kill -9) when
// it reaches failpoint, with a client for worker w on it.
func crashAt(t *testing.T, g *harness.Gateway, w *harness.Worker, failpoint string) (*harness.Process, *apiclient.ClientWithResponses) {
	t.Helper()
	p := g.StartProcess(t, "GATEWAY_FAILPOINTS="+failpoint)
	c, err := apiclient.NewClientWithResponses(p.URL, apiclient.WithHTTPClient(w.HTTP))
	require.NoError(t, err)
	return p, c
}

func clientOn(t *testing.T, p *harness.Process, w *harness.Worker) *apiclient.ClientWithResponses {
	t.Helper()
	c, err := apiclient.NewClientWithResponses(p.URL, apiclient.WithHTTPClient(w.HTTP))
	require.NoError(t, err)
	return c
}

// TestCrashAroundLeaseCommit kills a replica just before and just after the
// lease transaction commits. Before: nothing was leased, the task is pending.
// After: the lease exists but its answer was lost; the worker's retry with
// the same Idempotency-Key, on another replica, gets that same lease back —
// no second attempt, nothing stranded until expiry.
func TestCrashAroundLeaseCommit(t *testing.T) {
	t.Parallel()
	g, _ := harness.StartProcesses(t, 1) // the control plane's replica
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{})
	n, wait := 1, 0
	poll := func(c *apiclient.ClientWithResponses, key string) (*apiclient.AcquireLeasesResponse, error) {
		return c.AcquireLeasesWithResponse(context.Background(), &apiclient.AcquireLeasesParams{IdempotencyKey: &key},
			apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait})
	}

	before, c := crashAt(t, g, w, "before-commit:acquire-leases")
	_, err := poll(c, "poll-1")
	require.Error(t, err, "the replica died before answering")
	require.Error(t, before.Wait(10*time.Second))
	require.Equal(t, apiclient.TaskState("pending"), g.Task(t, task).State, "nothing was committed")

	after, c := crashAt(t, g, w, "after-commit:acquire-leases")
	_, err = poll(c, "poll-2")
	require.Error(t, err)
	require.Error(t, after.Wait(10*time.Second))
	require.Equal(t, apiclient.TaskState("leased"), g.Task(t, task).State, "the lease had committed")

	survivor := g.StartProcess(t)
	res, err := poll(clientOn(t, survivor, w), "poll-2")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Len(t, res.JSON200.Leases, 1, "the retry gets the committed lease back")
	l := res.JSON200.Leases[0]
	require.Equal(t, task, l.Task.Id)
	require.Equal(t, 1, l.Task.AttemptNumber)
	require.Len(t, g.Task(t, task).Attempts, 1, "no second attempt")
}

// TestCrashAroundCompletionCommit kills a replica just before and just after
// a completion's transaction commits; the worker's retry on another replica
// ends the attempt once, answered with the same outcome either way.
func TestCrashAroundCompletionCommit(t *testing.T) {
	t.Parallel()
	g, _ := harness.StartProcesses(t, 1) // the control plane's replica
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 2, org)
	// Leases outlast the test's crashes and restarts, however slow a loaded
	// machine makes them: an expired lease would end the task otherwise.
	long := harness.TaskSpec{LeaseDurationSeconds: 3600}
	g.CreateTask(t, org, long)
	g.CreateTask(t, org, long)
	leases := lease(t, w, 2, 0)
	require.Len(t, leases, 2)
	complete := func(c *apiclient.ClientWithResponses, l apiclient.Lease) (*apiclient.CompleteAttemptResponse, error) {
		return c.CompleteAttemptWithResponse(context.Background(), l.AttemptId,
			&apiclient.CompleteAttemptParams{LeaseToken: l.LeaseToken}, apiclient.CompleteRequest{Outcome: "succeeded"})
	}

	for i, fp := range []string{"before-commit:complete-attempts", "after-commit:complete-attempts"} {
		l := leases[i]
		doomed, c := crashAt(t, g, w, fp)
		_, err := complete(c, l)
		require.Error(t, err, fp)
		require.Error(t, doomed.Wait(10*time.Second))
		want := apiclient.TaskState("leased")
		if i == 1 {
			want = "completed"
		}
		require.Equal(t, want, g.Task(t, l.Task.Id).State, fp)

		survivor := g.StartProcess(t)
		res, err := complete(clientOn(t, survivor, w), l)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		require.Equal(t, apiclient.TaskState("completed"), res.JSON200.TaskState)
		detail := g.Task(t, l.Task.Id)
		require.Len(t, detail.Attempts, 1, fp)
		require.NoError(t, survivor.Stop(syscall.SIGTERM))
	}
}

// controlOn is an unscoped admin's control-plane client on process p.
func controlOn(t *testing.T, g *harness.Gateway, p *harness.Process) *apiclient.ClientWithResponses {
	t.Helper()
	c, err := apiclient.NewClientWithResponses(p.URL, apiclient.WithHTTPClient(g.HTTPClient(nil)),
		apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+g.AdminToken)
			return nil
		}))
	require.NoError(t, err)
	return c
}

// TestCrashAroundAuditedChangeCommit kills a replica just before and just
// after the transaction of a control-plane change commits: a worker's
// revocation (a change of a row) and an organization's creation (a change
// whose target id the transaction makes). Each time the database holds
// both the change and its audit row, or neither.
func TestCrashAroundAuditedChangeCommit(t *testing.T) {
	t.Parallel()
	g, _ := harness.StartProcesses(t, 1) // the control plane's replica
	ctx := context.Background()
	org := g.NewOrganization(t, "acme")
	auditRows := func(action, target string) int {
		var n int
		require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE action = $1 AND target_id = $2`,
			action, target).Scan(&n))
		return n
	}

	for _, committed := range []bool{false, true} {
		fp := "before-commit:"
		if committed {
			fp = "after-commit:"
		}
		w := g.NewWorker(t, "w-"+fp, 1, org)
		doomed := g.StartProcess(t, "GATEWAY_FAILPOINTS="+fp+"revoke-worker,"+fp+"create-organization")
		c := controlOn(t, g, doomed)
		_, err := c.RevokeWorkerWithResponse(ctx, w.ID, apiclient.RevokeRequest{Reason: "key leaked"})
		require.Error(t, err, "the replica died before answering")
		require.Error(t, doomed.Wait(10*time.Second))
		var revoked bool
		require.NoError(t, g.Pool.QueryRow(ctx, `SELECT revoked_at IS NOT NULL FROM workers WHERE id = $1`, w.ID).Scan(&revoked))
		require.Equal(t, committed, revoked, fp+"revoke-worker")
		require.Equal(t, map[bool]int{false: 0, true: 1}[committed], auditRows("worker.revoke", w.ID.String()),
			"%srevoke-worker: the change and its audit row commit together", fp)

		name := "org-" + fp
		doomed = g.StartProcess(t, "GATEWAY_FAILPOINTS="+fp+"revoke-worker,"+fp+"create-organization")
		_, err = controlOn(t, g, doomed).CreateOrganizationWithResponse(ctx, apiclient.CreateOrganizationRequest{Name: name})
		require.Error(t, err, "the replica died before answering")
		require.Error(t, doomed.Wait(10*time.Second))
		var created, audited int
		require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*), (SELECT count(*) FROM audit_events a
				WHERE a.action = 'organization.create' AND a.target_id IN (SELECT id::text FROM organizations WHERE name = $1))
			FROM organizations WHERE name = $1`, name).Scan(&created, &audited))
		require.Equal(t, map[bool]int{false: 0, true: 1}[committed], created, fp+"create-organization")
		require.Equal(t, created, audited, "%screate-organization: the change and its audit row commit together", fp)
	}
}
