//go:build unix

package operations

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
)

// readmeBlock is one ```sh block of the README, with its first line.
type readmeBlock struct {
	line int
	text string
}

// readmeShellBlocks returns the README's ```sh blocks meant to run: those
// whose info string does not say "norun". Fences may be indented (blocks
// inside list items); their text is dedented by the fence's indentation.
func readmeShellBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var (
		blocks         []readmeBlock
		cur            *readmeBlock
		indent         string
		run, inFence   bool
		n, fenceOpened int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if !inFence {
			if info, ok := strings.CutPrefix(trimmed, "```"); ok {
				inFence, fenceOpened = true, n
				fields := strings.Fields(info)
				run = len(fields) > 0 && fields[0] == "sh" && !strings.Contains(info, "norun")
				indent = line[:len(line)-len(trimmed)]
				if run {
					cur = &readmeBlock{line: n}
				}
			}
			continue
		}
		if trimmed == "```" {
			inFence = false
			if run {
				blocks = append(blocks, *cur)
			}
			continue
		}
		if run {
			cur.text += strings.TrimPrefix(line, indent) + "\n"
		}
	}
	require.NoError(t, sc.Err())
	require.False(t, inFence, "README.md:%d: a code block is never closed", fenceOpened)
	return blocks
}

// devPath is .dev/ where a command would use it: the README's commands use
// `make run`'s default state directory, the test its own.
var devPath = regexp.MustCompile(`(^|[\s"'=(<>])\.dev/`)

// TestReadmeShellBlocksRun runs every ```sh block of README.md, top to
// bottom in one bash session, against a system started as `make run` starts
// it, so the walkthrough cannot drift from what the gateway does.
func TestReadmeShellBlocksRun(t *testing.T) {
	t.Parallel()
	requireTools(t, "bash", "curl", "jq", "python3")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	blocks := readmeShellBlocks(t, filepath.Join(root, "README.md"))
	require.NotEmpty(t, blocks)

	// The state directory plays .dev: binaries where `make build` puts them.
	state := t.TempDir()
	gateway, worker := filepath.Join(state, "bin", "gateway"), filepath.Join(state, "bin", "worker")
	harness.Build(t, gateway, "./server/cmd/gateway", "devstack")
	harness.Build(t, worker, "./workerclient/cmd/worker")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	listen := ln.Addr().String()
	require.NoError(t, ln.Close())
	dev := exec.Command(gateway, "dev", "-state-dir", state, "-worker-bin", worker, "-listen", listen)
	dev.Env = scriptEnv()
	var devOut bytes.Buffer
	var devMu sync.Mutex
	dev.Stdout, dev.Stderr = lockedWriter{&devMu, &devOut}, lockedWriter{&devMu, &devOut}
	require.NoError(t, dev.Start())
	devDone := make(chan error, 1)
	go func() { devDone <- dev.Wait() }()
	t.Cleanup(func() {
		// SIGTERM: dev stops the worker, the gateway and its PostgreSQL.
		_ = dev.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-devDone:
			if err != nil {
				t.Errorf("gateway dev exited with %v", err)
			}
		case <-time.After(90 * time.Second):
			_ = dev.Process.Kill()
			t.Logf("gateway dev killed: %v", <-devDone)
			t.Errorf("gateway dev did not stop within 90 s of SIGTERM")
		}
		if t.Failed() {
			devMu.Lock()
			t.Logf("gateway dev output:\n%s", truncate(devOut.String(), 20000))
			devMu.Unlock()
		}
	})

	exited := func() bool {
		select {
		case err := <-devDone:
			devDone <- err
			return true
		default:
			return false
		}
	}
	envFile := filepath.Join(state, "env")
	harness.WaitFor(t, 3*time.Minute, "gateway dev to write its env file", func() bool {
		require.False(t, exited(), "gateway dev exited early")
		_, err := os.Stat(envFile)
		return err == nil
	})
	caPEM, err := os.ReadFile(filepath.Join(state, "pki", "ca.pem"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	harness.WaitFor(t, time.Minute, "gateway dev's gateway to be ready", func() bool {
		require.False(t, exited(), "gateway dev exited early")
		res, err := client.Get("https://" + listen + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})

	// One script: each block announced by a marker line, so a failure names
	// its block.
	const marker = "=== README block at line "
	var script strings.Builder
	fmt.Fprintf(&script, "cd %q\n. %q\n", root, envFile)
	for _, b := range blocks {
		fmt.Fprintf(&script, "echo '%s%d'\n%s\n", marker, b.line, devPath.ReplaceAllString(b.text, "${1}"+state+"/"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script.String())
	sh.Env = scriptEnv()
	// Workers the blocks start are children of bash: stop the whole group.
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sh.Cancel = func() error { return syscall.Kill(-sh.Process.Pid, syscall.SIGKILL) }
	sh.WaitDelay = 5 * time.Second
	out, err := sh.CombinedOutput()
	if sh.Process != nil {
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		failed, output := "(before the first block)", string(out)
		if i := strings.LastIndex(output, marker); i >= 0 {
			var line int
			_, _ = fmt.Sscanf(output[i+len(marker):], "%d", &line)
			for _, b := range blocks {
				if b.line == line {
					failed = fmt.Sprintf("README.md:%d:\n%s", b.line, b.text)
				}
			}
			output = output[i:]
		}
		t.Fatalf("a README block failed (%v; timed out: %v)\nblock %s\noutput:\n%s", err, ctx.Err() != nil, failed, truncate(output, 20000))
	}
	t.Logf("%d README blocks ran; their output:\n%s", len(blocks), truncate(string(out), 20000))
}
