package security

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestDatabaseReaderCannotForgeLeaseWrites: whoever can read the database
// learns nothing that works as a lease token. Every column of the attempt's
// row, as PostgreSQL prints it (and a bytea also as bare hex), is sent as
// the Lease-Token of a result batch, a heartbeat and a completion, by the
// worker that holds the lease: each is refused as lease-lost. The token the
// lease answer carried works.
func TestDatabaseReaderCannotForgeLeaseWrites(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	g.CreateTask(t, org, harness.TaskSpec{})
	l := pollLeases(t, w, "poll-"+uuid.NewString(), 1)[0]

	candidates := attemptRowValues(t, g, l.AttemptId)
	require.Contains(t, candidates, l.AttemptId.String(), "the row was read")
	var hashes int
	for _, c := range candidates {
		if _, err := hex.DecodeString(c); err == nil && len(c) == 64 {
			hashes++ // the stored token hash, as bare hex
		}
	}
	require.Equal(t, 1, hashes, "the token's hash is among the values tried")
	t.Logf("trying %d column values", len(candidates))

	for i, forged := range candidates {
		require.NotEqual(t, l.LeaseToken, forged)
		for _, call := range attemptCalls(l.AttemptId, i) {
			status, code := call.send(t, g, w, forged)
			require.Equal(t, http.StatusConflict, status, "%s with the column value %q", call.name, forged)
			require.Equal(t, "lease-lost", code, "%s with the column value %q", call.name, forged)
		}
	}
	for _, call := range attemptCalls(l.AttemptId, len(candidates)) {
		status, code := call.send(t, g, w, l.LeaseToken)
		require.Equal(t, http.StatusOK, status, "%s with the real token: %s", call.name, code)
	}
}

// TestPollReplayRotatesLeaseTokens: a poll repeated under its
// Idempotency-Key returns the same attempts with new tokens; the tokens of
// the first answer are refused from then on, the new ones work.
func TestPollReplayRotatesLeaseTokens(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 2, org)
	g.CreateTask(t, org, harness.TaskSpec{})
	g.CreateTask(t, org, harness.TaskSpec{})
	key := "poll-" + uuid.NewString()
	first := pollLeases(t, w, key, 2)
	replay := pollLeases(t, w, key, 2)

	require.ElementsMatch(t, attemptIDs(first), attemptIDs(replay), "the same attempts")
	oldToken := map[uuid.UUID]string{}
	for _, l := range first {
		oldToken[l.AttemptId] = l.LeaseToken
	}
	for i, l := range replay {
		require.NotEqual(t, oldToken[l.AttemptId], l.LeaseToken, "a fresh token")
		for _, call := range attemptCalls(l.AttemptId, i) {
			status, code := call.send(t, g, w, oldToken[l.AttemptId])
			require.Equal(t, http.StatusConflict, status, "%s with the replaced token", call.name)
			require.Equal(t, "lease-lost", code, "%s with the replaced token", call.name)
		}
		for _, call := range attemptCalls(l.AttemptId, i) {
			status, code := call.send(t, g, w, l.LeaseToken)
			require.Equal(t, http.StatusOK, status, "%s with the new token: %s", call.name, code)
		}
	}
}

// pollLeases polls once, without waiting, under key.
func pollLeases(t *testing.T, w *harness.Worker, key string, n int) []apiclient.Lease {
	t.Helper()
	wait := 0
	res, err := w.Client.AcquireLeasesWithResponse(context.Background(), &apiclient.AcquireLeasesParams{IdempotencyKey: &key},
		apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Len(t, res.JSON200.Leases, n)
	return res.JSON200.Leases
}

func attemptIDs(leases []apiclient.Lease) []uuid.UUID {
	ids := make([]uuid.UUID, len(leases))
	for i, l := range leases {
		ids[i] = l.AttemptId
	}
	return ids
}

// attemptRowValues reads every column of the attempt's row as text, the way
// PostgreSQL prints it (bytea as \x…, and also as bare hex), keeping the
// values a Lease-Token header may carry (16 to 128 characters).
func attemptRowValues(t *testing.T, g *harness.Gateway, attempt uuid.UUID) []string {
	t.Helper()
	rows, err := g.Pool.Query(context.Background(), `SELECT * FROM worker_task_attempts WHERE id = $1`,
		pgx.QueryExecModeSimpleProtocol, attempt) // the simple protocol answers every column as text
	require.NoError(t, err)
	defer rows.Close()
	require.True(t, rows.Next())
	var values []string
	for _, raw := range rows.RawValues() {
		if raw == nil {
			continue
		}
		text := string(raw)
		values = append(values, text)
		if bare, ok := strings.CutPrefix(text, `\x`); ok {
			values = append(values, bare)
		}
	}
	require.False(t, rows.Next())
	require.NoError(t, rows.Err())
	var usable []string
	for _, v := range values {
		if len(v) >= 16 && len(v) <= 128 && !strings.ContainsAny(v, "\r\n") {
			usable = append(usable, v)
		}
	}
	return usable
}

// attemptCall is one fenced call on an attempt, sent raw so the test sets
// the Lease-Token header itself.
type attemptCall struct {
	name, path string
	header     http.Header
	body       string
}

// attemptCalls are a result batch (its key made unique by n), a heartbeat
// and a completion, in that order.
func attemptCalls(attempt uuid.UUID, n int) []attemptCall {
	base := "/v1/attempts/" + attempt.String()
	return []attemptCall{
		{name: "results", path: base + "/results", header: http.Header{"Idempotency-Key": {fmt.Sprintf("%s:%d", attempt, n)}},
			body: `{"sequence_number": 1, "records": [{"kind": "asset", "asset": {"type": "hostname", "value": "a.example"}}]}`},
		{name: "heartbeat", path: base + "/heartbeat"},
		{name: "complete", path: base + "/complete", body: `{"outcome": "succeeded"}`},
	}
}

func (c attemptCall) send(t *testing.T, g *harness.Gateway, w *harness.Worker, token string) (status int, code string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.URL+c.path, bytes.NewReader([]byte(c.body)))
	require.NoError(t, err)
	for k, v := range c.header {
		req.Header[k] = v
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Lease-Token", token)
	res, err := w.HTTP.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	return res.StatusCode, p.Code
}
