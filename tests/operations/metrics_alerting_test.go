package operations

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestMetricsForAlerting: the series deploy/prometheus/alerts.yml watches
// are served with what they say — readiness and its checks, the
// certificates' expiry, the oldest due task's wait per organization, lease
// polls by outcome, and status codes (not classes) on requests.
func TestMetricsForAlerting(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)

	// A poll that finds nothing at once, then a task nobody takes yet.
	poll := func() []apiclient.Lease {
		n, wait := 1, 0
		res, err := w.Client.AcquireLeasesWithResponse(context.Background(), nil, apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		return res.JSON200.Leases
	}
	require.Empty(t, poll())
	g.CreateTask(t, org, harness.TaskSpec{})
	m := scrape(t, g, g.AdminToken)

	require.Equal(t, 1.0, m["gateway_ready"])
	for _, check := range []string{"database", "schema", "listen"} {
		require.Equal(t, 1.0, m[`gateway_readiness_check{check="`+check+`"}`], check)
	}
	now := float64(time.Now().Unix())
	require.Greater(t, m[`gateway_certificate_expiry_timestamp_seconds{certificate="serving"}`], now)
	require.Greater(t, m[`gateway_certificate_expiry_timestamp_seconds{certificate="enrollment_ca"}`], now)
	age, ok := m[`gateway_queue_oldest_age_seconds{organization="`+org.String()+`"}`]
	require.True(t, ok, "the organization with a due task has a queue age")
	require.GreaterOrEqual(t, age, 0.0)
	require.Equal(t, 1.0, m[`gateway_lease_poll_seconds_count{outcome="empty"}`])
	require.Equal(t, 0.0, m[`gateway_lease_poll_seconds_count{outcome="leased"}`])
	require.Equal(t, 1.0, m[`gateway_http_requests_total{code="200",route="POST /v1/leases"}`])

	require.Len(t, poll(), 1)
	m = scrape(t, g, g.AdminToken)
	require.Equal(t, 1.0, m[`gateway_lease_poll_seconds_count{outcome="leased"}`])
	require.NotContains(t, m, `gateway_queue_oldest_age_seconds{organization="`+org.String()+`"}`, "nothing is due any more")
	require.Equal(t, 0.0, m[`gateway_webhook_tries_total{outcome="failed"}`])
}
