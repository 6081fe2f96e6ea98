package store_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSetConfigIsTransactionLocal: every set_config of the store is
// transaction-local (its third argument true). Behind a pooler in
// transaction mode a session-level setting would stay on the server
// connection and change the plans of whichever client gets it next.
func TestSetConfigIsTransactionLocal(t *testing.T) {
	calls := regexp.MustCompile(`(?i)set_config\(\s*'[^']*'\s*,\s*'[^']*'\s*,\s*(\w+)\s*\)`)
	plainSet := regexp.MustCompile(`(?im)^\s*SET\s+(SESSION\s+)?\w+\s*(=|TO)`)
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return err
	})
	require.NoError(t, err)
	seen := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range calls.FindAllSubmatch(src, -1) {
			seen++
			require.Equal(t, "true", string(m[1]), "%s: %s is session-level", f, m[0])
		}
		require.Nil(t, plainSet.Find(src), "%s: a session-level SET", f)
	}
	require.Positive(t, seen, "the store's set_config calls were found")
}
