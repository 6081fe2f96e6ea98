package workerprotocol

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

func expectedOffset(t *testing.T, body []byte) int64 {
	t.Helper()
	var p struct {
		Code           string `json:"code"`
		ExpectedOffset int64  `json:"expected_offset"`
	}
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, "log-offset-mismatch", p.Code)
	return p.ExpectedOffset
}

func TestLogsAppendIdempotentlyByOffset(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{})
	l := lease(t, w, 1, 5)[0]

	first := appendLog(t, w, l, 0, "hello ")
	require.Equal(t, http.StatusOK, first.StatusCode(), string(first.Body))
	require.Equal(t, int64(6), first.JSON200.NextOffset)
	require.Equal(t, apiclient.LeaseState("active"), first.JSON200.LeaseState)

	retried := appendLog(t, w, l, 0, "hello ")
	require.Equal(t, http.StatusOK, retried.StatusCode(), "a retried chunk is accepted once")
	require.Equal(t, int64(6), retried.JSON200.NextOffset)

	gap := appendLog(t, w, l, 10, "later")
	require.Equal(t, http.StatusConflict, gap.StatusCode())
	require.Equal(t, int64(6), expectedOffset(t, gap.Body))
	overlap := appendLog(t, w, l, 0, "HELLO ")
	require.Equal(t, http.StatusConflict, overlap.StatusCode(), "an overlap that disagrees is refused")
	require.Equal(t, int64(6), expectedOffset(t, overlap.Body))

	require.Equal(t, http.StatusOK, appendLog(t, w, l, 6, "wörld\n").StatusCode())
	text := readLog(t, g, task, 0, false)
	require.Equal(t, "hello wörld\n", text.Data)
	require.False(t, text.Complete)
	tail := readLog(t, g, task, 6, false)
	require.Equal(t, "wörld\n", tail.Data)

	// Follow mode waits for the attempt to end and then says so.
	done := make(chan *apiclient.LogText, 1)
	go func() { done <- readLog(t, g, task, int(text.NextOffset), true) }()
	completeAs(t, w, l, "succeeded", nil)
	followed := <-done
	require.True(t, followed.Complete, "follow returns when the attempt ends")
	require.Empty(t, followed.Data)

	late := appendLog(t, w, l, text.NextOffset, "too late")
	require.Equal(t, http.StatusConflict, late.StatusCode())
	require.Equal(t, "lease-lost", problemCode(t, late.Body))
}

func TestLogCapStoresOneMarkerAndDropsTheRest(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.Limits.LogBytesPerAttempt = 32 }})
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{})
	l := lease(t, w, 1, 5)[0]

	line := strings.Repeat("x", 20) + "\n"
	a := appendLog(t, w, l, 0, line)
	require.False(t, a.JSON200.Truncated)
	b := appendLog(t, w, l, 21, line)
	require.True(t, b.JSON200.Truncated, "the cap was reached")
	c := appendLog(t, w, l, 42, line)
	require.Equal(t, http.StatusOK, c.StatusCode(), "later data is accepted and dropped")
	require.True(t, c.JSON200.Truncated)
	require.Equal(t, int64(63), c.JSON200.NextOffset)

	text := readLog(t, g, task, 0, false)
	require.True(t, strings.HasPrefix(text.Data, line+strings.Repeat("x", 11)), text.Data)
	require.Equal(t, 1, strings.Count(text.Data, "[log truncated"), "one marker")
	require.True(t, *text.Truncated)
}
