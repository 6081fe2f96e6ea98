package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestSentinelsListed keeps store.Sentinels complete: every exported Err
// variable of the store is declared in the core's errors.go, named again
// by the facade's errors.go, and listed, so the HTTP layer's test that
// each one has an answer cannot miss a new one.
func TestSentinelsListed(t *testing.T) {
	t.Parallel()
	declared := map[string][]string{} // directory → its Err variables
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.VAR {
				continue
			}
			for _, spec := range gen.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(id.Name, "Err") && id.IsExported() {
						require.Equal(t, "errors.go", filepath.Base(path), "%s: declare sentinels in store/internal/core/errors.go", id.Name)
						dir := filepath.Dir(path)
						declared[dir] = append(declared[dir], id.Name)
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{".", filepath.Join("internal", "core")}, slices.Collect(maps.Keys(declared)),
		"sentinels are declared in the core and named by the facade only")
	var listed []string
	for name, err := range store.Sentinels() {
		require.NotNil(t, err, name)
		listed = append(listed, name)
	}
	for _, names := range declared {
		slices.Sort(names)
	}
	slices.Sort(listed)
	require.NotEmpty(t, listed)
	require.Equal(t, declared[filepath.Join("internal", "core")], listed, "store.Sentinels must list every Err declared in the core's errors.go")
	require.Equal(t, declared["."], listed, "store/errors.go must name every sentinel of the core")
}
