package console

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// consoleUser is a browser-like client of the console: a cookie jar, and
// redirects not followed, so each answer can be checked.
type consoleUser struct {
	t      *testing.T
	g      *harness.Gateway
	client *http.Client
}

func newConsoleUser(t *testing.T, g *harness.Gateway) *consoleUser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := g.HTTPClient(nil)
	client.Jar = jar
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &consoleUser{t: t, g: g, client: client}
}

// do sends a request and returns the answer with its body read.
func (u *consoleUser) do(method, path string, form url.Values) (*http.Response, string) {
	u.t.Helper()
	return u.doWith(method, path, form, nil)
}

// doWith is do with extra request headers (HX-Request, as htmx sends; a
// nil value removes the header).
func (u *consoleUser) doWith(method, path string, form url.Values, header http.Header) (*http.Response, string) {
	u.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u.g.URL+path, body)
	require.NoError(u.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	// A browser says where a form post came from: here, the console's own
	// page. A test sends another origin, or none (a nil value), by header.
	if method != http.MethodGet && method != http.MethodHead {
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	for k, v := range header {
		if len(v) == 0 {
			req.Header.Del(k)
			continue
		}
		req.Header[k] = v
	}
	res, err := u.client.Do(req)
	require.NoError(u.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(u.t, err)
	return res, string(b)
}

func (u *consoleUser) get(path string) (*http.Response, string) {
	return u.do(http.MethodGet, path, nil)
}

// signIn signs in with token and returns the sign-in answer (a redirect).
func (u *consoleUser) signIn(token string) *http.Response {
	u.t.Helper()
	res, _ := u.signInAnswer(token)
	return res
}

// signInAnswer signs in with token and returns the answer and its body.
func (u *consoleUser) signInAnswer(token string) (*http.Response, string) {
	u.t.Helper()
	res, _ := u.get("/ui/signin")
	require.Equal(u.t, http.StatusOK, res.StatusCode)
	return u.do(http.MethodPost, "/ui/signin", url.Values{"token": {token}, "next": {"/ui/"}})
}

// mustSignIn signs in and checks it worked.
func (u *consoleUser) mustSignIn(token string) {
	u.t.Helper()
	res := u.signIn(token)
	require.Equal(u.t, http.StatusSeeOther, res.StatusCode)
	require.Equal(u.t, "/ui/", res.Header.Get("Location"))
}

// signedIn reports whether the console serves the overview (else it sends
// the user to the sign-in form).
func (u *consoleUser) signedIn() bool {
	u.t.Helper()
	res, _ := u.get("/ui/")
	if res.StatusCode == http.StatusSeeOther {
		require.True(u.t, strings.HasPrefix(res.Header.Get("Location"), "/ui/signin"), res.Header.Get("Location"))
		return false
	}
	require.Equal(u.t, http.StatusOK, res.StatusCode)
	return true
}

// requireConsoleProblem checks an answer is application/problem+json with status
// and code, as every error leaving the gateway is, and returns its detail.
func requireConsoleProblem(t *testing.T, res *http.Response, body string, status int, code string) string {
	t.Helper()
	require.Equal(t, status, res.StatusCode, body)
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"), body)
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
		Code   string `json:"code"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &p), body)
	require.Equal(t, status, p.Status, body)
	require.Equal(t, code, p.Code, body)
	require.Equal(t, "https://worker-gateway.dev/problems/"+code, p.Type, body)
	require.NotEmpty(t, p.Title, body)
	require.NotEmpty(t, p.Detail, body)
	return p.Detail
}

func newToken(t *testing.T, g *harness.Gateway, name string, org *uuid.UUID, expiresIn *int, scopes ...apiclient.TokenScope) (string, uuid.UUID) {
	t.Helper()
	res, err := g.Control.CreateApiTokenWithResponse(context.Background(), apiclient.CreateApiTokenRequest{
		Name: name, Scopes: scopes, OrganizationId: org, ExpiresInSeconds: expiresIn})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201.Token, res.JSON201.ApiToken.Id
}

// TestConsoleSessions: sign-in exchanges an API token for a session cookie
// (HttpOnly, Secure, SameSite=Strict, expiring, never past the token);
// logout, the session's expiry and the token's revocation each end it.
func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	u := newConsoleUser(t, g)

	// Without a session every page leads to the sign-in form, coming back.
	res, _ := u.get("/ui/tasks?state=pending")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/ui/signin?next="+url.QueryEscape("/ui/tasks?state=pending"), res.Header.Get("Location"))

	// A wrong token is refused (problem+json; the page's script shows it).
	res, body := u.signInAnswer("wgt_not-a-real-token")
	requireConsoleProblem(t, res, body, http.StatusUnauthorized, "unauthenticated")
	require.False(t, u.signedIn())
	harness.WaitFor(t, 10*time.Second, "the refused sign-in in the audit log", func() bool {
		var n int
		require.NoError(t, g.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM audit_events WHERE action = 'security.token_refused' AND details->>'path' = '/ui/signin'`).Scan(&n))
		return n == 1
	})

	// The session cookie's attributes.
	res = u.signIn(g.AdminToken)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	var session *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "__Host-wg-console" {
			session = c
		}
	}
	require.NotNil(t, session, "no session cookie in %v", res.Header.Values("Set-Cookie"))
	require.True(t, session.HttpOnly)
	require.True(t, session.Secure)
	require.Equal(t, http.SameSiteStrictMode, session.SameSite)
	require.Equal(t, "/", session.Path)
	require.Greater(t, session.MaxAge, 7*3600)
	require.LessOrEqual(t, session.MaxAge, 8*3600)
	require.NotContains(t, session.Value, g.AdminToken, "the cookie must not carry the API token")
	require.True(t, u.signedIn())
	res, page := u.get("/ui/")
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
	require.Contains(t, page, "Workers online")
	var signIns int
	require.NoError(t, g.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM audit_events WHERE action = 'console.sign_in'`).Scan(&signIns))
	require.Equal(t, 1, signIns)

	// Logout deletes the session: the same cookie no longer opens it.
	stolen := *session
	res, _ = u.do(http.MethodPost, "/ui/signout", url.Values{})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.False(t, u.signedIn())
	replay := newConsoleUser(t, g)
	base, err := url.Parse(g.URL)
	require.NoError(t, err)
	replay.client.Jar.SetCookies(base, []*http.Cookie{{Name: stolen.Name, Value: stolen.Value, Path: "/", Secure: true}})
	require.False(t, replay.signedIn(), "a signed-out session's cookie still works")

	// Expiry: a session past its end is refused (the database's clock).
	u.mustSignIn(g.AdminToken)
	require.True(t, u.signedIn())
	_, err = g.Pool.Exec(context.Background(), `UPDATE console_sessions SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	require.False(t, u.signedIn())
	// An htmx request (the overview's refresh) is answered 401 as a
	// problem, and told to load the sign-in page.
	res, body = u.doWith(http.MethodGet, "/ui/overview/stats", nil, http.Header{"Hx-Request": {"true"}, "Hx-Current-Url": {g.URL + "/ui/?x=1"}})
	requireConsoleProblem(t, res, body, http.StatusUnauthorized, "unauthenticated")
	require.Equal(t, "/ui/signin?next="+url.QueryEscape("/ui/?x=1"), res.Header.Get("HX-Redirect"))
	// A form post whose session ended is refused the same way.
	res, body = u.do(http.MethodPost, "/ui/signout", url.Values{})
	requireConsoleProblem(t, res, body, http.StatusUnauthorized, "unauthenticated")
	// Pruning deletes ended sessions.
	pruned, err := g.Store.Prune(context.Background(), store.PruneParams{})
	require.NoError(t, err)
	require.Equal(t, 1, pruned.ConsoleSessions)
	var left int
	require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM console_sessions`).Scan(&left))
	require.Zero(t, left)

	// Signing in again replaces the browser's session.
	u.mustSignIn(g.AdminToken)
	u.mustSignIn(g.AdminToken)
	var live int
	require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM console_sessions WHERE expires_at > now()`).Scan(&live))
	require.Equal(t, 1, live)

	// A session never outlives its token.
	short := 120
	token, tokenID := newToken(t, g, "short-lived", nil, &short, "reader")
	res = u.signIn(token)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	for _, c := range res.Cookies() {
		if c.Name == "__Host-wg-console" {
			require.LessOrEqual(t, c.MaxAge, short)
		}
	}
	require.True(t, u.signedIn())

	// Revoking the token ends its sessions at once.
	rev, err := g.Control.RevokeApiTokenWithResponse(context.Background(), tokenID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rev.StatusCode(), string(rev.Body))
	require.False(t, u.signedIn())
}

// TestConsoleCSRF: a state-changing request acts only when the browser
// says it came from a console page (Sec-Fetch-Site, else Origin); one sent
// by another site, a sibling host, or a browser that says nothing is
// refused with 403 and changes nothing. Signing in is guarded the same way
// (a forged sign-in would put the victim in the attacker's session).
func TestConsoleCSRF(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	task := g.CreateTask(t, org, harness.TaskSpec{})
	forged := map[string]http.Header{
		"from another site":            {"Sec-Fetch-Site": {"cross-site"}},
		"from a sibling host":          {"Sec-Fetch-Site": {"same-site"}},
		"with another Origin":          {"Sec-Fetch-Site": nil, "Origin": {"https://evil.example"}},
		"saying nothing of its origin": {"Sec-Fetch-Site": nil},
	}

	u := newConsoleUser(t, g)
	for name, header := range forged {
		res, body := u.doWith(http.MethodPost, "/ui/signin", url.Values{"token": {g.AdminToken}, "next": {"/ui/"}}, header)
		require.Contains(t, requireConsoleProblem(t, res, body, http.StatusForbidden, "forbidden"),
			"did not come from a console page", "sign-in %s", name)
		require.False(t, u.signedIn(), "sign-in %s", name)
	}

	u.mustSignIn(g.AdminToken)
	cancel := "/ui/tasks/" + task.String() + "/cancel"
	for name, header := range forged {
		res, body := u.doWith(http.MethodPost, cancel, url.Values{}, header)
		require.Contains(t, requireConsoleProblem(t, res, body, http.StatusForbidden, "forbidden"),
			"did not come from a console page", "a post %s", name)
	}
	require.Equal(t, apiclient.TaskStatePending, g.Task(t, task).State, "a refused post changed the task")
	require.True(t, u.signedIn())

	// A browser that sends only Origin, the console's own, is let through.
	res, body := u.doWith(http.MethodPost, cancel, url.Values{}, http.Header{"Sec-Fetch-Site": nil, "Origin": {g.URL}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.Equal(t, apiclient.TaskStateCancelled, g.Task(t, task).State)
}

// TestConsoleOrganizationScope: an organization's token sees its own
// organization through the console and gets 404 for another's pages, as
// from the API; a reader may not change anything (403, as the API).
func TestConsoleOrganizationScope(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	mine, theirs := g.NewOrganization(t, "mine"), g.NewOrganization(t, "theirs")
	myTask := g.CreateTask(t, mine, harness.TaskSpec{})
	theirTask := g.CreateTask(t, theirs, harness.TaskSpec{})
	theirWorker := g.NewWorker(t, "their-worker", 1, theirs)

	token, _ := newToken(t, g, "mine-reader", &mine, nil, "reader")
	u := newConsoleUser(t, g)
	u.mustSignIn(token)

	res, page := u.get("/ui/tasks/" + myTask.String())
	require.Equal(t, http.StatusOK, res.StatusCode, page)
	require.Contains(t, page, myTask.String())
	for _, path := range []string{
		"/ui/tasks/" + theirTask.String(),
		"/ui/organizations/" + theirs.String(),
		"/ui/workers/" + theirWorker.ID.String(),
	} {
		res, body := u.get(path)
		requireConsoleProblem(t, res, body, http.StatusNotFound, "not-found")
		require.NotContains(t, body, theirTask.String(), path)
	}
	// Lists show this organization's objects only (a filter naming another
	// organization finds nothing, as the API's does for a scoped token).
	_, page = u.get("/ui/tasks?organization_id=" + theirs.String())
	require.NotContains(t, page, theirTask.String())
	_, page = u.get("/ui/tasks")
	require.Contains(t, page, myTask.String())
	require.NotContains(t, page, theirTask.String())
	_, page = u.get("/ui/organizations")
	require.Contains(t, page, mine.String())
	require.NotContains(t, page, theirs.String())

	// A reader sees no action it may not perform: the only form that
	// posts is the sign-out.
	myWorker := g.NewWorker(t, "my-worker", 1, mine)
	mySchedule := createSchedule(t, g, everySecondTask(mine, "nightly"))
	myFailed := g.CreateTask(t, mine, harness.TaskSpec{})
	cancelled, err := g.Control.CancelTaskWithResponse(context.Background(), myFailed)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, cancelled.StatusCode(), string(cancelled.Body))
	postForm := regexp.MustCompile(`<form[^>]*method="post"[^>]*action="([^"]+)"`)
	for _, path := range []string{
		"/ui/tasks/" + myTask.String(),
		"/ui/tasks/" + myFailed.String(),
		"/ui/tasks?state=cancelled",
		"/ui/tasks?state=pending",
		"/ui/workers/" + myWorker.ID.String(),
		"/ui/organizations/" + mine.String(),
		"/ui/schedules/" + mySchedule.Id.String(),
	} {
		res, page := u.get(path)
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", path, page)
		var actions []string
		for _, m := range postForm.FindAllStringSubmatch(page, -1) {
			actions = append(actions, m[1])
		}
		require.Equal(t, []string{"/ui/signout"}, actions, path)
		require.NotContains(t, page, "redrive-link", path)
		require.NotContains(t, page, "bulk-cancel-link", path)
		require.NotContains(t, page, "revoke-worker", path)
	}
	// The confirmation pages of actions it may not take are refused too.
	for _, path := range []string{"/ui/tasks/redrive?state=cancelled", "/ui/tasks/cancel?state=pending", "/ui/workers/" + myWorker.ID.String() + "/revoke"} {
		res, body := u.get(path)
		requireConsoleProblem(t, res, body, http.StatusForbidden, "forbidden")
	}

	// A reader's posts are refused as the API refuses them.
	for _, path := range []string{
		"/ui/tasks/" + myTask.String() + "/cancel",
		"/ui/tasks/" + myFailed.String() + "/retry",
		"/ui/workers/" + myWorker.ID.String() + "/disable",
		"/ui/workers/" + myWorker.ID.String() + "/enrollment-token",
		"/ui/schedules/" + mySchedule.Id.String() + "/pause",
		"/ui/organizations/" + mine.String() + "/workers/" + myWorker.ID.String() + "/unassign",
	} {
		res, body := u.do(http.MethodPost, path, url.Values{})
		requireConsoleProblem(t, res, body, http.StatusForbidden, "forbidden")
	}
	require.Equal(t, apiclient.TaskStatePending, g.Task(t, myTask).State)
}

// TestStats: GET /v1/stats counts the unfinished tasks by organization and
// state, the workers online against capacity and the leases of the last
// minute; an organization's token sees its organization only.
func TestStats(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	a, b := g.NewOrganization(t, "a"), g.NewOrganization(t, "b")
	for range 3 {
		g.CreateTask(t, a, harness.TaskSpec{})
	}
	g.CreateTask(t, b, harness.TaskSpec{})
	w := g.NewWorker(t, "w", 4, a)
	lease, err := w.Client.AcquireLeasesWithResponse(ctx, nil, apiclient.LeaseRequest{MaxTasks: ptr(1), WaitSeconds: ptr(0)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, lease.StatusCode(), string(lease.Body))
	require.Len(t, lease.JSON200.Leases, 1)

	res, err := g.Control.GetStatsWithResponse(ctx, &apiclient.GetStatsParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	st := res.JSON200
	depth := map[string]int64{}
	for _, q := range st.Queue {
		depth[q.OrganizationId.String()+"/"+string(q.State)] += q.Count
	}
	require.Equal(t, map[string]int64{
		a.String() + "/pending": 2, a.String() + "/leased": 1, b.String() + "/pending": 1,
	}, depth)
	require.EqualValues(t, 1, st.Workers.Online)
	require.EqualValues(t, 1, st.Workers.Total)
	require.EqualValues(t, 4, st.Workers.Capacity)
	require.EqualValues(t, 1, st.Workers.ActiveAttempts)
	require.EqualValues(t, 1, st.Leases.Count)
	require.Equal(t, 60, st.Leases.WindowSeconds)
	require.InDelta(t, 1.0/60, st.Leases.PerSecond, 1e-9)
	require.EqualValues(t, 0, st.Failures.Count)

	// The lease fails for good: a recent failure.
	attempt := lease.JSON200.Leases[0]
	done, err := w.Client.CompleteAttemptWithResponse(ctx, attempt.AttemptId, &apiclient.CompleteAttemptParams{LeaseToken: attempt.LeaseToken},
		apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcomeFailed,
			Error: &apiclient.AttemptError{Code: "boom", Message: ptr("it broke"), Retryable: ptr(false)}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, done.StatusCode(), string(done.Body))
	res, err = g.Control.GetStatsWithResponse(ctx, &apiclient.GetStatsParams{})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.JSON200.Failures.Count)
	require.Len(t, res.JSON200.Failures.Recent, 1)
	require.Equal(t, attempt.Task.Id, res.JSON200.Failures.Recent[0].TaskId)
	require.Equal(t, "boom", *res.JSON200.Failures.Recent[0].ErrorCode)

	// Organization b's token: b's queue only, and none of a's workers.
	token, _ := newToken(t, g, "b-reader", &b, nil, "reader")
	res, err = g.ControlClient(t, token).GetStatsWithResponse(ctx, &apiclient.GetStatsParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Len(t, res.JSON200.Queue, 1)
	require.Equal(t, b, res.JSON200.Queue[0].OrganizationId)
	require.EqualValues(t, 0, res.JSON200.Workers.Total)
	require.EqualValues(t, 0, res.JSON200.Leases.Count)
	require.EqualValues(t, 0, res.JSON200.Failures.Count)
}

// TestConsolePages walks every page as an operator and uses each action:
// the live log piece, disable and enable, a new enrollment token shown
// once, pause, resume and run of a schedule, the redrive of failed tasks
// after a confirmation page; each change is in the audit log.
func TestConsolePages(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "scanner-1", 2, org)
	failing := g.CreateTask(t, org, harness.TaskSpec{MaxAttempts: 1})
	lease, err := w.Client.AcquireLeasesWithResponse(ctx, nil, apiclient.LeaseRequest{MaxTasks: ptr(1), WaitSeconds: ptr(0)})
	require.NoError(t, err)
	require.Len(t, lease.JSON200.Leases, 1)
	l := lease.JSON200.Leases[0]
	appended, err := w.Client.AppendLogsWithResponse(ctx, l.AttemptId, &apiclient.AppendLogsParams{LeaseToken: l.LeaseToken},
		apiclient.LogChunk{Offset: 0, Data: "scanning <host>\n"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, appended.StatusCode(), string(appended.Body))
	sc := createSchedule(t, g, everySecondTask(org, "nightly"))
	scan := createScan(t, g, org, []string{"127.0.0.1"}, `[{"name": "echo"}]`)

	u := newConsoleUser(t, g)
	u.mustSignIn(g.AdminToken)
	mustGet := func(path string, want ...string) string {
		t.Helper()
		res, page := u.get(path)
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", path, page)
		for _, s := range want {
			require.Contains(t, page, s, path)
		}
		return page
	}
	post := func(path string, form url.Values) *http.Response {
		t.Helper()
		if form == nil {
			form = url.Values{}
		}
		res, page := u.do(http.MethodPost, path, form)
		require.Equal(t, http.StatusSeeOther, res.StatusCode, "%s: %s", path, page)
		return res
	}

	mustGet("/ui/", "Workers online", "acme")
	// Errors are problems, as the API's: an unknown page, a bad filter.
	res, body := u.get("/ui/no-such-page")
	requireConsoleProblem(t, res, body, http.StatusNotFound, "not-found")
	res, body = u.get("/ui/tasks/" + uuid.NewString())
	requireConsoleProblem(t, res, body, http.StatusNotFound, "not-found")
	for _, path := range []string{"/ui/assets/", "/ui/assets/nope.js"} {
		res, body = u.get(path)
		requireConsoleProblem(t, res, body, http.StatusNotFound, "not-found")
	}
	res, body = u.do(http.MethodDelete, "/ui/tasks", nil)
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"), body)
	res, _ = u.get("/ui/assets/console.js")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, res.Header.Get("Content-Type"), "javascript")
	// The contract checks a filter, as for the API: the detail names the
	// parameter, as the API's validator does.
	for param, filter := range map[string]string{"state": "state=bogus", "organization_id": "organization_id=not-an-id",
		"task_type": "task_type=x", "trigger": "trigger=y", "scan_id": "scan_id=1"} {
		res, body = u.get("/ui/tasks?" + filter)
		require.Contains(t, requireConsoleProblem(t, res, body, http.StatusBadRequest, "bad-request"), param)
	}
	res, body = u.get("/ui/audit?action=" + strings.Repeat("x", 300))
	requireConsoleProblem(t, res, body, http.StatusBadRequest, "bad-request")
	mustGet("/ui/overview/stats", `id="stats"`, `hx-trigger="every 5s"`)
	mustGet("/ui/tasks", failing.String())
	// The log, escaped, and the piece htmx polls for while the attempt runs.
	mustGet("/ui/tasks/"+failing.String(), "scanning &lt;host&gt;", "Following the log")
	piece := mustGet("/ui/tasks/"+failing.String()+"/log?attempt=1&offset=9", `hx-swap-oob="beforeend:#log-text"`, "&lt;host&gt;", "offset=16")
	require.NotContains(t, piece, "scanning")
	done, err := w.Client.CompleteAttemptWithResponse(ctx, l.AttemptId, &apiclient.CompleteAttemptParams{LeaseToken: l.LeaseToken},
		apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcomeFailed, Error: &apiclient.AttemptError{Code: "boom", Retryable: ptr(false)}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, done.StatusCode(), string(done.Body))
	mustGet("/ui/tasks/"+failing.String()+"/log?attempt=1&offset=16", "the log is complete")
	mustGet("/ui/", "boom")

	// Workers: eligibility in words, disable and enable, a new enrollment
	// token shown once (and never cached).
	mustGet("/ui/workers/"+w.ID.String(), "Eligibility by organization", "acme")
	post("/ui/workers/"+w.ID.String()+"/disable", nil)
	mustGet("/ui/workers/"+w.ID.String()+"?notice=disabled", "The worker is disabled", "Not eligible: the worker is disabled.")
	post("/ui/workers/"+w.ID.String()+"/enable", nil)
	mustGet("/ui/workers/"+w.ID.String(), `id="disable-worker"`)
	res, page := u.do(http.MethodPost, "/ui/workers/"+w.ID.String()+"/enrollment-token", url.Values{})
	require.Equal(t, http.StatusOK, res.StatusCode, page)
	require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
	token := regexp.MustCompile(`id="enrollment-token" readonly value="([^"]+)"`).FindStringSubmatch(page)
	require.NotNil(t, token, page)
	_, again := u.get("/ui/workers/" + w.ID.String())
	require.NotContains(t, again, token[1], "the enrollment token is shown once")
	mustGet("/ui/workers", "scanner-1")
	// A revocation needs a reason, as the API's body does.
	res, body = u.do(http.MethodPost, "/ui/workers/"+w.ID.String()+"/revoke", url.Values{"reason": {" "}})
	require.Contains(t, requireConsoleProblem(t, res, body, http.StatusBadRequest, "bad-request"), "reason")

	mustGet("/ui/organizations", "acme")
	// Assignment by choice: the form offers the workers not assigned yet,
	// by name and id.
	spare := g.NewWorker(t, "spare-1", 1)
	page = mustGet("/ui/organizations/"+org.String(), "scanner-1", `<select id="assign-worker" name="worker_id" required>`)
	require.Contains(t, page, `<option value="`+spare.ID.String()+`">spare-1 (`+spare.ID.String()+`)</option>`)
	require.NotContains(t, page, `<option value="`+w.ID.String()+`"`, "scanner-1 is assigned already")
	post("/ui/organizations/"+org.String()+"/assign", url.Values{"worker_id": {spare.ID.String()}})
	page = mustGet("/ui/organizations/"+org.String()+"?notice=assigned", "The worker is assigned", `<a href="/ui/workers/`+spare.ID.String()+`">spare-1</a>`)
	require.NotContains(t, page, `<option value="`+spare.ID.String()+`"`)
	mustGet("/ui/scans", scan.Id.String()[:8])
	// A running scan's progress refreshes itself.
	mustGet("/ui/scans/"+scan.Id.String(), "echo", "jobs done", `hx-get="/ui/scans/`+scan.Id.String()+`/progress"`)
	mustGet("/ui/scans/"+scan.Id.String()+"/progress", `id="scan-progress"`, "echo", "0 of 1 jobs done")

	// Schedules: next fires, pause, resume, run now.
	mustGet("/ui/schedules/"+sc.Id.String(), "nightly", `id="next-fires"`)
	post("/ui/schedules/"+sc.Id.String()+"/pause", nil)
	mustGet("/ui/schedules/"+sc.Id.String(), `id="resume-schedule"`)
	post("/ui/schedules/"+sc.Id.String()+"/resume", nil)
	mustGet("/ui/schedules/"+sc.Id.String(), `id="pause-schedule"`)
	post("/ui/schedules/"+sc.Id.String()+"/run", nil)
	mustGet("/ui/schedules", "nightly")
	// Delete: after a confirmation page, which changes nothing itself.
	mustGet("/ui/schedules/"+sc.Id.String(), `id="delete-schedule"`)
	mustGet("/ui/schedules/"+sc.Id.String()+"/delete", `id="confirm-delete-schedule"`)
	mustGet("/ui/schedules", "nightly")
	post("/ui/schedules/"+sc.Id.String()+"/delete", nil)
	res, body = u.get("/ui/schedules/" + sc.Id.String())
	requireConsoleProblem(t, res, body, http.StatusNotFound, "not-found")
	require.NotContains(t, mustGet("/ui/schedules"), "nightly")

	// Redrive: the failed tasks, after a confirmation page.
	mustGet("/ui/tasks?state=failed_terminal", `id="redrive-link"`)
	mustGet("/ui/tasks/redrive?state=failed_terminal", "will be queued again", failing.String())
	require.Equal(t, apiclient.TaskStateFailedTerminal, g.Task(t, failing).State, "the confirmation page changed nothing")
	form := url.Values{"task": {failing.String()}}
	post("/ui/tasks/redrive", form)
	require.Equal(t, apiclient.TaskStatePending, g.Task(t, failing).State)

	// Bulk cancel: the pending tasks of the organization, after a
	// confirmation page; a task that finished meanwhile is reported.
	second := g.CreateTask(t, org, harness.TaskSpec{})
	filter := "state=pending&organization_id=" + org.String()
	mustGet("/ui/tasks?"+filter, `id="bulk-cancel-link"`)
	mustGet("/ui/tasks/cancel?"+filter, "will be cancelled", failing.String(), second.String(), `id="confirm-cancel"`)
	require.Equal(t, apiclient.TaskStatePending, g.Task(t, second).State, "the confirmation page changed nothing")
	post("/ui/tasks/cancel", url.Values{"task": {failing.String(), second.String()}})
	require.Equal(t, apiclient.TaskStateCancelled, g.Task(t, failing).State)
	require.Equal(t, apiclient.TaskStateCancelled, g.Task(t, second).State)
	// A task that cannot be changed is reported with the API's detail.
	res, body = u.do(http.MethodPost, "/ui/tasks/cancel", url.Values{"task": {second.String(), uuid.NewString()}})
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `id="bulk-outcomes"`)
	require.Contains(t, body, "no such resource")
	res, body = u.get("/ui/tasks/cancel?state=completed")
	requireConsoleProblem(t, res, body, http.StatusBadRequest, "bad-request")

	// Every change is audited as the session's token.
	audit := mustGet("/ui/audit", "console.sign_in", "worker.update", "schedule.pause", "schedule.resume", "schedule.delete",
		"task.retry", "task.cancel")
	require.NotContains(t, audit, token[1])
	mustGet("/ui/audit?action=schedule.pause", "schedule.pause")
}

// TestConsoleScanChanges: after two scans of the same scope, the second
// finding another host, the scan page lists the second scan's changes and
// the organization's timeline lists them too, filtered by kind.
func TestConsoleScanChanges(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "scanner-1", 1, org)
	s := harness.ResultSender{T: t, W: w, Base: g.URL}
	scanFinding := func(host string) uuid.UUID {
		t.Helper()
		scan := createScan(t, g, org, []string{"localhost"}, `[{"name": "probe"}]`)
		l := lease(t, w, 1, 5)[0]
		require.Equal(t, http.StatusOK, s.Send(l, l.AttemptId.String()+":1", scannerBatch(1, host)).Status)
		completeAs(t, w, l, "succeeded", nil)
		require.Equal(t, apiclient.ScanState("completed"), waitScan(t, g, scan.Id).State)
		return scan.Id
	}
	first := scanFinding("old.example")
	second := scanFinding("new.example")

	u := newConsoleUser(t, g)
	u.mustSignIn(g.AdminToken)
	res, page := u.get("/ui/scans/" + first.String())
	require.Equal(t, http.StatusOK, res.StatusCode, page)
	require.Contains(t, page, "No changes.", "the first scan is the baseline")
	require.NotContains(t, page, `hx-get="/ui/scans/`, "a finished scan's page does not refresh")
	res, page = u.get("/ui/scans/" + second.String())
	require.Equal(t, http.StatusOK, res.StatusCode, page)
	require.Contains(t, page, `id="changes-h"`)
	require.Regexp(t, `Asset appeared</td><td>hostname <code>new.example</code>`, page)
	require.Regexp(t, `Asset disappeared</td><td>hostname <code>old.example</code>`, page)

	timeline := "/ui/organizations/" + org.String() + "/changes"
	res, page = u.get(timeline)
	require.Equal(t, http.StatusOK, res.StatusCode, page)
	require.Contains(t, page, "new.example")
	require.Contains(t, page, "old.example")
	res, page = u.get(timeline + "?kind=asset_appeared")
	require.Equal(t, http.StatusOK, res.StatusCode, page)
	require.Contains(t, page, "new.example")
	require.NotContains(t, page, "old.example")
	require.Contains(t, page, `value="asset_appeared" id="kind-asset_appeared" checked`)
	res, page = u.get(timeline + "?kind=asset_appeared&kind=asset_disappeared")
	require.Equal(t, http.StatusOK, res.StatusCode, page)
	require.Contains(t, page, "new.example")
	require.Contains(t, page, "old.example")
	res, body := u.get(timeline + "?kind=exploded")
	require.Contains(t, requireConsoleProblem(t, res, body, http.StatusBadRequest, "bad-request"), "kind")

	// Another organization's token finds neither page.
	other := g.NewOrganization(t, "other")
	token, _ := newToken(t, g, "other-reader", &other, nil, "reader")
	them := newConsoleUser(t, g)
	them.mustSignIn(token)
	for _, path := range []string{timeline, "/ui/scans/" + second.String()} {
		res, body := them.get(path)
		requireConsoleProblem(t, res, body, http.StatusNotFound, "not-found")
	}
}
