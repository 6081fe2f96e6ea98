package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/worker-gateway/gateway/problem"
)

// requestValidator checks requests against openapi.yaml in the order that
// keeps a refusal cheap:
//
//  1. the route (404, 405);
//  2. authentication by the security scheme the route declares, and the
//     permission its operation names (x-permission), from the headers and
//     the TLS state alone — no byte of the body is read;
//  3. the body, read within its limit and checked as strict JSON;
//  4. parameters and body against the schema.
//
// So an unauthenticated client costs the gateway its headers, whatever body
// it sends. With streamedBody (artifact uploads) the body is left unread for
// the handler to stream.
func (s *Server) requestValidator(streamedBody bool) (func(http.Handler) http.Handler, error) {
	spec, err := loadSpec()
	if err != nil {
		return nil, err
	}
	router, err := gorillamux.NewRouter(spec)
	if err != nil {
		return nil, err
	}
	secret := secretAnswers(spec)
	authenticate := &openapi3filter.Options{AuthenticationFunc: s.authenticate}
	schema := &openapi3filter.Options{
		// Step 2 authenticated the request already.
		AuthenticationFunc: func(context.Context, *openapi3filter.AuthenticationInput) error { return nil },
		ExcludeRequestBody: streamedBody,
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			route, pathParams, err := router.FindRoute(r)
			if err != nil {
				s.refuseUnread(w, r, s.validationProblem(err))
				return
			}
			if secret[route.Operation.OperationID] {
				w.Header().Set("Cache-Control", "no-store")
			}
			// kin-openapi reads the whole body before it calls the
			// authentication function (in case it wants the body): give it a
			// request without one.
			bodiless := r.WithContext(r.Context())
			bodiless.Body = http.NoBody
			input := &openapi3filter.RequestValidationInput{
				Request: bodiless, PathParams: pathParams, QueryParams: r.URL.Query(), Route: route, Options: authenticate,
			}
			if err := openapi3filter.ValidateSecurityRequirements(r.Context(), input, securityOf(route)); err != nil {
				p := s.validationProblem(err)
				s.securityProblem(r, p)
				s.refuseUnread(w, r, p)
				return
			}
			if !streamedBody {
				if p := readCheckedBody(r); p != nil {
					writeProblem(w, r, p, s.logger)
					return
				}
				input.Request = r
			}
			input.Options = schema
			if err := openapi3filter.ValidateRequest(r.Context(), input); err != nil {
				writeProblem(w, r, s.validationProblem(err), s.logger)
				return
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}

// securityOf is the security a route declares, or the document's default.
func securityOf(route *routers.Route) openapi3.SecurityRequirements {
	if route.Operation.Security != nil {
		return *route.Operation.Security
	}
	return route.Spec.Security
}

// refuseUnread answers a request whose body was not read. Over HTTP/1.x the
// connection closes after the answer: net/http would otherwise read what is
// left of the body (up to 256 KiB) to reuse the connection — work for a
// refused client, and a wait on one that never finishes its body. HTTP/2
// resets the stream by itself.
func (s *Server) refuseUnread(w http.ResponseWriter, r *http.Request, p *Problem) {
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
	writeProblem(w, r, p, s.logger)
}

// readCheckedBody reads a JSON request body (bounded by bodyLimits) and
// checks it strictly, leaving the checked bytes as the body for the schema
// check and the handler. Bodies must be application/json.
func readCheckedBody(r *http.Request) *Problem {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody || r.Method == http.MethodGet {
		return nil
	}
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	unsupported := newProblem(http.StatusUnsupportedMediaType, problem.UnsupportedMediaType, "send request bodies as application/json")
	if r.ContentLength > 0 && (err != nil || mediaType != "application/json") {
		return unsupported
	}
	body, err := readJSONBody(r)
	switch {
	case errors.Is(err, errBadJSON):
		reason, _ := problem.PublicText(err)
		return withCause(newProblem(http.StatusBadRequest, problem.BadRequest, "invalid request body: "+reason), err)
	case err != nil:
		// Too large is 413; anything else (a body shorter than its
		// Content-Length, a client too slow for the read timeout) is the
		// client's doing, never a 5xx.
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return problemFor(err)
		}
		return withCause(newProblem(http.StatusBadRequest, problem.BadRequest, "the request body could not be read"), err)
	}
	if len(body) > 0 && mediaType != "application/json" {
		return unsupported
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return nil
}
