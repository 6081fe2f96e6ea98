package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWriteReplacesWithExactMode: the new content replaces the old, the
// mode is perm whatever the umask and the old file's mode, and no
// temporary file is left behind.
func TestWriteReplacesWithExactMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "worker.key")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	require.NoError(t, Write(path, []byte("new"), 0o600))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "new", string(got))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	syscall.Umask(0o022)
	require.NoError(t, Write(filepath.Join(dir, "ca.pem"), []byte("ca"), 0o664))
	fi, err = os.Stat(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o664), fi.Mode().Perm(), "the umask does not narrow perm")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temporary file left")
	SyncDir(dir)
}

// TestWriteFailureLeavesTheOldFile: a write that cannot finish leaves the
// old content and no temporary file, and its error names the path.
func TestWriteFailureLeavesTheOldFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "cert.pem")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
	// A directory where the file should be: the rename over it fails.
	blocked := filepath.Join(dir, "blocked")
	require.NoError(t, os.Mkdir(blocked, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(blocked, "x"), nil, 0o644))
	err := Write(blocked, []byte("new"), 0o644)
	require.ErrorContains(t, err, "write "+blocked)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temporary file left")

	err = Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o644)
	require.ErrorIs(t, err, os.ErrNotExist)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "old", string(got))
}
