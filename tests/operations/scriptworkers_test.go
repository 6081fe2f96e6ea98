package operations

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// scriptFiles writes the worker's certificate and key and the CA to a
// temporary directory, and an env file naming them as `make run` does.
func scriptFiles(t *testing.T, g *harness.Gateway, w *harness.Worker) (env string, files map[string]string) {
	t.Helper()
	dir := t.TempDir()
	files = map[string]string{
		"CA_CERT":     filepath.Join(dir, "ca.pem"),
		"WORKER_CERT": filepath.Join(dir, "worker.pem"),
		"WORKER_KEY":  filepath.Join(dir, "worker-key.pem"),
	}
	require.NoError(t, os.WriteFile(files["CA_CERT"], g.CA.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(files["WORKER_CERT"], w.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(files["WORKER_KEY"], w.KeyPEM, 0o600))
	var b strings.Builder
	b.WriteString("# test env\n")
	fmt.Fprintf(&b, "GATEWAY_URL=%s\n", g.URL)
	for _, k := range []string{"CA_CERT", "WORKER_CERT", "WORKER_KEY"} {
		fmt.Fprintf(&b, "%s=%s\n", k, files[k])
	}
	env = filepath.Join(dir, "env")
	require.NoError(t, os.WriteFile(env, []byte(b.String()), 0o600))
	return env, files
}

// scriptEnv is a minimal environment for worker scripts, so nothing from the
// developer's shell (a sourced .dev/env, say) leaks into them.
func scriptEnv() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LANG=C.UTF-8"}
	for _, k := range []string{"PYENV_ROOT", "PYENV_VERSION", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func scriptPath(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "scripts", rel))
	require.NoError(t, err)
	_, err = os.Stat(p)
	require.NoError(t, err)
	return p
}

func listAssets(t *testing.T, g *harness.Gateway, org uuid.UUID) []string {
	t.Helper()
	res, err := g.Control.ListAssetsWithResponse(context.Background(), org, &apiclient.ListAssetsParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	var out []string
	for _, a := range res.JSON200.Items {
		out = append(out, a.Type+":"+a.Value)
	}
	return out
}

func TestCurlWorkerScriptRunsOneTaskThroughTheWholeProtocol(t *testing.T) {
	t.Parallel()
	requireTools(t, "bash", "curl", "jq")
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "curl", 1, org)
	env, _ := scriptFiles(t, g, w)
	// A lease long enough for a loaded machine: the script is slow to start its steps there.
	task := g.CreateTask(t, org, harness.TaskSpec{Payload: `{"plugin": "echo", "input": {"host": "curl.example"}}`, LeaseDurationSeconds: 300})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", scriptPath(t, "curl-worker.sh"), env, "--wait", "5")
	cmd.Env = scriptEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), `"task_state":"completed"`)

	detail := g.Task(t, task)
	require.Equal(t, "completed", string(detail.State))
	require.Len(t, detail.Attempts, 1)
	require.Equal(t, apiclient.AttemptStatus("succeeded"), detail.Attempts[0].Status)

	results, err := g.Control.ListTaskResultsWithResponse(context.Background(), task, &apiclient.ListTaskResultsParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, results.StatusCode(), string(results.Body))
	require.Len(t, results.JSON200.Items, 1)
	require.Equal(t, 1, results.JSON200.Items[0].SequenceNumber)
	require.Equal(t, 1, countRows(t, g, "worker_result_batches"))
	require.Equal(t, []string{"hostname:curl.example"}, listAssets(t, g, org))

	files, err := g.Control.ListTaskArtifactsWithResponse(context.Background(), task)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, files.StatusCode(), string(files.Body))
	require.Len(t, files.JSON200.Items, 1)
	require.Equal(t, "report.json", files.JSON200.Items[0].Name)
	require.Equal(t, "application/json", files.JSON200.Items[0].ContentType)
	require.Positive(t, files.JSON200.Items[0].SizeBytes)

	logText := readLog(t, g, task, 0, false)
	require.Equal(t, "curl-worker: asset curl.example reported\n", logText.Data)
	require.True(t, logText.Complete)
}

// TestCurlWorkerScriptTakesEachNextTaskWithItsCompletion: with --tasks the
// script works through a backlog polling once: each completion brings the
// next lease.
func TestCurlWorkerScriptTakesEachNextTaskWithItsCompletion(t *testing.T) {
	t.Parallel()
	requireTools(t, "bash", "curl", "jq")
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "curl", 1, org)
	env, _ := scriptFiles(t, g, w)
	var tasks []uuid.UUID
	for range 3 {
		tasks = append(tasks, g.CreateTask(t, org, harness.TaskSpec{Payload: `{"plugin": "echo", "input": {"host": "curl.example"}}`, LeaseDurationSeconds: 300}))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", scriptPath(t, "curl-worker.sh"), env, "--wait", "5", "--tasks", "3")
	cmd.Env = scriptEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	for _, id := range tasks {
		require.Equal(t, "completed", string(g.Task(t, id).State))
	}
	m := harness.Scrape(t, g, g.AdminToken)
	require.Equal(t, 1.0, m[`gateway_http_requests_total{code="200",route="POST /v1/leases"}`], "one poll; the other leases came with completions")
	require.Equal(t, 3.0, m[`gateway_http_requests_total{code="200",route="POST /v1/attempts/{attempt_id}/complete"}`])
	require.Equal(t, 3, countRows(t, g, "worker_task_attempts"))
}

func TestCurlWorkerScriptExitsCleanlyWithoutATask(t *testing.T) {
	t.Parallel()
	requireTools(t, "bash", "curl", "jq")
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "curl", 1, org)
	env, _ := scriptFiles(t, g, w)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", scriptPath(t, "curl-worker.sh"), env, "--wait", "1")
	cmd.Env = scriptEnv()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "no task within 1s")
}

// pythonWorker runs scripts/python-worker/worker.py as w against g with extra
// arguments. wait blocks until it exits (bounded by 60 s) and returns its
// output; it is stopped at cleanup in any case.
func pythonWorker(t *testing.T, g *harness.Gateway, w *harness.Worker, args ...string) (wait func() string, cmd *exec.Cmd) {
	t.Helper()
	requireTools(t, "python3")
	_, files := scriptFiles(t, g, w)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd = exec.CommandContext(ctx, "python3", append([]string{scriptPath(t, "python-worker/worker.py"),
		"--gateway", g.URL, "--ca", files["CA_CERT"], "--cert", files["WORKER_CERT"], "--key", files["WORKER_KEY"],
		"--wait", "5", "--max-seconds", "50"}, args...)...)
	cmd.Env = append(scriptEnv(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	var out bytes.Buffer
	var mu sync.Mutex
	cmd.Stdout = lockedWriter{&mu, &out}
	cmd.Stderr = lockedWriter{&mu, &out}
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var once sync.Once
	var runErr error
	finish := func() {
		once.Do(func() {
			runErr = <-done
			cancel()
		})
	}
	t.Cleanup(func() {
		cancel()
		finish()
		if t.Failed() {
			mu.Lock()
			t.Logf("python worker output:\n%s", out.String())
			mu.Unlock()
		}
	})
	return func() string {
		finish()
		mu.Lock()
		defer mu.Unlock()
		require.NoError(t, runErr, out.String())
		return out.String()
	}, cmd
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestPythonWorkerIngestsARetriedResultBatchOnce(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "python", 2, org)
	// A lease long enough for a loaded machine: the script is slow to start its steps there.
	task := g.CreateTask(t, org, harness.TaskSpec{Payload: `{"plugin": "echo", "input": {"host": "py.example"}}`, LeaseDurationSeconds: 300})

	wait, _ := pythonWorker(t, g, w, "--fault-drop-first-result-answer", "--once", "1", "--slots", "2")
	out := wait()
	require.Contains(t, out, "dropping the answer to batch 1")
	require.Contains(t, out, "batch 1 acknowledged (replayed)", "the second send was answered from the first")

	detail := g.WaitTaskState(t, task, "completed")
	require.Len(t, detail.Attempts, 1)
	require.Equal(t, apiclient.AttemptStatus("succeeded"), detail.Attempts[0].Status)
	require.Equal(t, 1, countRows(t, g, "worker_result_batches"), "the batch was ingested once")
	require.Equal(t, 1, countRows(t, g, "assets"))
	require.Equal(t, []string{"hostname:py.example"}, listAssets(t, g, org))
	require.Equal(t, "echo: reporting py.example\n", readLog(t, g, task, 0, false).Data)
}

// TestPythonWorkerTakesEachNextTaskWithItsCompletion: a one-slot Python
// worker with a backlog polls once; each completion brings the next lease.
func TestPythonWorkerTakesEachNextTaskWithItsCompletion(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "python", 1, org)
	var tasks []uuid.UUID
	for range 3 {
		tasks = append(tasks, g.CreateTask(t, org, harness.TaskSpec{Payload: `{"plugin": "echo", "input": {"host": "py.example"}}`, LeaseDurationSeconds: 300}))
	}
	wait, _ := pythonWorker(t, g, w, "--once", "3")
	out := wait()
	for _, id := range tasks {
		require.Equal(t, "completed", string(g.WaitTaskState(t, id, "completed").State))
	}
	require.Equal(t, 2, strings.Count(out, "the next lease came with it"), out)
	m := harness.Scrape(t, g, g.AdminToken)
	require.Equal(t, 1.0, m[`gateway_http_requests_total{code="200",route="POST /v1/leases"}`], "one poll; the other leases came with completions")
	require.Equal(t, 3, countRows(t, g, "worker_task_attempts"))
}

func TestPythonWorkerHonoursCancellation(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "python", 1, org)
	// A short lease makes the heartbeat interval (a third of it) short too.
	task := g.CreateTask(t, org, harness.TaskSpec{Payload: `{"plugin": "sleep", "input": {"seconds": 60}}`, LeaseDurationSeconds: 6})

	wait, _ := pythonWorker(t, g, w, "--once", "1")
	g.WaitTaskState(t, task, "running")
	res, err := g.Control.CancelTaskWithResponse(context.Background(), task)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))

	var detail *apiclient.TaskDetail
	harness.WaitFor(t, 30*time.Second, "the task to be cancelled by its worker", func() bool {
		detail = g.Task(t, task)
		return string(detail.State) == "cancelled"
	})
	require.Len(t, detail.Attempts, 1)
	require.Equal(t, apiclient.AttemptStatus("cancelled"), detail.Attempts[0].Status, "the worker acknowledged, the lease did not just expire")
	out := wait()
	require.Contains(t, out, "cancellation requested")
	require.Contains(t, out, "completed cancelled")
	require.Equal(t, 0, countRows(t, g, "worker_result_batches"))
}

func TestPythonWorkerStopsGracefullyOnSIGTERM(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "python", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{Payload: `{"plugin": "sleep", "input": {"seconds": 60}}`})

	wait, cmd := pythonWorker(t, g, w, "--drain", "1")
	g.WaitTaskState(t, task, "running")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	out := wait() // exits 0, well within the 60 s bound
	require.Contains(t, out, "drain timed out; stopping 1 task(s)")

	// The interrupted attempt was handed back at once, not left to expire.
	detail := g.Task(t, task)
	require.Len(t, detail.Attempts, 1)
	require.Equal(t, apiclient.AttemptStatus("failed"), detail.Attempts[0].Status)
	require.Contains(t, []string{"retry_wait", "pending"}, string(detail.State))
}
