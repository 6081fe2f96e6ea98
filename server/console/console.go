// Package console is the operators' web console at /ui: server-rendered
// pages (html/template) over the same handlers as the REST API, with htmx
// (vendored in assets/, see assets/README) for the parts that refresh
// themselves. Nothing is fetched from another host and nothing is built at
// run time.
//
// A user signs in with an API token, which is exchanged for a session
// (session.go); every page then calls the API's own handler methods
// in-process as that token, so the console enforces exactly the API's
// permission checks, organization scope and audit events, and answers
// another organization's objects with 404 as the API does.
package console

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// Prefix is where the console is served.
const Prefix = "/ui"

// Sessions keeps console sessions (store.Store implements it).
type Sessions interface {
	CreateConsoleSession(ctx context.Context, token string, ttl time.Duration) (string, store.ConsoleSession, error)
	ConsoleSessionBySecret(ctx context.Context, secret string) (store.ConsoleSession, error)
	DeleteConsoleSession(ctx context.Context, secret string) error
}

// Config is what the console needs from the gateway.
type Config struct {
	// API is the gateway's implementation of the contract: the console
	// calls it as the signed-in token.
	API api.StrictServerInterface
	// BindQuery checks query as the query of the API's GET path, as the
	// API's request validator does (an error is its 400 problem), and binds
	// it into params, a generated *api.…Params. Pages never check filters
	// themselves: the contract does, once.
	BindQuery func(path string, query url.Values, params any) error
	// CheckBody checks body (a generated request body) as the body of the
	// API's method and path, as the API's request validator does.
	CheckBody func(method, path string, body any) error
	// Sessions stores sessions.
	Sessions Sessions
	// AsPrincipal returns ctx acting as p, as a bearer token's request
	// would after authentication.
	AsPrincipal func(ctx context.Context, p store.Principal) context.Context
	// Problem is how the API answers an error a handler returned: its
	// status and a detail safe to show.
	Problem func(err error) (status int, detail string)
	// WriteProblem answers err as the API answers it: an
	// application/problem+json body with the status and code of the API's
	// error table, logged as the API logs a refusal.
	WriteProblem func(w http.ResponseWriter, r *http.Request, err error)
	// NotSignedIn is the error WriteProblem answers as 401 unauthenticated,
	// for an htmx request or a form post whose session has ended.
	NotSignedIn func(detail problem.Text) error
	// Audit declares the audit record of a console change (sign-in,
	// sign-out) as ctx's principal: the session's store call made with the
	// returned context writes it in its transaction (store.WithAudit).
	Audit func(ctx context.Context, action string, details map[string]any) context.Context
	// SignInRefused records a refused sign-in (an unknown, revoked or
	// expired token), as the API records a refused bearer token.
	SignInRefused func(r *http.Request)
	// SessionTTL bounds a session (never past its token's expiry).
	SessionTTL time.Duration
	// RefreshEvery is how often the overview and a live log refresh.
	RefreshEvery time.Duration
	Logger       *slog.Logger
}

// DefaultSessionTTL is a working day.
const DefaultSessionTTL = 8 * time.Hour

// Console serves /ui.
type Console struct {
	cfg   Config
	pages *pages
	mux   *http.ServeMux
	// handler is mux behind the origin guard (origin.go).
	handler http.Handler
}

// New builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.RefreshEvery <= 0 {
		cfg.RefreshEvery = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, pages: p, mux: http.NewServeMux()}
	c.routes()
	c.handler = newOriginGuard().wrap(c, c.mux)
	return c, nil
}

// ServeHTTP serves every path under Prefix with the console's headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	c.handler.ServeHTTP(w, r)
}

// contentSecurityPolicy lets a console page load nothing but this origin's
// files: no inline script or style, no eval, no framing, forms posting
// only here.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (c *Console) routes() {
	m := c.mux
	m.HandleFunc("GET "+Prefix, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/", http.StatusFound)
	})
	m.Handle("GET "+Prefix+"/assets/", http.StripPrefix(Prefix+"/assets/", c.assetHandler()))
	m.HandleFunc("GET "+Prefix+"/signin", c.signInForm)
	m.HandleFunc("POST "+Prefix+"/signin", c.signIn)
	m.Handle("POST "+Prefix+"/signout", c.authed(c.signOut))

	m.Handle("GET "+Prefix+"/{$}", c.authed(c.overview))
	m.Handle("GET "+Prefix+"/overview/stats", c.authed(c.overviewStats))

	m.Handle("GET "+Prefix+"/tasks", c.authed(c.tasks))
	for _, a := range []bulkAction{redriveAction, bulkCancelAction} {
		m.Handle("GET "+Prefix+"/tasks/"+a.Path, c.authed(c.bulkConfirm(a)))
		m.Handle("POST "+Prefix+"/tasks/"+a.Path, c.authed(c.bulkApply(a)))
	}
	m.Handle("GET "+Prefix+"/tasks/{id}", c.authed(c.task))
	m.Handle("GET "+Prefix+"/tasks/{id}/log", c.authed(c.taskLog))
	m.Handle("POST "+Prefix+"/tasks/{id}/cancel", c.authed(c.cancelTask))
	m.Handle("POST "+Prefix+"/tasks/{id}/retry", c.authed(c.retryTask))
	m.Handle("GET "+Prefix+"/files/{id}", c.authed(c.downloadFile))

	m.Handle("GET "+Prefix+"/workers", c.authed(c.workers))
	m.Handle("GET "+Prefix+"/workers/{id}", c.authed(c.worker))
	m.Handle("POST "+Prefix+"/workers/{id}/enable", c.authed(c.enableWorker))
	m.Handle("POST "+Prefix+"/workers/{id}/disable", c.authed(c.disableWorker))
	m.Handle("GET "+Prefix+"/workers/{id}/revoke", c.authed(c.revokeWorkerForm))
	m.Handle("POST "+Prefix+"/workers/{id}/revoke", c.authed(c.revokeWorker))
	m.Handle("POST "+Prefix+"/workers/{id}/enrollment-token", c.authed(c.enrollmentToken))

	m.Handle("GET "+Prefix+"/organizations", c.authed(c.organizations))
	m.Handle("GET "+Prefix+"/organizations/{id}", c.authed(c.organization))
	m.Handle("GET "+Prefix+"/organizations/{id}/changes", c.authed(c.exposureChanges))
	m.Handle("POST "+Prefix+"/organizations/{id}/assign", c.authed(c.assignWorker))
	m.Handle("POST "+Prefix+"/organizations/{id}/workers/{worker}/unassign", c.authed(c.unassignWorker))

	m.Handle("GET "+Prefix+"/scans", c.authed(c.scans))
	m.Handle("GET "+Prefix+"/scans/{id}", c.authed(c.scan))
	m.Handle("GET "+Prefix+"/scans/{id}/progress", c.authed(c.scanProgress))

	m.Handle("GET "+Prefix+"/schedules", c.authed(c.schedules))
	m.Handle("GET "+Prefix+"/schedules/{id}", c.authed(c.schedule))
	m.Handle("POST "+Prefix+"/schedules/{id}/pause", c.authed(c.pauseSchedule))
	m.Handle("POST "+Prefix+"/schedules/{id}/resume", c.authed(c.resumeSchedule))
	m.Handle("POST "+Prefix+"/schedules/{id}/run", c.authed(c.runSchedule))
	m.Handle("GET "+Prefix+"/schedules/{id}/delete", c.authed(c.deleteScheduleForm))
	m.Handle("POST "+Prefix+"/schedules/{id}/delete", c.authed(c.deleteSchedule))

	m.Handle("GET "+Prefix+"/audit", c.authed(c.audit))

	m.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		c.refuse(w, r, store.ErrNotFound, "There is no such page.")
	})
}
