package identity

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
)

// TestWorkerRateLimit: a worker past its burst is refused with 429
// problem+json and a Retry-After; another worker is not affected; the Go
// runtime honours the Retry-After and its task still completes.
func TestWorkerRateLimit(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) {
		c.Limits.WorkerRate = 0.5 // one request every 2 s once the burst is spent
		c.Limits.WorkerBurst = 3
	}})
	org := g.NewOrganization(t, "acme")
	greedy := g.NewWorker(t, "greedy", 1, org)
	calm := g.NewWorker(t, "calm", 1, org)

	poll := func(w *harness.Worker) (int, http.Header, []byte) {
		req, err := http.NewRequest(http.MethodPost, g.URL+"/v1/leases", strings.NewReader(`{"max_tasks":1,"wait_seconds":0}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		res, err := w.HTTP.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, raw
	}
	var refused int
	for range 6 {
		status, header, raw := poll(greedy)
		if status == http.StatusTooManyRequests {
			refused++
			require.Equal(t, "too-many-requests", requireProblem(t, status, header, raw))
			secs, err := strconv.Atoi(header.Get("Retry-After"))
			require.NoError(t, err)
			require.Positive(t, secs)
			continue
		}
		require.Equal(t, http.StatusOK, status, string(raw))
	}
	require.GreaterOrEqual(t, refused, 2, "past the burst of 3, most of 6 quick polls are refused")
	status, _, raw := poll(calm)
	require.Equal(t, http.StatusOK, status, "another worker has its own bucket: %s", raw)

	// The runtime backs off by Retry-After and still gets its task done.
	task := g.CreateTask(t, org, harness.TaskSpec{})
	stop := greedy.Runtime(t, 1, func(context.Context, *workerclient.LeasedTask) error { return nil })
	defer stop()
	g.WaitTaskState(t, task, "completed")
}
