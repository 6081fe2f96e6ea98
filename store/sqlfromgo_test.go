package store_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestSQLFromGo: the functions generated from Go's constants are the ones
// the database gets.
func TestSQLFromGo(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "migrations", "functions", store.SQLFromGoFile)
	want := store.SQLFromGo()
	if os.Getenv("UPDATE_SQL_FROM_GO") != "" {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644)) //nolint:gosec // a source file
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, want, string(got), "%s is generated: UPDATE_SQL_FROM_GO=1 go test ./store -run TestSQLFromGo", path)
}
