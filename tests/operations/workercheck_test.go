package operations

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestWorkerCheck runs `worker -check` against a real gateway: it exits 0
// naming the worker when the gateway accepts its certificate, and 1 with a
// hint at the cause when it does not.
func TestWorkerCheck(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "check-me", 1, org)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, data, 0o600))
		return path
	}
	certFile, keyFile := write("worker.pem", w.CertPEM), write("worker-key.pem", w.KeyPEM)
	caFile := write("ca.pem", g.CA.CertPEM)

	// workerCheck runs the binary with args and only the given environment.
	workerCheck := func(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, harness.Binary(t, "worker"), args...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, env...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return out.String(), errOut.String(), exitErr.ExitCode()
		}
		require.NoError(t, err)
		return out.String(), errOut.String(), 0
	}

	t.Run("accepted", func(t *testing.T) {
		out, errOut, code := workerCheck(t, nil, "-check", "-gateway", g.URL, "-cert", certFile, "-key", keyFile, "-ca", caFile)
		require.Equal(t, 0, code, errOut)
		assert.Equal(t, "ok: authenticated as worker check-me at "+g.URL+"\n", out)
	})

	t.Run("settings from an env file and the older variable names", func(t *testing.T) {
		envFile := write("env", []byte("export GATEWAY_URL="+g.URL+"\nexport CA_CERT='"+caFile+"'\n"+
			"WORKER_CERT=\""+certFile+"\"\nexport GATEWAY_TOKEN=ignored\n"))
		out, errOut, code := workerCheck(t, []string{"WORKER_KEY=" + keyFile}, "-check", "-env", envFile)
		require.Equal(t, 0, code, errOut)
		assert.Contains(t, out, "ok: authenticated as worker check-me")
	})

	t.Run("CA mismatch", func(t *testing.T) {
		other, err := pki.NewCA("another CA")
		require.NoError(t, err)
		otherCA := write("other-ca.pem", other.CertPEM)
		_, errOut, code := workerCheck(t, nil, "-check", "-gateway", g.URL, "-cert", certFile, "-key", keyFile, "-ca", otherCA)
		assert.Equal(t, 1, code)
		assert.Contains(t, errOut, "check failed: the gateway's certificate is not trusted (CA mismatch?)")
	})

	t.Run("certificate unknown to the gateway", func(t *testing.T) {
		stranger, err := g.CA.IssueClient("stranger", time.Hour)
		require.NoError(t, err)
		c, k := write("stranger.pem", stranger.CertPEM), write("stranger-key.pem", stranger.KeyPEM)
		_, errOut, code := workerCheck(t, []string{"WORKER_GATEWAY=" + g.URL, "WORKER_CA=" + caFile},
			"-check", "-cert", c, "-key", k)
		assert.Equal(t, 1, code)
		assert.Contains(t, errOut, "check failed: the gateway refused the worker's certificate")
		assert.Contains(t, errOut, "HTTP 401")
	})

	t.Run("unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close()) // nothing listens there now
		_, errOut, code := workerCheck(t, nil, "-check", "-gateway", "https://"+addr, "-cert", certFile, "-key", keyFile, "-ca", caFile)
		assert.Equal(t, 1, code)
		assert.Contains(t, errOut, "check failed: the gateway is unreachable")
	})

	t.Run("help needs no gateway", func(t *testing.T) {
		_, errOut, code := workerCheck(t, nil, "-h")
		assert.Equal(t, 0, code)
		assert.Contains(t, errOut, "env: WORKER_GATEWAY, GATEWAY_URL")
	})

	// Last: the worker is revoked for good.
	t.Run("revoked", func(t *testing.T) {
		res, err := g.Control.RevokeWorkerWithResponse(context.Background(), w.ID, apiclient.RevokeRequest{Reason: "test"})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		_, errOut, code := workerCheck(t, nil, "-check", "-gateway", g.URL, "-cert", certFile, "-key", keyFile, "-ca", caFile)
		assert.Equal(t, 1, code)
		assert.True(t, strings.Contains(errOut, "revoked"), errOut)
	})
}
