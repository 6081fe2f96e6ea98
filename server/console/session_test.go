package console

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSafeNext: after sign-in the console goes back only to its own pages,
// never to another host.
func TestSafeNext(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"/ui/tasks?state=pending":  "/ui/tasks?state=pending",
		"/ui/":                     "/ui/",
		"":                         "/ui/",
		"/ui":                      "/ui/",
		"https://evil.example/ui/": "/ui/",
		"//evil.example/ui/":       "/ui/",
		"/ui/\\evil.example":       "/ui/",
		"/v1/tasks":                "/ui/",
	} {
		require.Equal(t, want, safeNext(next), "next=%q", next)
	}
}

// TestOriginGuard: a state-changing request acts only when the browser
// says it came from the console's own origin; reads always do.
func TestOriginGuard(t *testing.T) {
	t.Parallel()
	g := newOriginGuard()
	for name, c := range map[string]struct {
		method string
		header map[string]string
		want   bool
	}{
		"a read from anywhere":                {http.MethodGet, map[string]string{"Sec-Fetch-Site": "cross-site"}, true},
		"a read without headers":              {http.MethodGet, nil, true},
		"a post from the console's page":      {http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-origin"}, true},
		"a post typed by the user":            {http.MethodPost, map[string]string{"Sec-Fetch-Site": "none"}, true},
		"a post with the console's Origin":    {http.MethodPost, map[string]string{"Origin": "https://gw.example"}, true},
		"a post from another site":            {http.MethodPost, map[string]string{"Sec-Fetch-Site": "cross-site"}, false},
		"a post from a sibling host":          {http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-site"}, false},
		"a post with another Origin":          {http.MethodPost, map[string]string{"Origin": "https://evil.example"}, false},
		"a post from a sandboxed frame":       {http.MethodPost, map[string]string{"Origin": "null"}, false},
		"a post saying nothing of its origin": {http.MethodPost, nil, false},
		"a delete saying nothing":             {http.MethodDelete, nil, false},
	} {
		r := httptest.NewRequest(c.method, "https://gw.example/ui/signout", nil)
		for k, v := range c.header {
			r.Header.Set(k, v)
		}
		require.Equal(t, c.want, g.fromOwnPage(r), name)
	}
}
