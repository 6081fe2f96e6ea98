//go:build unix

package console

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// consoleArtifacts is where the browser test leaves its screenshots:
// $TEST_ARTIFACTS_DIR/console when set, else a directory under the test's
// temporary directory.
func consoleArtifacts(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "console-artifacts")
	if base := os.Getenv("TEST_ARTIFACTS_DIR"); base != "" {
		dir = filepath.Join(base, "console")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// requestLog records every URL the browser requests (CDP network events).
type requestLog struct {
	mu   sync.Mutex
	urls []string
}

func (l *requestLog) add(u string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.urls = append(l.urls, u)
}

func (l *requestLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.urls...)
}

func (l *requestLog) count(substr string) int {
	n := 0
	for _, u := range l.all() {
		if strings.Contains(u, substr) {
			n++
		}
	}
	return n
}

// TestConsoleInChromium drives the console in headless Chromium over the
// DevTools protocol against a real gateway: sign in with the keyboard only,
// watch the overview refresh itself, filter tasks, read a pending reason,
// cancel a task with the keyboard only, revoke a worker. The browser must
// request nothing from any host but the gateway. Screenshots of each step
// are saved (the path is logged).
func TestConsoleInChromium(t *testing.T) {
	t.Parallel()
	chromium := findChromium(t)
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.ConsoleRefresh = time.Second }})
	acme, lonely := g.NewOrganization(t, "acme"), g.NewOrganization(t, "lonely")
	worker := g.NewWorker(t, "scanner-1", 2, acme)
	toCancel := g.CreateTask(t, acme, harness.TaskSpec{Payload: `{"step": "cancel me"}`})
	waiting := g.CreateTask(t, lonely, harness.TaskSpec{})
	done := g.CreateTask(t, acme, harness.TaskSpec{})
	res, err := g.Control.CancelTaskWithResponse(context.Background(), done)
	require.NoError(t, err)
	require.Equal(t, 200, res.StatusCode(), string(res.Body))

	artifacts := consoleArtifacts(t)
	t.Logf("console screenshots: %s", artifacts)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1400),
		// The gateway's certificate is issued by the test CA.
		chromedp.IgnoreCertErrors,
		// Resolve no host but the gateway's: a request elsewhere fails,
		// and the network log below catches it too.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	// Generous: Chromium's start-up alone takes a minute on a loaded 2-core
	// machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()

	// Every request the page makes, from the DevTools network events.
	var requests requestLog
	require.NoError(t, chromedp.Listen(bctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			requests.add(e.Request.URL)
		}
	}))
	// Each step has its own deadline (derived from the browser's context
	// once it runs), so a step that cannot finish fails fast and says which.
	step := func() (context.Context, context.CancelFunc) { return context.WithTimeout(bctx, 45*time.Second) }
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := step()
		defer cancel()
		require.NoError(t, chromedp.Do(sctx, steps...), what)
	}
	// Every page records what its Content-Security-Policy blocked (a
	// script the browser injects is not subject to the policy), kept across
	// pages in the tab's session storage.
	do("watch for policy violations", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
			document.addEventListener("securitypolicyviolation", e => {
				const seen = JSON.parse(sessionStorage.getItem("csp-violations") || "[]");
				seen.push(e.violatedDirective + " " + e.blockedURI);
				sessionStorage.setItem("csp-violations", JSON.stringify(seen));
			});`})
		return err
	}))
	// text reads an element's text. The overview swaps its fragment in
	// every second, so the node found may be replaced before it is read
	// ("No node with given id found"): read again until the step's deadline.
	text := func(id string) string {
		t.Helper()
		sctx, cancel := step()
		defer cancel()
		for {
			v, err := chromedp.Run(sctx, chromedp.Text(chromedp.ID(id)))
			if err == nil || sctx.Err() != nil || !strings.Contains(err.Error(), "No node with given id") {
				require.NoError(t, err, "read #%s", id)
				return v
			}
		}
	}
	location := func() string {
		t.Helper()
		sctx, cancel := step()
		defer cancel()
		v, err := chromedp.Run(sctx, chromedp.Location())
		require.NoError(t, err)
		return v
	}
	shot := func(name string) {
		t.Helper()
		sctx, cancel := step()
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		require.NoError(t, err, "screenshot %s", name)
		require.NoError(t, os.WriteFile(filepath.Join(artifacts, name+".png"), png, 0o644))
	}
	activeID := func() string {
		t.Helper()
		sctx, cancel := step()
		defer cancel()
		v, err := chromedp.Run(sctx, chromedp.Evaluate[string](`document.activeElement ? document.activeElement.id : ""`))
		require.NoError(t, err)
		return v
	}
	// tabTo presses Tab until the element with id has the focus: the
	// keyboard alone reaches it.
	tabTo := func(id string) {
		t.Helper()
		for range 60 {
			if activeID() == id {
				return
			}
			do("press Tab", chromedp.KeyEvent(kb.Tab))
		}
		t.Fatalf("Tab never reached #%s", id)
	}

	// Sign in with the keyboard only: the token field has the focus, Tab
	// reaches the button, Enter submits.
	do("open the console", chromedp.Navigate(g.URL+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	require.Contains(t, location(), "/ui/signin")
	// The token field takes the focus by itself (autofocus, applied once
	// the page has rendered).
	harness.WaitFor(t, 10*time.Second, "the token field to have the focus", func() bool { return activeID() == "token" })
	do("type the token", chromedp.KeyEvent(g.AdminToken))
	shot("1-signin")
	tabTo("signin")
	do("submit with Enter", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.ID("stats")))
	require.Contains(t, text("workers-online"), "of 1")
	shot("2-overview")

	// The overview refreshes itself (htmx polling, every second here).
	before := requests.count("/ui/overview/stats")
	harness.WaitFor(t, 30*time.Second, "the overview to refresh itself", func() bool {
		return requests.count("/ui/overview/stats") >= before+2
	})

	// Filter tasks by organization and state.
	do("choose filters",
		chromedp.Navigate(g.URL+"/ui/tasks"),
		chromedp.WaitVisible(chromedp.ID("apply-filter")),
		chromedp.SetValue(chromedp.ID("f-org"), acme.String()),
		chromedp.SetValue(chromedp.ID("f-state"), "pending"))
	do("apply them", chromedp.Click(chromedp.ID("apply-filter")))
	// The unfiltered list has a #tasks table too: wait for the new page.
	harness.WaitFor(t, 30*time.Second, "the filtered list", func() bool { return strings.Contains(location(), "state=pending") })
	do("wait for the list", chromedp.WaitVisible(chromedp.ID("tasks")))
	shot("3-tasks-filtered")
	listed, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#tasks tr[data-task]")].map(r => r.dataset.task)`))
	require.NoError(t, err)
	require.Equal(t, []string{toCancel.String()}, listed, "the filter should leave the one pending task of acme")
	u, err := url.Parse(location())
	require.NoError(t, err)
	require.Equal(t, "pending", u.Query().Get("state"))
	require.Equal(t, acme.String(), u.Query().Get("organization_id"))

	// A pending reason, in words.
	do("open a waiting task", chromedp.Navigate(g.URL+"/ui/tasks/"+waiting.String()), chromedp.WaitVisible(chromedp.ID("pending-reason")))
	require.Contains(t, text("pending-reason"), "No worker is assigned to this task's organization")
	shot("4-pending-reason")

	// Cancel a task with the keyboard only.
	do("open the task", chromedp.Navigate(g.URL+"/ui/tasks/"+toCancel.String()), chromedp.WaitVisible(chromedp.ID("cancel-task")))
	tabTo("cancel-task")
	do("cancel with Enter", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.CSS(".notice")))
	notice, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(".notice")))
	require.NoError(t, err)
	require.Contains(t, notice, "Cancellation requested")
	shot("5-cancelled")
	require.Equal(t, apiclient.TaskStateCancelled, g.Task(t, toCancel).State)

	// A refused action shows its problem in the page's error region:
	// retrying a task that was retried meanwhile is a 409.
	do("open a cancelled task", chromedp.Navigate(g.URL+"/ui/tasks/"+done.String()), chromedp.WaitVisible(chromedp.ID("retry-task")))
	retried, err := g.Control.RetryTaskWithResponse(context.Background(), done)
	require.NoError(t, err)
	require.Equal(t, 200, retried.StatusCode(), string(retried.Body))
	do("retry it again", chromedp.Click(chromedp.ID("retry-task")), chromedp.WaitVisible(chromedp.ID("console-error")))
	refusal := text("console-error")
	require.Contains(t, refusal, "Conflict")
	require.Contains(t, refusal, "only failed_terminal and cancelled tasks can be retried")
	require.Contains(t, refusal, "task-not-retryable")
	require.Contains(t, location(), "/ui/tasks/"+done.String(), "the page stays")
	shot("6-refused")

	// Revoke a worker, with a reason.
	do("open the revoke form",
		chromedp.Navigate(g.URL+"/ui/workers/"+worker.ID.String()),
		chromedp.Click(chromedp.ID("revoke-worker")),
		chromedp.WaitVisible(chromedp.ID("reason")),
		chromedp.SendKeys(chromedp.ID("reason"), "key leaked"))
	shot("7-revoke-form")
	do("revoke", chromedp.Click(chromedp.ID("confirm-revoke")), chromedp.WaitVisible(chromedp.ID("revocation")))
	require.Contains(t, text("revocation"), "key leaked")
	shot("8-revoked")
	w, err := g.Control.GetWorkerWithResponse(context.Background(), worker.ID)
	require.NoError(t, err)
	require.True(t, w.JSON200.Revoked)

	// Nothing was blocked: the pages need nothing the policy refuses.
	violations, err := chromedp.Run(bctx, chromedp.Evaluate[string](`sessionStorage.getItem("csp-violations") || ""`))
	require.NoError(t, err)
	require.Empty(t, violations, "Content-Security-Policy violations")

	// Every request went to the gateway.
	all := requests.all()
	require.NotEmpty(t, all)
	for _, u := range all {
		require.True(t, strings.HasPrefix(u, g.URL+"/"), "the browser requested %s (not the gateway %s)", u, g.URL)
	}
	require.Positive(t, requests.count("/ui/assets/htmx.min.js"), "htmx was not loaded")
	require.Positive(t, requests.count("/ui/assets/console.js"), "the console's script was not loaded")
	entries, err := os.ReadDir(artifacts)
	require.NoError(t, err)
	require.Len(t, entries, 8)
}
