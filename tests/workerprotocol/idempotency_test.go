package workerprotocol

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
)

// TestCreationIsIdempotentOverHTTP: repeating a task or scan creation with
// the same Idempotency-Key and the same meaning (however formatted) answers
// 200 with the first resource and Idempotent-Replayed: true; another body
// under the key is 422; nothing is created twice.
func TestCreationIsIdempotentOverHTTP(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	post := func(path, key, body string) (int, string, string) {
		req, err := http.NewRequest(http.MethodPost, g.URL+path, bytes.NewReader([]byte(body)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+g.AdminToken)
		req.Header.Set("Idempotency-Key", key)
		res, err := g.HTTPClient(nil).Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var out struct {
			ID   string `json:"id"`
			Code string `json:"code"`
		}
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
		if res.StatusCode == http.StatusOK {
			require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"))
		}
		return res.StatusCode, out.ID, out.Code
	}

	task := `{"organization_id": "` + org.String() + `", "task_type": "scanner_plugin", "payload": {"a": 1, "b": [1, 2]}}`
	sameTask := `{"payload": {"b": [1,2], "a": 1}, "task_type": "scanner_plugin", "organization_id": "` + org.String() + `"}`
	status, first, _ := post("/v1/tasks", "t-1", task)
	require.Equal(t, http.StatusCreated, status)
	status, again, _ := post("/v1/tasks", "t-1", sameTask)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, first, again)
	status, _, code := post("/v1/tasks", "t-1", `{"organization_id": "`+org.String()+`", "task_type": "scanner_plugin", "payload": {"a": 2}}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Equal(t, "idempotency-key-reused", code)
	require.Equal(t, 1, countRows(t, g, "worker_tasks"))

	scan := `{"organization_id": "` + org.String() + `", "targets": ["localhost"], "plugins": [{"name": "echo"}]}`
	status, firstScan, _ := post("/v1/scans", "s-1", scan)
	require.Equal(t, http.StatusCreated, status)
	status, againScan, _ := post("/v1/scans", "s-1", scan)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, firstScan, againScan)
	status, _, code = post("/v1/scans", "s-1", `{"organization_id": "`+org.String()+`", "targets": ["other"], "plugins": [{"name": "echo"}]}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Equal(t, "idempotency-key-reused", code)
	require.Equal(t, 1, countRows(t, g, "scans"))
	require.Equal(t, 2, countRows(t, g, "worker_tasks"), "the task and the scan's first job, once each")
}
