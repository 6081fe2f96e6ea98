package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/google/uuid"
	"github.com/oapi-codegen/runtime"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/server/console"
	"github.com/worker-gateway/gateway/store"
)

// consoleHandler builds the operators' console (/ui) over this replica's
// own handlers: a page acts as its session's API token exactly as a bearer
// request would after authentication, so the console enforces the API's
// permissions (each call through authorizeOperation), organization scope
// and audit events.
func (s *Server) consoleHandler(h *handlers) (http.Handler, error) {
	bindQuery, checkBody, err := s.consoleChecks()
	if err != nil {
		return nil, err
	}
	spec, err := loadSpec()
	if err != nil {
		return nil, err
	}
	return console.New(console.Config{
		// Every call a page makes is decided by the operation's permission
		// in the contract, as an HTTP request for it is at authentication.
		API:       api.NewGuardedStrictServer(h, authorizeOperation(spec)),
		BindQuery: bindQuery,
		CheckBody: checkBody,
		Sessions:  s.store,
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
		Audit: func(ctx context.Context, action string, details map[string]any) context.Context {
			// An organization's token's sign-ins are that organization's
			// events (its own audit listing shows them). A sign-in's token
			// is known once the store reads it: it names it then.
			var org *uuid.UUID
			if p := authFrom(ctx).principal; p != nil {
				org = p.OrganizationID
			}
			return s.audit(ctx, action, "api_token", authTokenID(ctx), org, details)
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

// consoleChecks are the console's one way to validate what a page sends
// on: a list page's query is checked as the query of the API request the
// page stands for (GET path), an action's body as the body of the API
// request it stands for — by the same router, openapi3filter and problem
// texts as the API's request validator. A query is then bound into params
// (a generated *api.…Params) as the generated wrapper binds it. So enums,
// ids, formats, lengths and page sizes are validated once, by the contract.
func (s *Server) consoleChecks() (bindQuery func(path string, query url.Values, params any) error, checkBody func(method, path string, body any) error, err error) {
	spec, err := loadSpec()
	if err != nil {
		return nil, nil, err
	}
	router, err := gorillamux.NewRouter(spec)
	if err != nil {
		return nil, nil, err
	}
	// The console authenticated the session; only the request is checked.
	options := &openapi3filter.Options{AuthenticationFunc: func(context.Context, *openapi3filter.AuthenticationInput) error { return nil }}
	check := func(method, path string, query url.Values, body []byte) error {
		req, err := http.NewRequest(method, (&url.URL{Path: path, RawQuery: query.Encode()}).String(), bytes.NewReader(body))
		if err != nil {
			return err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		route, pathParams, err := router.FindRoute(req)
		if err != nil {
			return fmt.Errorf("console: %s %s is no API route: %w", method, path, err)
		}
		input := &openapi3filter.RequestValidationInput{Request: req, PathParams: pathParams, QueryParams: query, Route: route, Options: options}
		if err := openapi3filter.ValidateRequest(req.Context(), input); err != nil {
			return s.validationProblem(err)
		}
		return nil
	}
	bindQuery = func(path string, query url.Values, params any) error {
		if err := check(http.MethodGet, path, query, nil); err != nil {
			return err
		}
		return bindQueryParams(query, params)
	}
	checkBody = func(method, path string, body any) error {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		return check(method, path, nil, b)
	}
	return bindQuery, checkBody, nil
}

// bindQueryParams binds each field of *params by its form tag, with the
// style the generated wrapper uses for every query parameter (form,
// exploded).
func bindQueryParams(query url.Values, params any) error {
	v := reflect.ValueOf(params)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("console: bind query into %T, not a pointer to a params struct", params)
	}
	v = v.Elem()
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("form"), ",")
		if name == "" {
			continue
		}
		// Every query parameter of the contract is exploded form style, so a
		// comma is never a delimiter and url.Values loses nothing.
		if err := runtime.BindQueryParameterWithOptions("form", true, false, name, query, v.Field(i).Addr().Interface(), runtime.BindQueryParameterOptions{}); err != nil {
			return problem.Wrap(store.ErrInvalid, problem.Text("invalid parameter "+name))
		}
	}
	return nil
}
