package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"go.opentelemetry.io/otel/trace"

	"github.com/worker-gateway/gateway/problem"
)

type requestIDKey struct{}

// requestInfoKey holds what handlers need from the raw request that the
// strict interface does not pass on.
type requestInfoKey struct{}

type requestInfo struct {
	contentLength int64
	remoteAddr    string
}

// sourceAddressFrom is the request's source address as refusals are
// counted (see sourceAddress).
func sourceAddressFrom(ctx context.Context) string {
	info, _ := ctx.Value(requestInfoKey{}).(requestInfo)
	return sourceAddress(info.remoteAddr)
}

// requestContentLengthFrom is the request's Content-Length, or -1.
func requestContentLengthFrom(ctx context.Context) int64 {
	info, ok := ctx.Value(requestInfoKey{}).(requestInfo)
	if !ok {
		return -1
	}
	return info.contentLength
}

func requestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// requestIDs are the log attributes that find a request: its request_id,
// and its trace_id when the request is traced.
func requestIDs(ctx context.Context) []any {
	ids := []any{"request_id", requestIDFrom(ctx)}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		ids = append(ids, "trace_id", sc.TraceID().String())
	}
	return ids
}

func newRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// statusRecorder remembers the status a handler wrote, for the access log.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// withRequestContext gives every request an id (echoed as X-Request-Id), an
// empty auth state for the validator to fill, panic recovery into a problem,
// and one access-log line; every response gets X-Content-Type-Options.
func (s *Server) withRequestContext(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := newRequestID()
		ctx := context.WithValue(r.Context(), requestIDKey{}, id)
		ctx = context.WithValue(ctx, requestInfoKey{}, requestInfo{contentLength: r.ContentLength, remoteAddr: r.RemoteAddr})
		ctx, _ = withAuthState(ctx)
		r = r.WithContext(ctx)
		w.Header().Set("X-Request-Id", id)
		noSniff(w)
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				s.logger.Error("panic", append(requestIDs(ctx), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))...)
				if rec.status == 0 {
					writeProblem(rec, r, newProblem(http.StatusInternalServerError, problem.Internal, "an internal error occurred"), s.logger)
				}
			}
			level := slog.LevelDebug
			if rec.status >= 500 {
				level = slog.LevelError
			}
			s.logger.Log(ctx, level, "request", append(requestIDs(ctx), "method", r.Method, "path", r.URL.Path,
				"status", rec.status, "duration_ms", float64(time.Since(start).Microseconds())/1000)...)
		}()
		next.ServeHTTP(rec, r)
	})
}

// bodyLimits bounds every request body before anything reads it: a
// declared length past the route's limit is refused at once, and reading
// past it fails. The body is read (and checked as JSON) only after
// authentication, by requestValidator.
func (s *Server) bodyLimits(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := s.cfg.bodyLimitFor(r.Method, r.URL.Path)
		if r.ContentLength > limit {
			writeProblem(w, r, newProblem(http.StatusRequestEntityTooLarge, problem.PayloadTooLarge,
				problem.Text(fmt.Sprintf("the request body exceeds %d bytes", limit))), s.logger)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		if isUpload(r.Method, r.URL.Path) {
			r.Body = progressDeadline(w, r.Body, s.cfg.Artifacts.UploadIdleTimeout)
		}
		next.ServeHTTP(w, r)
	})
}

// validationProblem turns a validator error into what the client sees: the
// authentication outcome for security failures, 404/405 for unknown routes,
// 413 for oversized bodies, and otherwise a 400 naming the offending part
// (never echoing schema internals or the rejected value).
func (s *Server) validationProblem(err error) *Problem {
	var secErr *openapi3filter.SecurityRequirementsError
	if errors.As(err, &secErr) {
		for _, e := range secErr.Errors {
			var p *Problem
			if errors.As(e, &p) {
				return p
			}
		}
		return newProblem(http.StatusUnauthorized, problem.Unauthenticated, "authentication failed")
	}
	var maxBytes *http.MaxBytesError
	if errors.As(err, &maxBytes) {
		return problemFor(err)
	}
	var routeErr *routers.RouteError
	if errors.As(err, &routeErr) {
		if errors.Is(err, routers.ErrMethodNotAllowed) {
			return newProblem(http.StatusMethodNotAllowed, problem.MethodNotAllowed, "this route does not accept this method")
		}
		return newProblem(http.StatusNotFound, problem.NotFound, "no such route")
	}
	var reqErr *openapi3filter.RequestError
	if errors.As(err, &reqErr) {
		switch {
		case reqErr.Parameter != nil:
			// No cause: kin-openapi's text quotes the value, a Lease-Token's too.
			return newProblem(http.StatusBadRequest, problem.BadRequest, parameterReason(reqErr))
		case reqErr.RequestBody != nil:
			return newProblem(http.StatusBadRequest, problem.BadRequest, "invalid request body: "+bodyReason(reqErr))
		}
	}
	return newProblem(http.StatusBadRequest, problem.BadRequest, "the request does not match the API contract")
}

// bodyReason gives a short, safe reason for a rejected body: the JSON field
// and kin-openapi's reason, which by its contract never includes the
// rejected value.
func bodyReason(reqErr *openapi3filter.RequestError) problem.Text {
	var schemaErr *openapi3.SchemaError
	if errors.As(reqErr.Err, &schemaErr) {
		ptr := schemaErr.JSONPointer()
		if text, ok := schemaReason(strings.Join(ptr, "."), schemaErr); ok {
			return text
		}
		reason := schemaErr.Reason
		if len(reason) > 200 {
			reason = reason[:200]
		}
		if len(ptr) > 0 {
			return problem.Text("field " + strings.Join(ptr, ".") + ": " + reason)
		}
		return problem.Text(reason)
	}
	var parseErr *openapi3filter.ParseError
	if errors.As(reqErr.Err, &parseErr) {
		return "it is not valid JSON"
	}
	return "it does not match the schema"
}

// parameterReason says what is wrong with a parameter, by its name in
// openapi.yaml (never the request's spelling or value).
func parameterReason(reqErr *openapi3filter.RequestError) problem.Text {
	param := reqErr.Parameter
	name := param.Name
	if param.In == openapi3.ParameterInHeader {
		name = "the " + name + " header"
	}
	if errors.Is(reqErr.Err, openapi3filter.ErrInvalidRequired) || errors.Is(reqErr.Err, openapi3filter.ErrInvalidEmptyValue) {
		return problem.Text(name + " is missing")
	}
	if param.In == openapi3.ParameterInHeader {
		// A header's schema says nothing a client can act on beyond this.
		return problem.Text(name + " is malformed")
	}
	var schemaErr *openapi3.SchemaError
	if errors.As(reqErr.Err, &schemaErr) {
		if text, ok := schemaReason(name, schemaErr); ok {
			return text
		}
	}
	return problem.Text(fmt.Sprintf("invalid %s parameter %q", param.In, param.Name))
}

// schemaReason words the schema failures a newcomer meets most (a malformed
// UUID, a value outside an enum) from the schema itself, not from
// kin-openapi's reason, which quotes the format's regular expression.
func schemaReason(name string, schemaErr *openapi3.SchemaError) (problem.Text, bool) {
	if name == "" || schemaErr.Schema == nil {
		return "", false
	}
	switch schemaErr.SchemaField {
	case "format":
		if schemaErr.Schema.Format == "uuid" {
			return problem.Text(name + " must be a UUID"), true
		}
	case "enum":
		values := make([]string, 0, len(schemaErr.Schema.Enum))
		for _, v := range schemaErr.Schema.Enum {
			values = append(values, fmt.Sprint(v))
		}
		// The values come from openapi.yaml.
		return problem.Text(name + " must be one of: " + strings.Join(values, ", ")), true
	}
	return "", false
}
