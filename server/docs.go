package server

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/swaggest/swgui"
	"github.com/swaggest/swgui/v5emb"
)

// docsPath is where Swagger UI is served.
const docsPath = "/docs/"

// docsHandler serves Swagger UI at /docs/ (and redirects /docs there),
// loading the contract from /openapi.json. Like the spec itself it needs no
// authentication. The Swagger UI assets are embedded in the binary by swgui's
// v5emb package, so the page works without internet access (unless the
// binary is built with the swguicdn tag, which this project never sets). It
// is served as an HTML page (htmlPages): its inline script and style are
// allowed by their hashes, taken from the page as it renders.
func docsHandler() (http.Handler, error) {
	ui := v5emb.NewHandlerWithConfig(swgui.Config{
		Title:       "Worker Gateway API",
		SwaggerJSON: "/openapi.json",
		BasePath:    docsPath,
		SettingsUI: map[string]string{
			// Never contact the public validator at validator.swagger.io.
			"validatorUrl": "null",
		},
	})
	page := &bufferedResponse{header: http.Header{}}
	ui.ServeHTTP(page, &http.Request{Method: http.MethodGet, URL: &url.URL{Path: docsPath}})
	if page.status != http.StatusOK {
		return nil, fmt.Errorf("render the docs page: status %d", page.status)
	}
	return htmlPages(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/docs" {
			target := docsPath
			if r.URL.RawQuery != "" {
				target += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, target, http.StatusMovedPermanently)
			return
		}
		ui.ServeHTTP(w, r)
	}), page.body.Bytes())
}
