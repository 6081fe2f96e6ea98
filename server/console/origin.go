package console

import (
	"net/http"

	"github.com/worker-gateway/gateway/store"
)

// originGuard refuses a state-changing request that no page of the console
// sent: cross-site request forgery, and a sign-in forged from another site
// (login CSRF). Go's http.CrossOriginProtection decides by the browser's
// Sec-Fetch-Site, else by its Origin against the request's Host. What it lets
// through — a request with neither header, as a non-browser client or a
// browser from before 2020 sends — is refused too: the console is for
// browsers, and one that does not say where a request came from cannot be
// told from a forged one by a sibling host of the same site, which the
// SameSite=Strict cookies do not stop.
type originGuard struct {
	crossOrigin *http.CrossOriginProtection
}

func newOriginGuard() *originGuard {
	return &originGuard{crossOrigin: http.NewCrossOriginProtection()}
}

// fromOwnPage reports whether r may act: a safe method, or a request the
// browser says came from the console's own origin.
func (g *originGuard) fromOwnPage(r *http.Request) bool {
	if g.crossOrigin.Check(r) != nil {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Origin") != ""
}

// wrap runs next for requests from the console's own pages and answers the
// others 403 forbidden (problem+json, as every refusal).
func (g *originGuard) wrap(c *Console, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.fromOwnPage(r) {
			w.Header().Set("Cache-Control", "no-store")
			c.refuse(w, r, store.ErrForbidden, "This request did not come from a console page (another site sent it, "+
				"or the browser did not say where it came from). Reload the page and try again.")
			return
		}
		next.ServeHTTP(w, r)
	})
}
