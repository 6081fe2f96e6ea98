package problem_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"strconv"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// TestCodesMatchSpec keeps codes.go and openapi.yaml's x-problem-codes
// equal both ways: every constant is in the spec, every code in the spec is
// a constant. The constants are read from the source, so a new one cannot
// be missed.
func TestCodesMatchSpec(t *testing.T) {
	t.Parallel()
	constants := codeConstants(t)
	require.NotEmpty(t, constants)
	listed := specCodes(t, "../openapi.yaml")

	for name, code := range constants {
		require.Contains(t, listed, code, "problem.%s (%q) is missing from openapi.yaml's x-problem-codes", name, code)
	}
	values := slices.Collect(maps.Values(constants))
	for _, code := range listed {
		require.Contains(t, values, code, "openapi.yaml lists %q, which has no constant in package problem", code)
	}
	require.Len(t, values, len(listed), "two constants share a code")
}

// codeConstants maps each string constant of codes.go to its value.
func codeConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "codes.go", nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	out := map[string]string{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, id := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				require.True(t, ok && lit.Kind == token.STRING, "%s: codes are string literals", id.Name)
				v, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				out[id.Name] = v
			}
		}
	}
	return out
}

// specCodes returns the codes openapi.yaml lists on Problem.code.
func specCodes(t *testing.T, path string) []string {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile(path)
	require.NoError(t, err)
	schema := doc.Components.Schemas["Problem"]
	require.NotNil(t, schema)
	code := schema.Value.Properties["code"]
	require.NotNil(t, code)
	listed, ok := code.Value.Extensions["x-problem-codes"].(map[string]any)
	require.True(t, ok, "Problem.code has x-problem-codes, a map of code to meaning")
	codes := slices.Sorted(maps.Keys(listed))
	require.NotEmpty(t, codes)
	return codes
}
