package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestSentinelsListed keeps store.Sentinels complete: every exported Err
// variable of the package is declared in errors.go and listed there, so the
// HTTP layer's test that each one has an answer cannot miss a new one.
func TestSentinelsListed(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var declared []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.VAR {
				continue
			}
			for _, spec := range gen.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(id.Name, "Err") && id.IsExported() {
						require.Equal(t, "errors.go", name, "%s: declare sentinels in store/errors.go", id.Name)
						declared = append(declared, id.Name)
					}
				}
			}
		}
	}
	var listed []string
	for name, err := range store.Sentinels() {
		require.NotNil(t, err, name)
		listed = append(listed, name)
	}
	slices.Sort(declared)
	slices.Sort(listed)
	require.NotEmpty(t, declared)
	require.Equal(t, declared, listed, "store.Sentinels must list every Err declared in errors.go")
}
