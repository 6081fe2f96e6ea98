package operations

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

func TestMetricsAfterLeaseCycle(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)

	// A poll that waits, then is woken by a new task: wake latency.
	leased := harness.LeaseAsync(w.Client, apiclient.LeaseRequest{MaxTasks: harness.Ptr(1), WaitSeconds: harness.Ptr(10)})
	harness.WaitFor(t, 10*time.Second, "a waiting poll", func() bool {
		return scrape(t, g, g.AdminToken)["gateway_waiting_polls"] == 1
	})
	task := g.CreateTask(t, org, harness.TaskSpec{})
	leases := <-leased
	require.Len(t, leases, 1)
	l := leases[0]
	require.Equal(t, task, l.Task.Id)

	hb, err := w.Client.HeartbeatAttemptWithResponse(context.Background(), l.AttemptId, &apiclient.HeartbeatAttemptParams{LeaseToken: l.LeaseToken})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, hb.StatusCode(), string(hb.Body))
	batch, err := w.Client.HeartbeatWorkerWithResponse(context.Background(), apiclient.WorkerHeartbeatRequest{
		Leases: []apiclient.LeaseRef{{AttemptId: l.AttemptId, LeaseToken: l.LeaseToken}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, batch.StatusCode(), string(batch.Body))

	// A stale token is fenced off.
	stale, err := w.Client.HeartbeatAttemptWithResponse(context.Background(), l.AttemptId,
		&apiclient.HeartbeatAttemptParams{LeaseToken: strings.Repeat("0", len(l.LeaseToken))})
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, stale.StatusCode(), string(stale.Body))

	for range 2 { // the second completion is a replay
		res, err := w.Client.CompleteAttemptWithResponse(context.Background(), l.AttemptId,
			&apiclient.CompleteAttemptParams{LeaseToken: l.LeaseToken},
			apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcome("succeeded")})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	}

	m := scrape(t, g, g.AdminToken)
	require.GreaterOrEqual(t, m["gateway_lease_acquisition_seconds_count"], 2.0, "the empty pass and the winning one")
	require.Equal(t, 1.0, m["gateway_wake_latency_seconds_count"])
	require.Equal(t, 2.0, m["gateway_heartbeats_total"], "one single and one batch renewal")
	require.Equal(t, 1.0, m["gateway_fencing_rejections_total"])
	require.Equal(t, 1.0, m[`gateway_idempotent_replays_total{route="complete"}`])
	require.Equal(t, 1.0, m[`gateway_tasks{organization="`+org.String()+`",state="completed"}`])
	require.Equal(t, 0.0, m["gateway_waiting_polls"])
	require.Equal(t, 1.0, m["gateway_listen_connected"])
	require.Positive(t, m["gateway_sweeper_runs_total"])
	require.Equal(t, 2.0, m[`gateway_http_requests_total{code="200",route="POST /v1/attempts/{attempt_id}/complete"}`])
	require.Equal(t, 1.0, m[`gateway_http_requests_total{code="409",route="POST /v1/attempts/{attempt_id}/heartbeat"}`])
	require.Contains(t, m, "go_goroutines")
	for series := range m {
		require.NotContains(t, series, l.AttemptId.String(), "no ids in labels")
	}
}

func TestMetricsAccess(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")

	get := func(url, token string) int {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := g.HTTPClient(nil).Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, get(g.URL+"/metrics", ""))
	require.Equal(t, http.StatusUnauthorized, get(g.URL+"/metrics", "wgw_nope"))
	scoped, _, err := g.Store.CreateAPIToken(context.Background(), store.EveryOrganization(), storeTokenParams(org))
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, get(g.URL+"/metrics", scoped), "metrics name every organization")
	reader, _, err := g.Store.CreateAPIToken(context.Background(), store.EveryOrganization(), store.CreateAPITokenParams{Name: "metrics reader", Permissions: []string{"reader"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, get(g.URL+"/metrics", reader))

	// The ops surface: plain, unauthenticated, meant for an internal address.
	ops := httptest.NewServer(g.Server.OpsHandler())
	t.Cleanup(ops.Close)
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		res, err := http.Get(ops.URL + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, path+": "+string(body))
	}
}

func TestMetricsOffTheMainListenerWithOpsListener(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.MetricsOnMain = false }})
	req, err := http.NewRequest(http.MethodGet, g.URL+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+g.AdminToken)
	res, err := g.HTTPClient(nil).Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode)
}
