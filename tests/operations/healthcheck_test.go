package operations

import (
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
)

// TestHealthcheckCommand runs `gateway healthcheck` (what the container
// health checks run) against a real gateway: 0 when /readyz answers 200,
// 1 when nothing answers, and never a skipped verification off loopback.
func TestHealthcheckCommand(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: g.CA.Cert.Raw}), 0o644))
	bin := harness.Binary(t, "gateway")
	run := func(args ...string) (string, int) {
		cmd := exec.Command(bin, append([]string{"healthcheck"}, args...)...)
		cmd.Env = append(os.Environ(), "GATEWAY_URL=", "GATEWAY_LISTEN=")
		out, _ := cmd.CombinedOutput() // the exit status says it
		return string(out), cmd.ProcessState.ExitCode()
	}
	_, port, _ := strings.Cut(strings.TrimPrefix(g.URL, "https://"), ":")

	out, code := run("-url", g.URL+"/readyz", "-ca-file", caFile)
	require.Equal(t, 0, code, out)
	out, code = run("-url", g.URL, "-ca-file", caFile) // the base URL means its /readyz
	require.Equal(t, 0, code, out)
	out, code = run("-listen", "0.0.0.0:"+port, "-insecure-skip-verify") // as in the image
	require.Equal(t, 0, code, out)

	out, code = run("-url", g.URL+"/readyz") // the test CA is not a system root
	require.Equal(t, 1, code, out)
	out, code = run("-url", g.URL+"/no-such-route", "-ca-file", caFile)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "404")
	out, code = run("-url", "https://example.invalid/readyz", "-insecure-skip-verify")
	require.Equal(t, 2, code, out)

	// Nothing listening: 1.
	out, code = run("-listen", "127.0.0.1:1", "-insecure-skip-verify", "-timeout", "2s")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "not ready")
}
