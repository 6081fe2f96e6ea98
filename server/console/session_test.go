package console

import (
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

// TestCSRFTokenPerSession: the token differs per session and is stable
// within one.
func TestCSRFTokenPerSession(t *testing.T) {
	t.Parallel()
	a, b := &session{secret: "wgs_a"}, &session{secret: "wgs_b"}
	require.Equal(t, a.csrfToken(), a.csrfToken())
	require.NotEqual(t, a.csrfToken(), b.csrfToken())
	require.NotContains(t, a.csrfToken(), "wgs_a")
}
