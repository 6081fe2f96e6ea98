package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDocsHandlerServesEmbeddedSwaggerUI(t *testing.T) {
	docs, err := docsHandler()
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /docs", docs)
	mux.Handle("GET /docs/", docs)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	get := func(path string) (*http.Response, string) {
		t.Helper()
		res, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, string(b)
	}

	res, _ := get("/docs")
	if res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/docs/" {
		t.Fatalf("GET /docs: %d Location %q, want 301 to /docs/", res.StatusCode, res.Header.Get("Location"))
	}

	res, page := get("/docs/")
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /docs/: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	for _, want := range []string{"Worker Gateway API", `"/openapi.json"`, `src="/docs/swagger-ui-bundle.js"`, `href="/docs/swagger-ui.css"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the docs page lacks %s", want)
		}
	}
	// Everything is served locally: no CDN, no public validator.
	for _, cdn := range []string{"unpkg.com", "cdn.jsdelivr", "cdnjs", "validator.swagger.io"} {
		if strings.Contains(page, cdn) {
			t.Errorf("the docs page refers to %s", cdn)
		}
	}

	for _, asset := range []string{"swagger-ui-bundle.js", "swagger-ui-standalone-preset.js", "swagger-ui.css", "favicon-32x32.png"} {
		res, body := get("/docs/" + asset)
		if res.StatusCode != http.StatusOK || len(body) < 100 {
			t.Errorf("GET /docs/%s: %d, %d bytes", asset, res.StatusCode, len(body))
		}
	}
}
