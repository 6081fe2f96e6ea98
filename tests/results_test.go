package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// resultSender posts raw result batches, so tests control bytes and keys.
type resultSender struct {
	t    *testing.T
	w    *harness.Worker
	base string
}

type batchAnswer struct {
	status   int
	body     []byte
	replayed bool
	state    string
}

func (s resultSender) send(l apiclient.Lease, key string, body string) batchAnswer {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.base+"/v1/attempts/"+l.AttemptId.String()+"/results", bytes.NewReader([]byte(body)))
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Lease-Token", l.LeaseToken)
	req.Header.Set("Idempotency-Key", key)
	res, err := s.w.HTTP.Do(req)
	require.NoError(s.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(s.t, err)
	return batchAnswer{status: res.StatusCode, body: raw, replayed: res.Header.Get("Idempotent-Replayed") == "true", state: res.Header.Get("Lease-State")}
}

// sendUntilSettled retries while the key is in flight, as a worker would.
func (s resultSender) sendUntilSettled(l apiclient.Lease, key, body string) batchAnswer {
	for {
		a := s.send(l, key, body)
		if a.status != http.StatusConflict || problemCode(s.t, a.body) != "idempotency-in-flight" {
			return a
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func scannerBatch(seq int, host string) string {
	return fmt.Sprintf(`{"sequence_number": %d, "records": [
		{"kind": "asset", "asset": {"type": "hostname", "value": %q}, "details": {"source": "test"}},
		{"kind": "asset", "asset": {"type": "ip", "value": "127.0.0.1"}},
		{"kind": "threat", "asset": {"type": "ip", "value": "127.0.0.1"}, "external_id": "open-ssh", "title": "SSH open", "severity": "low"},
		{"kind": "data", "data": {"note": "kept for producers"}}]}`, seq, host)
}

func countRows(t *testing.T, g *harness.Gateway, table string) int {
	t.Helper()
	var n int
	require.NoError(t, g.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

func TestResultBatchTakesEffectOnceSequentiallyAndConcurrently(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	g.CreateTask(t, org, harness.TaskSpec{})
	l := lease(t, w, 1, 5)[0]
	s := resultSender{t: t, w: w, base: g.URL}

	first := s.send(l, "k1", scannerBatch(1, "Example.COM."))
	require.Equal(t, http.StatusOK, first.status, string(first.body))
	require.False(t, first.replayed)
	require.Equal(t, "active", first.state)
	again := s.send(l, "k1", scannerBatch(1, "Example.COM."))
	require.Equal(t, http.StatusOK, again.status)
	require.True(t, again.replayed)
	require.Equal(t, first.body, again.body, "a replay answers byte for byte the same")

	// The same meaning formatted differently is the same request.
	reformatted := `{"records": [{"details": {"source": "test"}, "asset": {"value": "Example.COM.", "type": "hostname"}, "kind": "asset"},
		{"kind": "asset", "asset": {"type": "ip", "value": "127.0.0.1"}},
		{"kind": "threat", "asset": {"type": "ip", "value": "127.0.0.1"}, "external_id": "open-ssh", "title": "SSH open", "severity": "low"},
		{"kind": "data", "data": {"note": "kept for producers"}}], "sequence_number": 1}`
	require.Equal(t, first.body, s.send(l, "k1", reformatted).body)

	// Concurrent duplicates of a new batch: one ingests, all get the same answer.
	var wg sync.WaitGroup
	answers := make(chan batchAnswer, 8)
	for range 8 {
		wg.Go(func() { answers <- s.sendUntilSettled(l, "k2", scannerBatch(2, "other.example")) })
	}
	wg.Wait()
	close(answers)
	var bodies [][]byte
	for a := range answers {
		require.Equal(t, http.StatusOK, a.status, string(a.body))
		bodies = append(bodies, a.body)
	}
	for _, b := range bodies[1:] {
		require.Equal(t, bodies[0], b)
	}

	require.Equal(t, 3, countRows(t, g, "assets"), "example.com, other.example and 127.0.0.1, once each")
	require.Equal(t, 1, countRows(t, g, "threats"))
	require.Equal(t, 2, countRows(t, g, "worker_result_batches"))

	// Same key, other body: refused; nothing ingested.
	other := s.send(l, "k1", scannerBatch(1, "different.example"))
	require.Equal(t, http.StatusUnprocessableEntity, other.status)
	require.Equal(t, "idempotency-key-reused", problemCode(t, other.body))
	// A new key reusing a sequence number: refused.
	reused := s.send(l, "k3", scannerBatch(1, "third.example"))
	require.Equal(t, http.StatusConflict, reused.status)
	require.Equal(t, "sequence-number-used", problemCode(t, reused.body))
	// A missing key is a bad request.
	missing := s.send(l, "", scannerBatch(9, "x.example"))
	require.Equal(t, http.StatusBadRequest, missing.status)
	require.Equal(t, 3, countRows(t, g, "assets"))

	// Producers page through the stored records.
	res, err := g.Control.ListTaskResultsWithResponse(context.Background(), l.Task.Id, &apiclient.ListTaskResultsParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Len(t, res.JSON200.Items, 2)
	require.Len(t, res.JSON200.Items[0].Records, 4)
	require.Equal(t, 1, res.JSON200.Items[0].SequenceNumber)
}

func TestResultReplayAfterLeaseEndedIsAcknowledgedButNewBatchIsRefused(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	stale := g.NewWorker(t, "stale", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{})
	l := lease(t, stale, 1, 5)[0]
	s := resultSender{t: t, w: stale, base: g.URL}
	first := s.send(l, "k1", scannerBatch(1, "a.example"))
	require.Equal(t, http.StatusOK, first.status, string(first.body))

	g.ExpireLeases(t, task)
	g.WaitTaskState(t, task, "retry_wait")
	g.EditTasks(t, `UPDATE worker_tasks SET available_at = now() WHERE id = $1`, task)
	fresh := g.NewWorker(t, "fresh", 1, org)
	require.Len(t, lease(t, fresh, 1, 5), 1, "the task moved to another worker")

	replay := s.send(l, "k1", scannerBatch(1, "a.example"))
	require.Equal(t, http.StatusOK, replay.status, "the first write was fenced; its replay is acknowledged")
	require.True(t, replay.replayed)
	require.Equal(t, first.body, replay.body)
	require.Equal(t, "lost", replay.state)

	late := s.send(l, "k2", scannerBatch(2, "b.example"))
	require.Equal(t, http.StatusConflict, late.status)
	require.Equal(t, "lease-lost", problemCode(t, late.body))
	require.Equal(t, 2, countRows(t, g, "assets"), "a.example and 127.0.0.1 only")
}

// TestCrashBetweenCommitAndAnswerIngestsNothingTwice kills the gateway
// process right after the batch's transaction committed and before it
// answered; the worker retries against a new process and gets the original
// acknowledgement.
func TestCrashBetweenCommitAndAnswerIngestsNothingTwice(t *testing.T) {
	t.Parallel()
	g, procs := harness.StartProcesses(t, 1)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	g.CreateTask(t, org, harness.TaskSpec{})
	require.NoError(t, procs[0].Stop(syscall.SIGTERM))

	doomed := g.StartProcess(t, "GATEWAY_FAILPOINTS=results-after-commit")
	onDoomed, err := apiclient.NewClientWithResponses(doomed.URL, apiclient.WithHTTPClient(w.HTTP))
	require.NoError(t, err)
	n, wait := 1, 5
	res, err := onDoomed.AcquireLeasesWithResponse(context.Background(), nil, apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait})
	require.NoError(t, err)
	require.Len(t, res.JSON200.Leases, 1)
	l := res.JSON200.Leases[0]

	body := scannerBatch(1, "crash.example")
	req, err := http.NewRequest(http.MethodPost, doomed.URL+"/v1/attempts/"+l.AttemptId.String()+"/results", bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Lease-Token", l.LeaseToken)
	req.Header.Set("Idempotency-Key", "crash-1")
	_, err = w.HTTP.Do(req)
	require.Error(t, err, "the gateway died before answering")
	require.Error(t, doomed.Wait(10*time.Second))
	require.Equal(t, 1, countRows(t, g, "worker_result_batches"), "the batch had committed")

	survivor := g.StartProcess(t)
	retry := resultSender{t: t, w: w, base: survivor.URL}.send(l, "crash-1", body)
	require.Equal(t, http.StatusOK, retry.status, string(retry.body))
	require.True(t, retry.replayed)
	var ack apiclient.ResultAck
	require.NoError(t, json.Unmarshal(retry.body, &ack))
	require.Equal(t, 1, ack.SequenceNumber)
	require.Equal(t, 2, countRows(t, g, "assets"))
	require.Equal(t, 1, countRows(t, g, "threats"))
	require.Equal(t, 1, countRows(t, g, "worker_result_batches"))
}

func TestTwoAttemptsOfOneJobIngestOneAssetThreatAndDetection(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	scan := createScan(t, g, org, []string{"localhost"}, `[{"name": "probe"}]`)
	job := scan.Jobs[0]
	task := job.Task.Id

	first := lease(t, w, 1, 5)[0]
	s := resultSender{t: t, w: w, base: g.URL}
	require.Equal(t, http.StatusOK, s.send(first, first.AttemptId.String()+":1", scannerBatch(1, "localhost")).status)
	g.ExpireLeases(t, task)
	g.WaitTaskState(t, task, "retry_wait")
	g.EditTasks(t, `UPDATE worker_tasks SET available_at = now() WHERE id = $1`, task)
	second := lease(t, w, 1, 5)[0]
	require.Equal(t, 2, second.Task.AttemptNumber)
	require.Equal(t, http.StatusOK, s.send(second, second.AttemptId.String()+":1", scannerBatch(1, "localhost")).status)

	require.Equal(t, 2, countRows(t, g, "assets"), "localhost and 127.0.0.1")
	require.Equal(t, 1, countRows(t, g, "threats"))
	require.Equal(t, 1, countRows(t, g, "threat_detections"), "one detection per (threat, scan job)")
}

func createScan(t *testing.T, g *harness.Gateway, org uuid.UUID, targets []string, plugins string) *apiclient.Scan {
	t.Helper()
	var ps []apiclient.ScanPlugin
	require.NoError(t, json.Unmarshal([]byte(plugins), &ps))
	res, err := g.Control.CreateScanWithResponse(context.Background(), nil, apiclient.CreateScanRequest{
		OrganizationId: org, Targets: targets, Plugins: ps})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201
}
