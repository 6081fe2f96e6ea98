package workerprotocol

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/protocol"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestProtocolVersionChecked: a poll announcing a protocol_version the
// gateway does not serve is refused — 400 unsupported-protocol-version,
// naming the versions served (internal/protocol) — leases nothing and
// stores nothing; the versions served are leased to and stored, and this
// release's runtime speaks one of them. (tests/upgrade runs the previous
// release's reference worker against this release.)
func TestProtocolVersionChecked(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{})

	newer := strconv.Itoa(mustAtoi(t, protocol.Current) + 1)
	for _, v := range []string{newer, "0", "one", protocol.Current + ".0"} {
		res := poll(t, w, v)
		require.Equal(t, http.StatusBadRequest, res.StatusCode(), "protocol_version %q: %s", v, res.Body)
		require.Equal(t, "application/problem+json", res.HTTPResponse.Header.Get("Content-Type"))
		require.Equal(t, "unsupported-protocol-version", harness.ProblemCode(t, res.Body), "protocol_version %q", v)
		require.Contains(t, string(res.Body), "protocol version "+protocol.Range(), "the refusal names the versions served")
	}
	require.Equal(t, "pending", string(g.Task(t, task).State), "a refused poll leases nothing")
	require.Nil(t, worker(t, g, w).ProtocolVersion, "a refused poll stores nothing")

	require.True(t, protocol.Supported(workerclient.ProtocolVersion), "this release's runtime speaks a version its gateway serves")
	res := poll(t, w, protocol.Oldest)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Len(t, res.JSON200.Leases, 1, "the oldest version served is leased to")
	require.Equal(t, protocol.Oldest, *worker(t, g, w).ProtocolVersion)
}

func poll(t *testing.T, w *harness.Worker, version string) *apiclient.AcquireLeasesResponse {
	t.Helper()
	n, wait := 1, 0
	res, err := w.Client.AcquireLeasesWithResponse(context.Background(), nil,
		apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait, ProtocolVersion: &version})
	require.NoError(t, err)
	return res
}

func worker(t *testing.T, g *harness.Gateway, w *harness.Worker) *apiclient.Worker {
	t.Helper()
	res, err := g.Control.GetWorkerWithResponse(context.Background(), w.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return res.JSON200
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
