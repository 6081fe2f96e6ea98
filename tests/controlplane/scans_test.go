package controlplane

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

func scanTasks(t *testing.T, g *harness.Gateway, scan any) int {
	t.Helper()
	var n int
	require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_tasks WHERE scan_id = $1`, scan).Scan(&n))
	return n
}

type jobPayload struct {
	Plugin  string          `json:"plugin"`
	Input   json.RawMessage `json:"input"`
	Targets []string        `json:"targets"`
	Assets  []struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	} `json:"assets"`
}

func TestScanRunsJobsOneAfterAnotherWithEnrichedPayloads(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 3, org)
	scan := createScan(t, g, org, []string{"localhost"},
		`[{"name": "first", "input": {"k": 1}}, {"name": "second"}, {"name": "third", "timeout_seconds": 60}]`)
	require.Equal(t, apiclient.ScanState("pending"), scan.State)
	require.Len(t, scan.Jobs, 3)
	require.Equal(t, 1, scanTasks(t, g, scan.Id), "only the first job's task exists")

	// Job 1 runs alone: even a worker with free slots gets nothing else.
	leases := lease(t, w, 3, 5)
	require.Len(t, leases, 1)
	var p jobPayload
	require.NoError(t, json.Unmarshal(leases[0].Task.Payload, &p))
	require.Equal(t, "first", p.Plugin)
	require.JSONEq(t, `{"k": 1}`, string(p.Input))
	require.Equal(t, []string{"localhost"}, p.Targets)
	require.Empty(t, p.Assets)
	require.Equal(t, scan.Jobs[0].Id, *leases[0].Task.ScanJobId)
	s := harness.ResultSender{T: t, W: w, Base: g.URL}
	require.Equal(t, http.StatusOK, s.Send(leases[0], "j1", scannerBatch(1, "localhost")).Status)
	require.Equal(t, 1, scanTasks(t, g, scan.Id), "job 2 waits for job 1 to end")
	completeAs(t, w, leases[0], "succeeded", nil)

	// Job 2's payload carries job 1's assets; it fails, and the scan goes on.
	leases = lease(t, w, 3, 5)
	require.Len(t, leases, 1)
	require.NoError(t, json.Unmarshal(leases[0].Task.Payload, &p))
	require.Equal(t, "second", p.Plugin)
	var found []string
	for _, a := range p.Assets {
		found = append(found, a.Type+":"+a.Value)
	}
	require.ElementsMatch(t, []string{"hostname:localhost", "ip:127.0.0.1"}, found)
	completeAs(t, w, leases[0], "failed", &apiclient.AttemptError{Code: "broken", Retryable: ptr(false)})

	leases = lease(t, w, 3, 5)
	require.Len(t, leases, 1)
	require.NoError(t, json.Unmarshal(leases[0].Task.Payload, &p))
	require.Equal(t, "third", p.Plugin)
	completeAs(t, w, leases[0], "succeeded", nil)

	res, err := g.Control.GetScanWithResponse(context.Background(), scan.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	got := res.JSON200
	require.Equal(t, apiclient.ScanState("completed"), got.State, "a failed job does not fail the scan")
	require.Equal(t, []apiclient.ScanState{"completed", "failed", "completed"},
		[]apiclient.ScanState{got.Jobs[0].State, got.Jobs[1].State, got.Jobs[2].State})
	require.NotNil(t, got.Jobs[2].Task)
	require.Equal(t, 60, *got.Jobs[2].Task.AttemptTimeoutSeconds)
	for i := 0; i < 2; i++ {
		require.False(t, got.Jobs[i+1].StartedAt.Before(*got.Jobs[i].CompletedAt), "job %d started after job %d ended", i+2, i+1)
	}

	assets, err := g.Control.ListAssetsWithResponse(context.Background(), org, &apiclient.ListAssetsParams{})
	require.NoError(t, err)
	require.Len(t, assets.JSON200.Items, 2)
	threats, err := g.Control.ListThreatsWithResponse(context.Background(), org, &apiclient.ListThreatsParams{})
	require.NoError(t, err)
	require.Len(t, threats.JSON200.Items, 1)
	require.Equal(t, 1, threats.JSON200.Items[0].Detections)
	require.Equal(t, "127.0.0.1", threats.JSON200.Items[0].Asset.Value)
}

func TestScanFailsWhenEveryJobFails(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	scan := createScan(t, g, org, []string{"localhost"}, `[{"name": "a"}, {"name": "b"}]`)
	for range 2 {
		l := lease(t, w, 1, 5)[0]
		completeAs(t, w, l, "failed", &apiclient.AttemptError{Code: "nope", Retryable: ptr(false)})
	}
	res, err := g.Control.GetScanWithResponse(context.Background(), scan.Id)
	require.NoError(t, err)
	require.Equal(t, apiclient.ScanState("failed"), res.JSON200.State)
}

func TestCancellingAScanMidwayLeavesNothingPending(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	scan := createScan(t, g, org, []string{"localhost"}, `[{"name": "a"}, {"name": "b"}, {"name": "c"}]`)
	l := lease(t, w, 1, 5)[0]

	res, err := g.Control.CancelScanWithResponse(context.Background(), scan.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Equal(t, apiclient.ScanState("cancelled"), res.JSON200.State)
	require.Equal(t, apiclient.TaskState("cancelling"), res.JSON200.Jobs[0].Task.State)

	hb, err := w.Client.HeartbeatAttemptWithResponse(context.Background(), l.AttemptId, &apiclient.HeartbeatAttemptParams{LeaseToken: l.LeaseToken})
	require.NoError(t, err)
	require.Equal(t, apiclient.LeaseState("cancel_requested"), hb.JSON200.State)
	completeAs(t, w, l, "cancelled", nil)

	require.Equal(t, 1, scanTasks(t, g, scan.Id), "no later job was created")
	var pending int
	require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_tasks
		WHERE scan_id = $1 AND state NOT IN ('completed', 'failed_terminal', 'cancelled')`, scan.Id).Scan(&pending))
	require.Zero(t, pending)
	got, err := g.Control.GetScanWithResponse(context.Background(), scan.Id)
	require.NoError(t, err)
	for _, j := range got.JSON200.Jobs {
		require.Equal(t, apiclient.ScanState("cancelled"), j.State)
	}
	again, err := g.Control.CancelScanWithResponse(context.Background(), scan.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, again.StatusCode(), "cancelling twice is harmless")
}

func TestScanAndResultRoutesAreOrganizationScoped(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	orgA := g.NewOrganization(t, "a")
	orgB := g.NewOrganization(t, "b")
	workerA := g.NewWorker(t, "wa", 1, orgA)
	workerB := g.NewWorker(t, "wb", 1, orgB)
	scanB := createScan(t, g, orgB, []string{"b.example"}, `[{"name": "x"}]`)
	lb := lease(t, workerB, 1, 5)[0]
	s := harness.ResultSender{T: t, W: workerB, Base: g.URL}
	require.Equal(t, http.StatusOK, s.Send(lb, "b1", scannerBatch(1, "secret-b.example")).Status)

	// A's worker posting to B's attempt: 404, nothing of B in the answer.
	a := harness.ResultSender{T: t, W: workerA, Base: g.URL}.Send(lb, "a1", scannerBatch(1, "a.example"))
	require.Equal(t, http.StatusNotFound, a.Status)
	require.NotContains(t, string(a.Body), "secret-b")

	tokenA, _, err := g.Store.CreateAPIToken(context.Background(), store.EveryOrganization(), storeTokenParams(orgA))
	require.NoError(t, err)
	scoped := g.ControlClient(t, tokenA)
	ctx := context.Background()
	checks := map[string]func() (int, []byte){
		"get scan": func() (int, []byte) {
			r, err := scoped.GetScanWithResponse(ctx, scanB.Id)
			require.NoError(t, err)
			return r.StatusCode(), r.Body
		},
		"cancel scan": func() (int, []byte) {
			r, err := scoped.CancelScanWithResponse(ctx, scanB.Id)
			require.NoError(t, err)
			return r.StatusCode(), r.Body
		},
		"results": func() (int, []byte) {
			r, err := scoped.ListTaskResultsWithResponse(ctx, lb.Task.Id, nil)
			require.NoError(t, err)
			return r.StatusCode(), r.Body
		},
		"assets": func() (int, []byte) {
			r, err := scoped.ListAssetsWithResponse(ctx, orgB, nil)
			require.NoError(t, err)
			return r.StatusCode(), r.Body
		},
		"threats": func() (int, []byte) {
			r, err := scoped.ListThreatsWithResponse(ctx, orgB, nil)
			require.NoError(t, err)
			return r.StatusCode(), r.Body
		},
		"create scan": func() (int, []byte) {
			r, err := scoped.CreateScanWithResponse(ctx, nil, apiclient.CreateScanRequest{OrganizationId: orgB, Targets: []string{"x"},
				Plugins: []apiclient.ScanPlugin{{Name: "x"}}})
			require.NoError(t, err)
			return r.StatusCode(), r.Body
		},
	}
	for name, call := range checks {
		status, body := call()
		require.Equal(t, http.StatusNotFound, status, name)
		require.NotContains(t, string(body), "secret-b", name)
	}
	list, err := scoped.ListScansWithResponse(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, list.JSON200.Items)
}
