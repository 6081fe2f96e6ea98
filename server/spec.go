package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/oasdiff/yaml"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
)

// specJSON and specYAML are the embedded contract, served without
// authentication so clients and Swagger UI can load it.
var specJSON, specYAML = mustSpecDocuments()

func mustSpecDocuments() ([]byte, []byte) {
	spec, err := api.GetSpec()
	if err != nil {
		panic(fmt.Sprintf("embedded openapi spec: %v", err))
	}
	j, err := spec.MarshalJSON()
	if err != nil {
		panic(fmt.Sprintf("embedded openapi spec: %v", err))
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		panic(fmt.Sprintf("embedded openapi spec: %v", err))
	}
	return j, y
}

func serveSpecYAML(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(specYAML)
}

func serveSpecJSON(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(specJSON)
}

// bufferedResponse captures a response so it can be validated before it is
// sent.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}
func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

// responseValidator checks every response against openapi.yaml and replaces
// a non-conforming one with a 500 problem naming the mismatch. Tests run
// with it so that a contract violation fails them.
func (s *Server) responseValidator(next http.Handler) (http.Handler, error) {
	spec, err := loadSpec()
	if err != nil {
		return nil, err
	}
	router, err := gorillamux.NewRouter(spec)
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := &bufferedResponse{header: http.Header{}}
		next.ServeHTTP(buf, r)
		route, pathParams, routeErr := router.FindRoute(r)
		if routeErr == nil {
			err := openapi3filter.ValidateResponse(r.Context(), &openapi3filter.ResponseValidationInput{
				RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, PathParams: pathParams, Route: route},
				Status:                 buf.status,
				Header:                 buf.header,
				Body:                   io.NopCloser(bytes.NewReader(buf.body.Bytes())),
				Options:                &openapi3filter.Options{IncludeResponseStatus: true},
			})
			if err != nil {
				// The validator's text may quote the response: logs only.
				p := withCause(newProblem(http.StatusInternalServerError, problem.ResponseContractViolation, "the response does not match openapi.yaml"), err)
				writeProblem(w, r, p, s.logger)
				return
			}
		}
		for k, v := range buf.header {
			w.Header()[k] = v
		}
		w.WriteHeader(buf.status)
		_, _ = w.Write(buf.body.Bytes())
	}), nil
}
