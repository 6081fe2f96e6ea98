package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/envfile"
	"github.com/worker-gateway/gateway/internal/pgcluster"
	"github.com/worker-gateway/gateway/store"
)

// buildGateway builds this command into a temporary directory, with the
// given build tags.
func buildGateway(t *testing.T, tags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gateway")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// lockedBuffer collects a child's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// devRun is one `gateway dev` process started by a test.
type devRun struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{}
	err    error
}

// devCmd is `gateway dev` on state with a free port, in an environment
// holding none of the test's own settings.
func devCmd(ctx context.Context, bin, state string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, "dev", "-state-dir", state, "-listen", "127.0.0.1:0")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if v := os.Getenv("PG_BIN_DIR"); v != "" {
		cmd.Env = append(cmd.Env, "PG_BIN_DIR="+v)
	}
	// On the test's deadline, stop it as Ctrl-C would, so that it stops its
	// PostgreSQL too; killed only if that takes too long.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	return cmd
}

// startDev starts `gateway dev` and waits until its gateway answers
// /readyz; it returns the run and its env file's settings.
func startDev(ctx context.Context, t *testing.T, bin, state string) (*devRun, envfile.Vars, *http.Client) {
	t.Helper()
	r := &devRun{cmd: devCmd(ctx, bin, state), out: &lockedBuffer{}, exited: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	require.NoError(t, r.cmd.Start())
	go func() { r.err = r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		<-r.exited
	})

	// The lock file names this process and its URL once the env file is
	// written; an env file alone may be an earlier run's.
	var rec devRecord
	for rec.PID != r.cmd.Process.Pid || rec.URL == "" {
		select {
		case <-r.exited:
			t.Fatalf("gateway dev exited: %v\n%s", r.err, r.out)
		case <-ctx.Done():
			t.Fatalf("gateway dev not started: %v\n%s", ctx.Err(), r.out)
		case <-time.After(50 * time.Millisecond):
		}
		if b, err := os.ReadFile(filepath.Join(state, "dev.lock")); err == nil {
			_ = json.Unmarshal(b, &rec)
		}
	}
	env, err := envfile.Read(filepath.Join(state, "env"))
	require.NoError(t, err)
	require.Equal(t, rec.URL, env.Get("GATEWAY_URL"))

	caPEM, err := os.ReadFile(env.Get("CA_CERT"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for readyz(ctx, client, rec.URL) != http.StatusOK {
		select {
		case <-r.exited:
			t.Fatalf("gateway dev exited: %v\n%s", r.err, r.out)
		case <-ctx.Done():
			t.Fatalf("gateway dev not ready: %v\n%s", ctx.Err(), r.out)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return r, env, client
}

func readyz(ctx context.Context, client *http.Client, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return 0
	}
	res, err := client.Do(req)
	if err != nil {
		return 0
	}
	_ = res.Body.Close()
	return res.StatusCode
}

// stop asks `gateway dev` to stop and waits for it to exit cleanly.
func (r *devRun) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	<-r.exited
	require.NoError(t, r.err, "%s", r.out)
}

// postmasterPID is the PID in the cluster's postmaster.pid.
func postmasterPID(t *testing.T, state string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, "postgres", "data", "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	require.NoError(t, err)
	return pid
}

// processGone: no such process, or only a zombie waiting for its reaper.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	return err != nil || strings.Contains(string(status), "State:\tZ")
}

// TestDevStateDirectory runs the devstack binary as `make run` does: a
// second `gateway dev` on the same state directory refuses at once and
// leaves the first one working; stopping the first stops its PostgreSQL;
// the next run keeps the admin token until it is revoked.
func TestDevStateDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL several times")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := buildGateway(t, "devstack")
	state := t.TempDir()
	// Should a run have been killed, its PostgreSQL must not outlive the
	// test (cleanups run last in, first out: before the directory goes).
	t.Cleanup(func() { _ = pgcluster.StopStale(context.Background(), filepath.Join(state, "postgres"), t.Logf) })

	first, env, client := startDev(ctx, t, bin, state)
	envBefore, err := os.ReadFile(filepath.Join(state, "env"))
	require.NoError(t, err)
	postmaster := postmasterPID(t, state)

	second := devCmd(ctx, bin, state)
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	require.Equal(t, 1, ee.ExitCode(), "%s", out)
	require.Contains(t, string(out), fmt.Sprintf("already running (pid %d) at %s; settings in %s",
		first.cmd.Process.Pid, env.Get("GATEWAY_URL"), filepath.Join(state, "env")))
	require.NotContains(t, string(out), "PostgreSQL", "the second run touches nothing")

	envAfter, err := os.ReadFile(filepath.Join(state, "env"))
	require.NoError(t, err)
	require.Equal(t, string(envBefore), string(envAfter))
	require.Equal(t, postmaster, postmasterPID(t, state))
	require.Equal(t, http.StatusOK, readyz(ctx, client, env.Get("GATEWAY_URL")))

	// The gateway's root sends a browser to the API documentation.
	res, err := client.Get(env.Get("GATEWAY_URL") + "/")
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Contains(t, []int{http.StatusFound, http.StatusTemporaryRedirect}, res.StatusCode)
	require.Equal(t, "/docs/", res.Header.Get("Location"))
	require.Contains(t, first.out.String(), env.Get("GATEWAY_URL")+"/docs/", "the banner names the docs")
	require.Contains(t, first.out.String(), env.Get("GATEWAY_URL")+"/ui/", "the banner names the console")
	require.NotContains(t, first.out.String(), env.Get("GATEWAY_TOKEN"), "no secret in the output")

	first.stop(t)
	require.NoFileExists(t, filepath.Join(state, "postgres", "data", "postmaster.pid"))
	// The postmaster removes its pid file just before it exits.
	gone := processGone(postmaster)
	for deadline := time.Now().Add(30 * time.Second); !gone && time.Now().Before(deadline); gone = processGone(postmaster) {
		time.Sleep(20 * time.Millisecond) // polling the condition, not a synchronisation
	}
	require.True(t, gone, "PostgreSQL (pid %d) outlived gateway dev", postmaster)

	// The next run keeps the admin token the database still accepts.
	again, envAgain, _ := startDev(ctx, t, bin, state)
	require.Equal(t, env.Get("GATEWAY_TOKEN"), envAgain.Get("GATEWAY_TOKEN"))
	pool, err := store.OpenPool(ctx, envAgain.Get("DATABASE_URL"))
	require.NoError(t, err)
	st := store.New(pool)
	p, err := st.AuthenticateToken(ctx, envAgain.Get("GATEWAY_TOKEN"))
	require.NoError(t, err)
	_, _, err = st.RevokeAPIToken(ctx, store.EveryOrganization(), p.TokenID)
	require.NoError(t, err)
	var schedules int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM schedules WHERE name = $1`, "demo: loopback scan every minute").Scan(&schedules))
	require.Equal(t, 1, schedules, "the demo schedule is created once")
	pool.Close()
	again.stop(t)

	// A revoked one is replaced.
	last, envLast, _ := startDev(ctx, t, bin, state)
	require.NotEmpty(t, envLast.Get("GATEWAY_TOKEN"))
	require.NotEqual(t, env.Get("GATEWAY_TOKEN"), envLast.Get("GATEWAY_TOKEN"))
	last.stop(t)
}
