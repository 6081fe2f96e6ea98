package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// specProblemCodes is the set openapi.yaml lists on Problem.code.
func specProblemCodes(t *testing.T) map[string]bool {
	t.Helper()
	spec, err := api.GetSpec()
	require.NoError(t, err)
	listed, ok := spec.Components.Schemas["Problem"].Value.Properties["code"].Value.Extensions["x-problem-codes"].(map[string]any)
	require.True(t, ok, "Problem.code has x-problem-codes")
	codes := map[string]bool{}
	for code := range listed {
		codes[code] = true
	}
	return codes
}

// TestSentinelAnswers: every store sentinel (store.Sentinels, which a store
// test keeps complete) has its own entry with an answer that is not the 500
// of an unexpected error, also when wrapped; every code of the table is in
// openapi.yaml; and the table cannot depend on its order.
func TestSentinelAnswers(t *testing.T) {
	t.Parallel()
	codes := specProblemCodes(t)
	for name, sentinel := range store.Sentinels() {
		a, ok := sentinelAnswers[sentinel]
		require.True(t, ok, "store.%s has no entry in sentinelAnswers", name)
		for _, err := range []error{sentinel, fmt.Errorf("some op: %w", sentinel)} {
			p := problemFor(err)
			require.NotEqual(t, http.StatusInternalServerError, p.Status, name)
			require.NotEqual(t, problem.Internal, p.Code, name)
			require.Equal(t, a.code, p.Code, name)
			require.Equal(t, a.status, p.Status, name)
		}
	}
	for sentinel, a := range sentinelAnswers {
		require.True(t, codes[a.code], "code %q of %q is not in openapi.yaml", a.code, sentinel)
		require.True(t, a.status >= 400 && a.status <= 599, "%q: status %d", sentinel, a.status)
		require.NotEmpty(t, a.detail, "%q", sentinel)
		// A map key must hash, and == in sentinelFor must not panic.
		require.True(t, reflect.TypeOf(sentinel).Comparable(), "%q", sentinel)
		for other := range maps.Keys(sentinelAnswers) {
			if other == sentinel { //nolint:errorlint // the same sentinel, not one it wraps
				continue
			}
			// Two entries matching at one node would make the answer
			// depend on map order.
			if is, ok := sentinel.(interface{ Is(error) bool }); ok {
				require.False(t, is.Is(other), "%q claims %q", sentinel, other)
			}
			// A sentinel that wraps another is answered as itself.
			if errors.Is(sentinel, other) {
				got, _ := sentinelFor(sentinel)
				require.Equal(t, a, got, "%q wraps %q", sentinel, other)
			}
		}
	}
}

// uncomparableErr cannot be a map key: sentinelFor must step over it.
type uncomparableErr struct {
	parts []string
	err   error
}

func (e uncomparableErr) Error() string { return strings.Join(e.parts, " ") }
func (e uncomparableErr) Unwrap() error { return e.err }

// claimsErr says it is target, as an error with an Is method may.
type claimsErr struct{ target error }

func (e claimsErr) Error() string        { return "claims" }
func (e claimsErr) Is(target error) bool { return target == e.target }

// TestSentinelPrecedence pins the documented rule: the sentinel nearest the
// outside of the chain wins.
func TestSentinelPrecedence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		code string
	}{
		{fmt.Errorf("complete: %w", store.ErrUnpersistedBatch), problem.BatchNotPersisted},
		{fmt.Errorf("complete: %w", store.ErrConflict), problem.Conflict},
		{problem.Wrap(store.ErrUploadTooLarge, "too big"), problem.PayloadTooLarge},
		{errors.Join(store.ErrNotFound, store.ErrLeaseLost), problem.NotFound},
		{errors.Join(errors.New("other"), fmt.Errorf("x: %w", store.ErrLeaseLost)), problem.LeaseLost},
		{uncomparableErr{parts: []string{"a"}, err: store.ErrLeaseLost}, problem.LeaseLost},
		{fmt.Errorf("wrapped: %w", claimsErr{store.ErrTaskFinished}), problem.TaskFinished},
		{fmt.Errorf("poll: %w", context.Canceled), problem.ClientClosedRequest},
	} {
		require.Equal(t, tc.code, problemFor(tc.err).Code, "%v", tc.err)
	}
	p := problemFor(problem.Wrap(store.ErrUploadTooLarge, "too big"))
	require.Equal(t, problem.Text("too big"), p.Detail)
	require.Equal(t, http.StatusRequestEntityTooLarge, p.Status)
}

// TestProblemDetailHidesErrorText: whatever an error says stays in the log;
// the client reads the table's text or problem.Text only.
func TestProblemDetailHidesErrorText(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-internal-text"
	errs := []error{
		errors.New(secret),
		fmt.Errorf("op: %s: %w", secret, errors.New("boom")),
		&pgconn.PgError{Code: "22003", Message: secret},                          // data exception: 400
		fmt.Errorf("query: %w", &pgconn.PgError{Code: "57P01", Message: secret}), // shutdown: 503
		&pgconn.PgError{Code: "P0001", Message: secret},
		problem.Wrap(errors.New(secret), "shown"),
	}
	for sentinel := range maps.Keys(sentinelAnswers) {
		errs = append(errs, fmt.Errorf("%w: %s", sentinel, secret), fmt.Errorf("%s: %w", secret, sentinel),
			problem.Wrap(fmt.Errorf("%w: %s", sentinel, secret), "shown"))
	}
	for _, err := range errs {
		var logged bytes.Buffer
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/v1/tasks", nil)
		writeProblem(rec, req, problemFor(err), slog.New(slog.NewTextHandler(&logged, nil)))
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
		require.NotContains(t, rec.Body.String(), secret, "%v", err)
		for k, v := range rec.Header() {
			require.NotContains(t, strings.Join(v, " "), secret, k)
		}
		require.Contains(t, logged.String(), secret, "the cause is logged: %v", err)
	}
}

// TestProblemCodesAreConstants: the server names codes only through package
// problem, never as string literals, so a code cannot drift from the spec.
func TestProblemCodesAreConstants(t *testing.T) {
	t.Parallel()
	codes := specProblemCodes(t)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || strings.HasSuffix(name, ".gen.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				// problem.go passes codes on from sentinelAnswers.
				if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "newProblem" && len(n.Args) == 3 && name != "problem.go" {
					var pkg *ast.Ident
					if sel, ok := n.Args[1].(*ast.SelectorExpr); ok {
						pkg, _ = sel.X.(*ast.Ident)
					}
					require.True(t, pkg != nil && pkg.Name == "problem",
						"%s: newProblem's code must be a problem constant", fset.Position(n.Pos()))
				}
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					if s, err := strconv.Unquote(n.Value); err == nil && codes[s] && strings.Contains(s, "-") {
						t.Errorf("%s: problem code %q as a literal; use package problem", fset.Position(n.Pos()), s)
					}
				}
			}
			return true
		})
	}
}
