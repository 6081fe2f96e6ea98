//go:build unix

package console

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
)

// TestDocsSwaggerUIRendersInChromium loads /docs/ in headless Chromium and
// checks Swagger UI rendered the contract from the gateway itself (its
// assets are embedded: the page needs no internet). A screenshot is left in
// tests/artifacts/docs.png.
func TestDocsSwaggerUIRendersInChromium(t *testing.T) {
	t.Parallel()
	chromium := findChromium(t)
	g := harness.Start(t)

	// The plain HTTP surface first: /docs redirects, /docs/ is the page,
	// both without authentication.
	client := g.HTTPClient(nil)
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := client.Get(g.URL + "/docs")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusMovedPermanently, res.StatusCode)
	require.Equal(t, "/docs/", res.Header.Get("Location"))
	res, err = client.Get(g.URL + "/docs/")
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(page), "Worker Gateway API")

	artifacts, err := filepath.Abs("artifacts")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(artifacts, 0o755))
	screenshot := filepath.Join(artifacts, "docs.png")
	_ = os.Remove(screenshot)

	// A Chromium run: the virtual time budget lets the page load, fetch
	// /openapi.json and render before the DOM is dumped and the screenshot
	// taken — no sleeping. The gateway's certificate is issued by the test
	// CA, hence --ignore-certificate-errors (the browser reaches nothing but
	// 127.0.0.1).
	// Generous: Chromium's start-up alone takes a minute on a loaded
	// 2-core machine; the virtual time budget, not this, paces the page.
	// Chromium has also been seen, once, to hang at start-up with no output
	// beside a full test run: a launch that hangs is launched again, once.
	args := []string{
		"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--disable-extensions", "--no-first-run", "--no-default-browser-check",
		"--ignore-certificate-errors", "--hide-scrollbars", "--mute-audio",
		// Resolve no host but the gateway's: the page must render offline.
		"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
		"--window-size=1280,2000", "--virtual-time-budget=10000",
		"--screenshot=" + screenshot, "--dump-dom",
	}
	var dom, stderr bytes.Buffer
	for launch := 1; ; launch++ {
		dom.Reset()
		stderr.Reset()
		hung, err := runChromium(t, chromium, append(args, "--user-data-dir="+t.TempDir(), g.URL+"/docs/"), &dom, &stderr)
		if hung && launch == 1 {
			t.Logf("chromium hung; launching it again. Its stderr:\n%s", stderr.String())
			continue
		}
		require.False(t, hung, "chromium did not finish within 2 minutes, twice; stderr:\n%s", stderr.String())
		require.NoError(t, err, "chromium failed; stderr:\n%s", stderr.String())
		break
	}

	html := dom.String()
	require.NoError(t, os.WriteFile(filepath.Join(artifacts, "docs.html"), dom.Bytes(), 0o644))
	require.Contains(t, html, `id="swagger-ui"`, "no Swagger UI page in the DOM; stderr:\n%s", stderr.String())
	require.NotContains(t, html, "Failed to load API definition", "Swagger UI could not load /openapi.json")
	// The lease operation is rendered: its block (tag worker, operationId
	// acquireLeases — the embedded spec capitalises it), its path and its
	// summary.
	require.True(t, strings.Contains(strings.ToLower(html), `id="operations-worker-acquireleases"`),
		"the lease operation is not rendered; see the DOM in %s", filepath.Join(artifacts, "docs.html"))
	require.Contains(t, html, `data-path="/v1/leases"`)
	require.Contains(t, html, "Long-poll for task leases")

	info, err := os.Stat(screenshot)
	require.NoError(t, err, "no screenshot; stderr:\n%s", stderr.String())
	png, err := os.ReadFile(screenshot)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "the screenshot is not a PNG")
	require.Greater(t, info.Size(), int64(10_000), "the screenshot is suspiciously small")
	t.Logf("Swagger UI screenshot: %s", screenshot)
}

var (
	chromiumOnce sync.Once
	chromiumPath string
	chromiumErr  error
)

// findChromium returns a Chromium (or Chrome) binary, installing Debian's
// chromium package with apt when none is found and we are root; the test is
// skipped when there is none and it cannot be installed.
func findChromium(t *testing.T) string {
	t.Helper()
	chromiumOnce.Do(func() {
		if chromiumPath = lookChromium(); chromiumPath != "" {
			return
		}
		if chromiumErr = aptInstall("chromium"); chromiumErr != nil {
			return
		}
		if chromiumPath = lookChromium(); chromiumPath == "" {
			chromiumErr = errors.New("apt-get installed chromium but no chromium binary is on PATH")
		}
	})
	if chromiumPath == "" {
		t.Skipf("skipping the Swagger UI browser test: %v", chromiumErr)
	}
	return chromiumPath
}

func lookChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// runChromium runs one headless Chromium to its end, or kills it (with the
// helpers it forked) after two minutes and reports it hung.
func runChromium(t *testing.T, chromium string, args []string, stdout, stderr *bytes.Buffer) (hung bool, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, args...)
	// Chromium forks helpers: run it in its own process group and kill the
	// whole group on timeout and at the end.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	return ctx.Err() != nil, err
}
