package pgproc

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestURL(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://postgres@127.0.0.1:5433/gateway_test?sslmode=disable", URL(5433, "gateway_test"))
}

func TestTail(t *testing.T) {
	t.Parallel()
	require.Equal(t, "c\nd", Tail("a\nb\nc\nd\n", 2))
	require.Equal(t, "a\nb", Tail("a\nb", 5))
	require.Empty(t, Tail("", 3))
}

// TestReadFromFileSize: what a log gains after FileSize is what ReadFrom
// returns from it.
func TestReadFromFileSize(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "server.log")
	require.Zero(t, FileSize(path))
	require.Empty(t, ReadFrom(path, 0))
	require.NoError(t, os.WriteFile(path, []byte("earlier run\n"), 0o600))
	start := FileSize(path)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("could not bind\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Equal(t, "could not bind\n", ReadFrom(path, start))
	require.Empty(t, ReadFrom(path, 1<<20), "an offset past the end reads nothing")
}

func TestMkdirAllMakesEveryLevel0755(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	require.NoError(t, MkdirAll(dir))
	require.NoError(t, MkdirAll(dir), "an existing directory is fine")
	for _, d := range []string{filepath.Join(base, "a"), dir} {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o755), fi.Mode().Perm(), d)
	}
}

// TestWaitReadyGivesUp: with nothing listening, WaitReady returns
// ErrExited once the process has exited, and the connection error once
// the timeout passes.
func TestWaitReadyGivesUp(t *testing.T) {
	t.Parallel()
	port, err := FreePort()
	require.NoError(t, err)
	exited := make(chan struct{})
	close(exited)
	require.ErrorIs(t, WaitReady(context.Background(), URL(port, "postgres"), time.Minute, exited), ErrExited)

	err = WaitReady(context.Background(), URL(port, "postgres"), 100*time.Millisecond, nil)
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrExited)
}

func TestRunAsIsNobodyUnlessRoot(t *testing.T) {
	t.Parallel()
	a, err := RunAs()
	if os.Geteuid() != 0 {
		require.NoError(t, err)
		require.Nil(t, a)
		return
	}
	if err != nil {
		t.Skipf("root without a postgres user: %v", err)
	}
	require.Equal(t, "postgres", a.Name)
	require.Equal(t, uint32(a.UID), a.Credential().Uid)
}
