package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/store/storetest"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Binary builds a command of this module once per test binary and returns
// its path ("gateway" or "worker").
func Binary(t testing.TB, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "gateway-test-bin-")
		if buildErr != nil {
			return
		}
		for bin, pkg := range map[string]string{"gateway": "./server/cmd/gateway", "worker": "./workerclient/cmd/worker"} {
			// Test builds carry the failpoints fault tests crash the gateway at.
			cmd := exec.Command("go", "build", "-tags", "failpoints", "-o", filepath.Join(buildDir, bin), pkg)
			cmd.Dir = moduleRoot()
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
				return
			}
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(buildDir, name)
}

// Build builds a package of this module into out with build tags, for
// tests that need a binary as a developer builds it (`make build`) rather
// than the shared test build of Binary.
func Build(t testing.TB, out, pkg string, tags ...string) {
	t.Helper()
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = moduleRoot()
	out2, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s:\n%s", pkg, out2)
}

// CleanupBinaries removes the built binaries; call it from TestMain.
func CleanupBinaries() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

func moduleRoot() string {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}

// Process is a gateway replica running as its own OS process.
type Process struct {
	URL  string
	Cmd  *exec.Cmd
	done chan error
}

// StartProcesses runs n gateway processes over one fresh database and
// returns a Gateway (for the control plane and database) and the replicas.
func StartProcesses(t testing.TB, n int, extraArgs ...string) (*Gateway, []*Process) {
	t.Helper()
	return StartProcessesOn(t, n, Database{}, extraArgs...)
}

// Database is where process gateways keep their data and how they reach it.
type Database struct {
	// URL is the migrated database the gateways run their queries on
	// (-database-url): a direct URL, one through a pooler, a multi-host
	// URL; "" is a fresh clone of the template (storetest.NewDatabase).
	URL string
	// ListenURL, when set, is the gateways' direct connection for LISTEN
	// (-listen-database-url) and the one the test's own pool (Gateway.Pool)
	// uses; "" is URL.
	ListenURL string
	// Binary is the gateway binary the processes run; "" is this module's
	// (Binary(t, "gateway")). tests/upgrade runs the previous release's.
	Binary string
}

func (d Database) direct() string {
	if d.ListenURL != "" {
		return d.ListenURL
	}
	return d.URL
}

// StartProcessesOn runs n gateway processes over db and returns a Gateway
// (for the control plane, with a pool on db's direct URL) and the replicas.
func StartProcessesOn(t testing.TB, n int, db Database, extraArgs ...string) (*Gateway, []*Process) {
	t.Helper()
	if db.URL == "" {
		db.URL = storetest.NewDatabase(t)
	}
	pool, err := store.OpenPool(context.Background(), db.direct())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ca, cert := testPKI(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	writeServerPair(t, cert, certFile, keyFile)

	var procs []*Process
	for range n {
		procs = append(procs, startProcess(t, db, certFile, keyFile, extraArgs))
	}
	g := newGateway(t, procs[0].URL, db.direct(), pool, ca)
	g.serverFiles = [2]string{certFile, keyFile}
	g.database = db
	for _, p := range procs {
		g.WaitReady(t, p)
	}
	return g, procs
}

// StartProcess starts one more gateway process over g's database, with
// extra environment variables (GATEWAY_FAILPOINTS=…), and waits until it is
// ready. It reaches the database as the first ones do.
func (g *Gateway) StartProcess(t testing.TB, env ...string) *Process {
	t.Helper()
	p := g.LaunchProcess(t, env...)
	g.WaitReady(t, p)
	return p
}

// StartProcessLogging starts one more gateway process over g's database,
// like StartProcess, with its stdout and stderr (its logs) written to out.
func (g *Gateway) StartProcessLogging(t testing.TB, out io.Writer, env ...string) *Process {
	t.Helper()
	p := startProcessTo(t, g.database, g.serverFiles[0], g.serverFiles[1], nil, out, env...)
	g.WaitReady(t, p)
	return p
}

// ServeCommand is `gateway serve` over g's database with g's TLS files
// and extra environment variables, not started: for tests of a replica
// that must refuse to start.
func (g *Gateway) ServeCommand(t testing.TB, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(Binary(t, "gateway"), "serve", "-database-url", g.DatabaseURL, "-listen", "127.0.0.1:0",
		"-tls-cert", g.serverFiles[0], "-tls-key", g.serverFiles[1], "-artifacts-dir", filepath.Join(filepath.Dir(g.serverFiles[0]), "artifacts"))
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// LaunchProcess starts one more gateway process over g's database, like
// StartProcess, without waiting for it: a process armed to crash may die
// before it is ready.
func (g *Gateway) LaunchProcess(t testing.TB, env ...string) *Process {
	t.Helper()
	return startProcess(t, g.database, g.serverFiles[0], g.serverFiles[1], nil, env...)
}

// Ready reports whether a gateway process answers /readyz with 200 now.
func (g *Gateway) Ready(p *Process) bool {
	res, err := g.HTTPClient(nil).Get(p.URL + "/readyz")
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == 200
}

// WaitReady waits until a gateway process answers /readyz with 200.
func (g *Gateway) WaitReady(t testing.TB, p *Process) {
	t.Helper()
	WaitFor(t, 20*time.Second, "gateway readiness", func() bool {
		if exited, err := p.exited(); exited {
			t.Fatalf("gateway process %s exited before it was ready: %v", p.URL, err)
		}
		return g.Ready(p)
	})
}

// exited reports whether the process has exited, and how.
func (p *Process) exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	default:
		return false, nil
	}
}

func writeServerPair(t testing.TB, cert tls.Certificate, certFile, keyFile string) {
	t.Helper()
	srvCertPEM, srvKeyPEM := serverPEM()
	require.NoError(t, os.WriteFile(certFile, srvCertPEM, 0o644))
	require.NoError(t, os.WriteFile(keyFile, srvKeyPEM, 0o600))
	_ = cert
}

func startProcess(t testing.TB, db Database, certFile, keyFile string, extraArgs []string, env ...string) *Process {
	t.Helper()
	return startProcessTo(t, db, certFile, keyFile, extraArgs, nil, env...)
}

func startProcessTo(t testing.TB, db Database, certFile, keyFile string, extraArgs []string, out io.Writer, env ...string) *Process {
	t.Helper()
	// The harness binds the port and hands the socket to the process (fd:3):
	// choosing a free port and closing it would let another test's process
	// or connection take it first. A previous release's binary knows no
	// fd:N, and gets the address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	listenArg := addr
	var inherited *os.File
	if db.Binary == "" {
		inherited, err = ln.(*net.TCPListener).File()
		require.NoError(t, err)
		listenArg = "fd:3"
	}
	require.NoError(t, ln.Close()) // the process's copy stays open
	caCert, caKey := filepath.Join(filepath.Dir(certFile), "ca.pem"), filepath.Join(filepath.Dir(certFile), "ca-key.pem")
	if _, err := os.Stat(caCert); err != nil {
		ca, _ := testPKI(t)
		require.NoError(t, ca.WriteFiles(caCert, caKey))
	}
	args := []string{"serve", "-database-url", db.URL, "-listen-database-url", db.direct(), "-listen", listenArg, "-tls-cert", certFile, "-tls-key", keyFile,
		"-artifacts-dir", filepath.Join(filepath.Dir(certFile), "artifacts"), "-ca-cert", caCert, "-ca-key", caKey}
	bin := db.Binary
	if bin == "" {
		bin = Binary(t, "gateway")
		// Tests fire schedules every second; the minimum's own tests set
		// it. (The previous release has no such flag.)
		args = append(args, "-schedule-min-interval", "1s")
	}
	args = append(args, extraArgs...)
	// GATEWAY_TEST_ARGS runs every gateway process of the suite with more
	// flags, e.g. GATEWAY_TEST_ARGS=-lease-group-commit=false make faults.
	args = append(args, strings.Fields(os.Getenv("GATEWAY_TEST_ARGS"))...)
	cmd := exec.Command(bin, args...)
	// Every response of a test gateway is checked against openapi.yaml.
	cmd.Env = append(append(os.Environ(), "GATEWAY_VALIDATE_RESPONSES=true"), env...)
	switch {
	case out != nil:
		cmd.Stdout, cmd.Stderr = out, out
	case os.Getenv("GATEWAY_TEST_LOG") != "":
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if inherited != nil {
		cmd.ExtraFiles = []*os.File{inherited}
	}
	require.NoError(t, cmd.Start())
	if inherited != nil {
		require.NoError(t, inherited.Close())
	}
	p := &Process{URL: "https://" + addr, Cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() { _ = p.Stop(syscall.SIGKILL) }) // killed on purpose: its exit status says nothing
	return p
}

// Stop signals the process and waits for it to exit, returning its error.
func (p *Process) Stop(sig syscall.Signal) error {
	if p.Cmd.ProcessState != nil {
		return nil
	}
	_ = p.Cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(60 * time.Second):
		_ = p.Cmd.Process.Kill()
		return fmt.Errorf("process did not exit after %v", sig)
	}
}

// Wait waits for the process to exit on its own.
func (p *Process) Wait(timeout time.Duration) error {
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(timeout):
		return fmt.Errorf("process still running after %s", timeout)
	}
}

// Exited reports, without waiting, whether the process has exited and with
// what error: fault tests poll it to notice a replica that crashed itself.
func (p *Process) Exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	default:
		return false, nil
	}
}

// Main runs a test binary's tests with a private PostgreSQL cluster (see
// storetest.Main) and removes the binaries built for process tests once
// they ran; call it from TestMain.
func Main(m *testing.M) {
	storetest.Main(withBinaries{m})
}

// withBinaries cleans up built binaries after the tests (storetest.Main
// exits the process itself).
type withBinaries struct{ m *testing.M }

func (w withBinaries) Run() int {
	defer CleanupBinaries()
	return w.m.Run()
}
