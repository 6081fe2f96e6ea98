package server

import (
	"context"
	"net/http"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/console"
	"github.com/worker-gateway/gateway/store"
)

// consoleHandler builds the operators' console (/ui) over this replica's
// own handlers: a page acts as its session's API token exactly as a bearer
// request would after authentication, so the console enforces the API's
// permissions, organization scope and audit events.
func (s *Server) consoleHandler(h *handlers) (http.Handler, error) {
	return console.New(console.Config{
		API:      h,
		Sessions: s.store,
		AsPrincipal: func(ctx context.Context, p store.Principal) context.Context {
			// The request context already holds an empty auth state
			// (withRequestContext); a console page fills it in.
			st := authFrom(ctx)
			if st.principal == nil && st.worker == nil {
				ctx, st = withAuthState(ctx)
			}
			st.principal = &p
			return ctx
		},
		Problem: func(err error) (int, string) {
			p := problemFor(err)
			return p.Status, string(p.Detail)
		},
		WriteProblem: func(w http.ResponseWriter, r *http.Request, err error) {
			writeProblem(w, r, problemFor(err), s.logger)
		},
		NotSignedIn: func(detail problem.Text) error {
			return newProblem(http.StatusUnauthorized, problem.Unauthenticated, detail)
		},
		Audit: func(ctx context.Context, action string, details map[string]any) {
			// An organization's token's sign-ins are that organization's
			// events (its own audit listing shows them).
			var org *uuid.UUID
			if p := authFrom(ctx).principal; p != nil {
				org = p.OrganizationID
			}
			s.audit(ctx, action, "api_token", authTokenID(ctx), org, details)
		},
		SignInRefused: func(r *http.Request) {
			s.security(r.Context(), actionTokenRefused, "anonymous", "", map[string]any{"path": r.URL.Path})
		},
		SessionTTL:   s.cfg.ConsoleSessionTTL,
		RefreshEvery: s.cfg.ConsoleRefresh,
		Logger:       s.logger,
	})
}

// authTokenID is the id of the token a request acts as, or "".
func authTokenID(ctx context.Context) string {
	if p := authFrom(ctx).principal; p != nil {
		return p.TokenID.String()
	}
	return ""
}
