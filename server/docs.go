package server

import (
	"net/http"

	"github.com/swaggest/swgui"
	"github.com/swaggest/swgui/v5emb"
)

// docsPath is where Swagger UI is served.
const docsPath = "/docs/"

// docsHandler serves Swagger UI at /docs/ (and redirects /docs there),
// loading the contract from /openapi.json. Like the spec itself it needs no
// authentication. The Swagger UI assets are embedded in the binary by swgui's
// v5emb package, so the page works without internet access (unless the
// binary is built with the swguicdn tag, which this project never sets).
func docsHandler() http.Handler {
	ui := v5emb.NewHandlerWithConfig(swgui.Config{
		Title:       "Worker Gateway API",
		SwaggerJSON: "/openapi.json",
		BasePath:    docsPath,
		SettingsUI: map[string]string{
			// Never contact the public validator at validator.swagger.io.
			"validatorUrl": "null",
		},
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/docs" {
			target := docsPath
			if r.URL.RawQuery != "" {
				target += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, target, http.StatusMovedPermanently)
			return
		}
		ui.ServeHTTP(w, r)
	})
}
