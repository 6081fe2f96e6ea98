package operations

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestTypeScriptWorkerRunsTheProtocol runs the Node reference worker
// (clients/typescript/worker.js, built on the types openapi-typescript
// generated from openapi.yaml) against a real gateway, as a second proof
// that the contract alone is enough to write a worker: it leases three
// tasks at once, heartbeats with their fencing tokens, sends numbered result
// batches, and completes them as succeeded, failed and cancelled (the
// cancellation reaching it through a heartbeat). Everything is checked
// through the API. Then, revoked, it gets problem+json worker-revoked and
// exits.
func TestTypeScriptWorkerRunsTheProtocol(t *testing.T) {
	t.Parallel()
	dir := typeScriptClient(t)
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "node-worker", 3, org)
	files := t.TempDir()
	certFiles := map[string][]byte{"worker.pem": w.CertPEM, "worker-key.pem": w.KeyPEM, "ca.pem": g.CA.CertPEM}
	for name, data := range certFiles {
		require.NoError(t, os.WriteFile(filepath.Join(files, name), data, 0o600))
	}

	records := []string{
		`{"kind": "asset", "asset": {"type": "hostname", "value": "node.example"}}`,
		`{"kind": "asset", "asset": {"type": "ip", "value": "192.0.2.7"}}`,
		`{"kind": "threat", "asset": {"type": "ip", "value": "192.0.2.7"}, "external_id": "open-ssh", "title": "SSH open", "severity": "low"}`,
		`{"kind": "data", "data": {"source": "node", "n": 4}}`,
		`{"kind": "data", "data": {"source": "node", "n": 5}}`,
	}
	// emit waits for a heartbeat to renew its lease, then sends the records
	// in batches of two: 1 and 2, 3 and 4, then 5.
	emitTask := g.CreateTask(t, org, harness.TaskSpec{LeaseDurationSeconds: 6,
		Payload: `{"plugin": "emit", "input": {"heartbeats": 1, "batch_size": 2, "records": [` + strings.Join(records, ",") + `]}}`})
	failTask := g.CreateTask(t, org, harness.TaskSpec{MaxAttempts: 3,
		Payload: `{"plugin": "fail", "input": {"code": "target-unreachable", "message": "connection refused", "retryable": false}}`})
	sleepTask := g.CreateTask(t, org, harness.TaskSpec{LeaseDurationSeconds: 6,
		Payload: `{"plugin": "sleep", "input": {"seconds": 600}}`})

	run := startNodeWorker(t, dir, g.URL, files, "--slots", "3", "--wait", "5", "--tasks", "3")
	// The sleeping task is cancelled once it runs; only a heartbeat answer
	// tells the worker, which then completes it as cancelled.
	g.WaitTaskState(t, sleepTask, "running")
	res, err := g.Control.CancelTaskWithResponse(context.Background(), sleepTask)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.NoError(t, run.wait(), "the node worker failed; its output:\n%s", run.output())

	emitted := g.Task(t, emitTask)
	require.Equal(t, "completed", string(emitted.State), run.output())
	require.Len(t, emitted.Attempts, 1)
	require.Equal(t, "succeeded", string(emitted.Attempts[0].Status))
	require.Equal(t, w.ID, emitted.Attempts[0].WorkerId)
	results, err := g.Control.ListTaskResultsWithResponse(context.Background(), emitTask, &apiclient.ListTaskResultsParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, results.StatusCode(), string(results.Body))
	require.Len(t, results.JSON200.Items, 3, "three batches")
	var got []string
	for i, batch := range results.JSON200.Items {
		require.Equal(t, i+1, batch.SequenceNumber)
		for _, r := range batch.Records {
			b, err := json.Marshal(r)
			require.NoError(t, err)
			got = append(got, string(b))
		}
	}
	require.Len(t, got, len(records))
	for i := range records {
		require.JSONEq(t, records[i], got[i], "record %d", i)
	}
	require.Equal(t, 2, countRows(t, g, "assets"), "node.example and 192.0.2.7")
	require.Equal(t, 1, countRows(t, g, "threats"))

	failed := g.Task(t, failTask)
	require.Equal(t, "failed_terminal", string(failed.State), "a failure that is not retryable ends the task")
	require.Len(t, failed.Attempts, 1)
	require.Equal(t, "target-unreachable", deref(failed.Attempts[0].ErrorCode))
	require.Equal(t, "connection refused", deref(failed.Attempts[0].ErrorMessage))

	cancelled := g.Task(t, sleepTask)
	require.Equal(t, "cancelled", string(cancelled.State))
	require.Len(t, cancelled.Attempts, 1)
	require.Equal(t, "cancelled", string(cancelled.Attempts[0].Status))
	var told, completedCancelled bool
	for _, e := range run.events(t) {
		if e.AttemptID == cancelled.Attempts[0].Id.String() {
			told = told || e.Event == "heartbeat" && e.State == "cancel_requested"
			completedCancelled = completedCancelled || e.Event == "attempt completed" && e.Outcome == "cancelled"
		}
	}
	require.True(t, told, "no heartbeat answer said cancel_requested:\n%s", run.output())
	require.True(t, completedCancelled, run.output())

	// The worker's own account, in order for the emitting attempt: a
	// renewal answered active before the first batch, the batches
	// acknowledged 1, 2, 3, and a completion claiming the last.
	emitAttempt := emitted.Attempts[0].Id.String()
	var steps []string
	for _, e := range run.events(t) {
		if e.AttemptID != emitAttempt {
			continue
		}
		switch e.Event {
		case "heartbeat":
			require.Equal(t, "active", e.State)
			steps = append(steps, "heartbeat")
		case "results acknowledged":
			steps = append(steps, "results "+strconv.Itoa(e.SequenceNumber))
		case "attempt completed":
			require.Equal(t, "succeeded", e.Outcome)
			require.Equal(t, 3, e.LastSequenceNumber)
			require.Equal(t, "completed", e.TaskState)
			steps = append(steps, "completed")
		}
	}
	require.GreaterOrEqual(t, len(steps), 5, "%v", steps)
	require.Equal(t, "heartbeat", steps[0])
	require.Equal(t, []string{"results 1", "results 2", "results 3", "completed"}, withoutHeartbeats(steps))

	// Revoked, the worker is refused with problem+json worker-revoked: it
	// stops, exit status 1, saying so.
	revoke, err := g.Control.RevokeWorkerWithResponse(context.Background(), w.ID, apiclient.RevokeRequest{Reason: "test"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, revoke.StatusCode(), string(revoke.Body))
	refused := startNodeWorker(t, dir, g.URL, files, "--wait", "1", "--tasks", "1")
	err = refused.wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, refused.output())
	require.Equal(t, 1, exit.ExitCode(), refused.output())
	events := refused.events(t)
	last := events[len(events)-1]
	require.Equal(t, "fatal", last.Event, refused.output())
	require.Equal(t, "worker-revoked", last.Code)
	require.Equal(t, http.StatusForbidden, last.Status)
}

// TestTypeScriptWorkerTakesEachNextTaskWithItsCompletion: a one-slot node
// worker with a backlog polls once; each completion brings the next lease.
func TestTypeScriptWorkerTakesEachNextTaskWithItsCompletion(t *testing.T) {
	t.Parallel()
	dir := typeScriptClient(t)
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "node-worker", 1, org)
	files := t.TempDir()
	for name, data := range map[string][]byte{"worker.pem": w.CertPEM, "worker-key.pem": w.KeyPEM, "ca.pem": g.CA.CertPEM} {
		require.NoError(t, os.WriteFile(filepath.Join(files, name), data, 0o600))
	}
	var tasks []uuid.UUID
	for range 3 {
		tasks = append(tasks, g.CreateTask(t, org, harness.TaskSpec{Payload: `{"plugin": "echo", "input": {}}`, LeaseDurationSeconds: 300}))
	}
	run := startNodeWorker(t, dir, g.URL, files, "--slots", "1", "--wait", "5", "--tasks", "3")
	require.NoError(t, run.wait(), "the node worker failed; its output:\n%s", run.output())
	for _, id := range tasks {
		require.Equal(t, "completed", string(g.Task(t, id).State), run.output())
	}
	m := harness.Scrape(t, g, g.AdminToken)
	require.Equal(t, 1.0, m[`gateway_http_requests_total{code="200",route="POST /v1/leases"}`], "one poll; the other leases came with completions\n%s", run.output())
	require.Equal(t, 3, countRows(t, g, "worker_task_attempts"))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func withoutHeartbeats(steps []string) []string {
	var out []string
	for _, s := range steps {
		if s != "heartbeat" {
			out = append(out, s)
		}
	}
	return out
}

// nodeEvent is one JSON line the node worker writes to stdout.
type nodeEvent struct {
	Event              string `json:"event"`
	AttemptID          string `json:"attempt_id"`
	State              string `json:"state"`
	SequenceNumber     int    `json:"sequence_number"`
	Outcome            string `json:"outcome"`
	LastSequenceNumber int    `json:"last_sequence_number"`
	TaskState          string `json:"task_state"`
	Code               string `json:"code"`
	Status             int    `json:"status"`
}

// nodeRun is one run of the node worker.
type nodeRun struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan error
	exited chan struct{}
}

func (r *nodeRun) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stdout.Write(p)
}

func (r *nodeRun) wait() error { return <-r.done }

func (r *nodeRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return "stdout:\n" + r.stdout.String() + "stderr:\n" + r.stderr.String()
}

// events parses what the worker wrote to stdout: every line must be a JSON
// event.
func (r *nodeRun) events(t *testing.T) []nodeEvent {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []nodeEvent
	sc := bufio.NewScanner(bytes.NewReader(r.stdout.Bytes()))
	for sc.Scan() {
		var e nodeEvent
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), "not a JSON event: %s", sc.Text())
		out = append(out, e)
	}
	require.NotEmpty(t, out, "the node worker wrote nothing")
	return out
}

// startNodeWorker runs worker.js with the worker's certificate files; it
// is killed if it runs for more than two minutes (a loaded machine starts node slowly).
func startNodeWorker(t *testing.T, dir, url, files string, args ...string) *nodeRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	r := &nodeRun{cancel: cancel, done: make(chan error, 1), exited: make(chan struct{})}
	r.cmd = exec.CommandContext(ctx, "node", append([]string{"worker.js", "--gateway", url,
		"--cert", filepath.Join(files, "worker.pem"), "--key", filepath.Join(files, "worker-key.pem"),
		"--ca", filepath.Join(files, "ca.pem")}, args...)...)
	r.cmd.Dir = dir
	r.cmd.Stdout = r
	r.cmd.Stderr = lockedWriter{mu: &r.mu, w: &r.stderr}
	r.cmd.WaitDelay = 5 * time.Second
	require.NoError(t, r.cmd.Start())
	go func() {
		err := r.cmd.Wait()
		cancel()
		r.done <- err
		close(r.exited)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.exited
		if t.Failed() {
			t.Logf("node worker %v:\n%s", args, r.output())
		}
	})
	return r
}

var (
	typeScriptOnce sync.Once
	typeScriptDir  string
	typeScriptErr  error
)

// typeScriptClient returns clients/typescript with its npm dependencies
// installed: node and npm from Debian when missing and we are root (the
// test is skipped, saying why, when they cannot be installed), then
// `npm ci` once when node_modules is missing (`make test` has run it
// already).
func typeScriptClient(t *testing.T) string {
	t.Helper()
	harness.RequirePackages(t, map[string]string{"node": "nodejs", "npm": "npm"})
	typeScriptOnce.Do(func() {
		dir, err := filepath.Abs(filepath.Join("..", "..", "clients", "typescript"))
		if err != nil {
			typeScriptErr = err
			return
		}
		typeScriptDir = dir
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "openapi-fetch")); err == nil {
			return
		} else if !errors.Is(err, os.ErrNotExist) {
			typeScriptErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		install := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		install.Dir = dir
		if out, err := install.CombinedOutput(); err != nil {
			typeScriptErr = errors.New("npm ci in clients/typescript: " + err.Error() + "\n" + string(out))
		}
	})
	require.NoError(t, typeScriptErr)
	return typeScriptDir
}
