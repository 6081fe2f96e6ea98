package console

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/worker-gateway/gateway/store"
)

// sessionCookie holds the session's secret. The __Host- prefix makes
// browsers insist on Secure, Path=/ and no Domain, so no other host or path
// can set or shadow it. Forged requests never reach a handler (origin.go).
const sessionCookie = "__Host-wg-console"

// session is a signed-in user, as a handler sees it.
type session struct {
	secret    string
	principal store.Principal
	expiresAt time.Time
}

// Who describes the signed-in token for the header: its organization
// scope and permissions.
func (s *session) Who() string {
	scope := "all organizations"
	if org := s.principal.OrganizationID; org != nil {
		scope = "organization " + org.String()
	}
	return scope + " · " + strings.Join(s.principal.Permissions, ", ")
}

// The token permissions the API's operations require (x-permission in
// openapi.yaml): admin may do everything, producer manages tasks and
// schedules, reader reads. A page offers an action only to a session whose
// token may perform it; every call it makes is still decided by the
// contract (Config.API is guarded).
const (
	permissionAdmin    = "admin"
	permissionProducer = "producer"
)

// MayManageTasks reports whether the token may cancel, retry and redrive
// tasks and pause, resume and run schedules (admin or producer).
func (s *session) MayManageTasks() bool {
	return s != nil && (slices.Contains(s.principal.Permissions, permissionAdmin) || slices.Contains(s.principal.Permissions, permissionProducer))
}

// MayManageWorkers reports whether the token may disable, enable and revoke
// workers, issue enrollment tokens and change assignments (admin).
func (s *session) MayManageWorkers() bool {
	return s != nil && slices.Contains(s.principal.Permissions, permissionAdmin)
}

type sessionHandler func(w http.ResponseWriter, r *http.Request, s *session)

// authed resolves the session cookie and runs next as the session's token.
// Without a live session, a page is sent to the sign-in form.
func (c *Console) authed(next sessionHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		var s *session
		if ck, err := r.Cookie(sessionCookie); err == nil && strings.HasPrefix(ck.Value, store.ConsoleSessionPrefix) {
			cs, err := c.cfg.Sessions.ConsoleSessionBySecret(r.Context(), ck.Value)
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				c.fail(w, r, err)
				return
			default:
				s = &session{secret: ck.Value, principal: cs.Principal, expiresAt: cs.ExpiresAt}
			}
		}
		if s == nil {
			c.toSignIn(w, r)
			return
		}
		next(w, r.WithContext(c.cfg.AsPrincipal(r.Context(), s.principal)), s)
	})
}

// toSignIn sends a page request without a session to the sign-in form,
// coming back to the page afterwards (a redirect, not an error). An htmx
// request or a form post is answered 401 unauthenticated (problem+json); an
// htmx request is also told to load the sign-in form as a whole page.
func (c *Console) toSignIn(w http.ResponseWriter, r *http.Request) {
	isHTMX := r.Header.Get("HX-Request") != ""
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && !isHTMX {
		http.Redirect(w, r, Prefix+"/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	if isHTMX {
		// Back to the page the request came from, after signing in.
		target := Prefix + "/signin"
		if cur, err := url.Parse(r.Header.Get("HX-Current-URL")); err == nil && cur.Path != "" {
			target += "?next=" + url.QueryEscape(safeNext(cur.RequestURI()))
		}
		w.Header().Set("HX-Redirect", target)
	}
	c.fail(w, r, c.cfg.NotSignedIn("You are not signed in, or your session ended: sign in again."))
}

// safeNext keeps a post-sign-in redirect on the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix+"/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return Prefix + "/"
	}
	return next
}

type signInData struct {
	Next string
}

func (c *Console) signInForm(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	c.render(w, r, http.StatusOK, "signin", nil, "Sign in", signInData{Next: safeNext(r.FormValue("next"))})
}

// signIn exchanges an API token for a session cookie.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	token := strings.TrimSpace(r.PostFormValue("token"))
	if !strings.HasPrefix(token, store.APITokenPrefix) {
		c.fail(w, r, c.cfg.NotSignedIn("That is not an API token (they begin with "+store.APITokenPrefix+")."))
		return
	}
	// The token, its organization and the expiry: the store, which reads them.
	audited := c.cfg.Audit(r.Context(), "console.sign_in", nil)
	secret, cs, err := c.cfg.Sessions.CreateConsoleSession(audited, token, c.cfg.SessionTTL)
	if errors.Is(err, store.ErrNotFound) {
		if c.cfg.SignInRefused != nil {
			c.cfg.SignInRefused(r)
		}
		c.fail(w, r, c.cfg.NotSignedIn("The API token is unknown, revoked or expired."))
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	// A session this browser had is replaced, not left behind.
	if old, err := r.Cookie(sessionCookie); err == nil && strings.HasPrefix(old.Value, store.ConsoleSessionPrefix) {
		if err := c.cfg.Sessions.DeleteConsoleSession(r.Context(), old.Value); err != nil {
			c.cfg.Logger.Warn("console: delete the replaced session", "error", err.Error())
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: secret, Path: "/", Expires: cs.ExpiresAt,
		MaxAge: max(int(time.Until(cs.ExpiresAt).Seconds()), 1), HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	seeOther(w, r, safeNext(r.PostFormValue("next")), "")
}

// signOut deletes the session.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	if err := c.cfg.Sessions.DeleteConsoleSession(c.cfg.Audit(r.Context(), "console.sign_out", nil), s.secret); err != nil {
		c.fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	seeOther(w, r, Prefix+"/signin", "")
}
