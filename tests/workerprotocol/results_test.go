package workerprotocol

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

func TestResultBatchTakesEffectOnceSequentiallyAndConcurrently(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	g.CreateTask(t, org, harness.TaskSpec{})
	l := lease(t, w, 1, 5)[0]
	s := harness.ResultSender{T: t, W: w, Base: g.URL}

	first := s.Send(l, "k1", scannerBatch(1, "Example.COM."))
	require.Equal(t, http.StatusOK, first.Status, string(first.Body))
	require.False(t, first.Replayed)
	require.Equal(t, "active", first.State)
	again := s.Send(l, "k1", scannerBatch(1, "Example.COM."))
	require.Equal(t, http.StatusOK, again.Status)
	require.True(t, again.Replayed)
	require.Equal(t, first.Body, again.Body, "a replay answers byte for byte the same")

	// The same meaning formatted differently is the same request.
	reformatted := `{"records": [{"details": {"source": "test"}, "asset": {"value": "Example.COM.", "type": "hostname"}, "kind": "asset"},
		{"kind": "asset", "asset": {"type": "ip", "value": "127.0.0.1"}},
		{"kind": "threat", "asset": {"type": "ip", "value": "127.0.0.1"}, "external_id": "open-ssh", "title": "SSH open", "severity": "low"},
		{"kind": "data", "data": {"note": "kept for producers"}}], "sequence_number": 1}`
	require.Equal(t, first.Body, s.Send(l, "k1", reformatted).Body)

	// Concurrent duplicates of a new batch: one ingests, all get the same answer.
	var wg sync.WaitGroup
	answers := make(chan harness.BatchAnswer, 8)
	for range 8 {
		wg.Go(func() { answers <- s.SendUntilSettled(l, "k2", scannerBatch(2, "other.example")) })
	}
	wg.Wait()
	close(answers)
	var bodies [][]byte
	for a := range answers {
		require.Equal(t, http.StatusOK, a.Status, string(a.Body))
		bodies = append(bodies, a.Body)
	}
	for _, b := range bodies[1:] {
		require.Equal(t, bodies[0], b)
	}

	require.Equal(t, 3, countRows(t, g, "assets"), "example.com, other.example and 127.0.0.1, once each")
	require.Equal(t, 1, countRows(t, g, "threats"))
	require.Equal(t, 2, countRows(t, g, "worker_result_batches"))

	// Same key, other body: refused; nothing ingested.
	other := s.Send(l, "k1", scannerBatch(1, "different.example"))
	require.Equal(t, http.StatusUnprocessableEntity, other.Status)
	require.Equal(t, "idempotency-key-reused", problemCode(t, other.Body))
	// A new key reusing a sequence number: refused.
	reused := s.Send(l, "k3", scannerBatch(1, "third.example"))
	require.Equal(t, http.StatusConflict, reused.Status)
	require.Equal(t, "sequence-number-used", problemCode(t, reused.Body))
	// A missing key is a bad request.
	missing := s.Send(l, "", scannerBatch(9, "x.example"))
	require.Equal(t, http.StatusBadRequest, missing.Status)
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
	s := harness.ResultSender{T: t, W: stale, Base: g.URL}
	first := s.Send(l, "k1", scannerBatch(1, "a.example"))
	require.Equal(t, http.StatusOK, first.Status, string(first.Body))

	g.ExpireLeases(t, task)
	g.WaitTaskState(t, task, "retry_wait")
	g.EditTasks(t, `UPDATE worker_tasks SET available_at = now() WHERE id = $1`, task)
	fresh := g.NewWorker(t, "fresh", 1, org)
	require.Len(t, lease(t, fresh, 1, 5), 1, "the task moved to another worker")

	replay := s.Send(l, "k1", scannerBatch(1, "a.example"))
	require.Equal(t, http.StatusOK, replay.Status, "the first write was fenced; its replay is acknowledged")
	require.True(t, replay.Replayed)
	require.Equal(t, first.Body, replay.Body)
	require.Equal(t, "lost", replay.State)

	late := s.Send(l, "k2", scannerBatch(2, "b.example"))
	require.Equal(t, http.StatusConflict, late.Status)
	require.Equal(t, "lease-lost", problemCode(t, late.Body))
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
	retry := harness.ResultSender{T: t, W: w, Base: survivor.URL}.Send(l, "crash-1", body)
	require.Equal(t, http.StatusOK, retry.Status, string(retry.Body))
	require.True(t, retry.Replayed)
	var ack apiclient.ResultAck
	require.NoError(t, json.Unmarshal(retry.Body, &ack))
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
	s := harness.ResultSender{T: t, W: w, Base: g.URL}
	require.Equal(t, http.StatusOK, s.Send(first, first.AttemptId.String()+":1", scannerBatch(1, "localhost")).Status)
	g.ExpireLeases(t, task)
	g.WaitTaskState(t, task, "retry_wait")
	g.EditTasks(t, `UPDATE worker_tasks SET available_at = now() WHERE id = $1`, task)
	second := lease(t, w, 1, 5)[0]
	require.Equal(t, 2, second.Task.AttemptNumber)
	require.Equal(t, http.StatusOK, s.Send(second, second.AttemptId.String()+":1", scannerBatch(1, "localhost")).Status)

	require.Equal(t, 2, countRows(t, g, "assets"), "localhost and 127.0.0.1")
	require.Equal(t, 1, countRows(t, g, "threats"))
	require.Equal(t, 1, countRows(t, g, "threat_detections"), "one detection per (threat, scan job)")
}
