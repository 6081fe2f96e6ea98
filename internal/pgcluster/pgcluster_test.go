package pgcluster_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/pgcluster"
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startCluster starts a cluster in dir and stops it when the test ends.
func startCluster(t *testing.T, dir string) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(testContext(t), pgcluster.Options{Dir: dir, Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Stop()) })
	return c
}

// sharedInitdbCache is an initdb cache kept across test runs, for the tests
// that do not exercise initdb itself.
func sharedInitdbCache() string {
	return filepath.Join(os.TempDir(), "pgcluster-test-initdb-cache-"+strconv.Itoa(os.Geteuid()))
}

// queryInt runs a one-value query on a fresh connection to database.
func queryInt(t *testing.T, c *pgcluster.Cluster, database, sql string) int {
	t.Helper()
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, c.URL(database))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, sql).Scan(&n))
	return n
}

func exec(t *testing.T, c *pgcluster.Cluster, database, sql string) {
	t.Helper()
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, c.URL(database))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err)
}

func TestStartRestartStop(t *testing.T) {
	t.Parallel()
	c := startCluster(t, t.TempDir())
	require.NotZero(t, c.Port())
	require.Equal(t, "postgres://postgres@127.0.0.1:"+strconv.Itoa(c.Port())+"/postgres?sslmode=disable", c.URL("postgres"))
	require.Equal(t, 1, queryInt(t, c, "postgres", "SELECT 1"))

	// The settings that make a test cluster fast and roomy are in force.
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	var fsync, listen, maxConns string
	require.NoError(t, conn.QueryRow(ctx,
		"SELECT current_setting('fsync'), current_setting('listen_addresses'), current_setting('max_connections')").
		Scan(&fsync, &listen, &maxConns))
	require.Equal(t, "off", fsync)
	require.Equal(t, "127.0.0.1", listen)
	require.Equal(t, "300", maxConns)

	// A crash-like restart drops existing connections; new ones work on the
	// same port.
	port := c.Port()
	require.NoError(t, c.Restart(ctx, "immediate"))
	require.Equal(t, port, c.Port())
	require.Error(t, conn.Ping(ctx), "a connection from before the restart must be dead")
	_ = conn.Close(ctx)
	require.Equal(t, 1, queryInt(t, c, "postgres", "SELECT 1"))

	// StopImmediate makes the server unreachable until Resume.
	require.NoError(t, c.StopImmediate())
	_, err = pgx.Connect(ctx, c.URL("postgres"))
	require.Error(t, err)
	require.NoError(t, c.StopImmediate(), "stopping a stopped cluster is a no-op")
	require.NoError(t, c.Resume(ctx))
	require.Equal(t, port, c.Port())
	require.Equal(t, 1, queryInt(t, c, "postgres", "SELECT 1"))

	require.Error(t, c.Restart(ctx, "brutal"))
}

func TestCreateDatabase(t *testing.T) {
	t.Parallel()
	c, err := pgcluster.Start(testContext(t), pgcluster.Options{Dir: t.TempDir(), InitdbCache: sharedInitdbCache(), Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Stop()) })
	ctx := testContext(t)

	require.NoError(t, c.CreateDatabase(ctx, "tmpl", ""))
	exec(t, c, "tmpl", "CREATE TABLE marker (x int); INSERT INTO marker VALUES (42)")
	require.NoError(t, c.CreateDatabase(ctx, "Clone-1", "tmpl"))
	require.Equal(t, 42, queryInt(t, c, "Clone-1", "SELECT x FROM marker"))

	err = c.CreateDatabase(ctx, "tmpl", "")
	require.ErrorContains(t, err, "already exists")
}

// TestReuseDir covers `make run` restarts: a second Start on the same
// directory keeps the data, whether the first server was stopped cleanly,
// left running by a killed process, or killed itself.
func TestReuseDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "nested", "cluster")
	ctx := testContext(t)

	first, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Durable: true, MaxConnections: 20, Logf: t.Logf})
	require.NoError(t, err)
	exec(t, first, "postgres", "CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)")
	require.Equal(t, 20, queryInt(t, first, "postgres", "SELECT current_setting('max_connections')::int"))
	require.NoError(t, first.Stop())
	require.NoError(t, first.Stop(), "stopping a stopped cluster is a no-op")

	// Clean stop, then reuse.
	second := startCluster(t, dir)
	require.Equal(t, 7, queryInt(t, second, "postgres", "SELECT x FROM kept"))
	require.Equal(t, 300, queryInt(t, second, "postgres", "SELECT current_setting('max_connections')::int"))

	// The owner of `second` "dies" without stopping it: a new Start must
	// stop the orphaned server and take over.
	third := startCluster(t, dir)
	require.Equal(t, 7, queryInt(t, third, "postgres", "SELECT x FROM kept"))
	require.NotEqual(t, "", second.DataDir())

	// The server itself is killed, leaving a stale postmaster.pid behind.
	pidFile, err := os.ReadFile(filepath.Join(third.DataDir(), "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	// Backends notice the postmaster's death and exit; until they have, the
	// old shared memory is in use and a new postmaster would refuse to start.
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 10*time.Second, 20*time.Millisecond)
	fourth := startCluster(t, dir)
	require.Equal(t, 7, queryInt(t, fourth, "postgres", "SELECT x FROM kept"))
}

// TestInitdbCache checks that clusters made from the initdb cache work and
// are independent of each other.
func TestInitdbCache(t *testing.T) {
	t.Parallel()
	cache := filepath.Join(t.TempDir(), "cache")
	start := func() *pgcluster.Cluster {
		c, err := pgcluster.Start(testContext(t), pgcluster.Options{Dir: t.TempDir(), InitdbCache: cache, Logf: t.Logf})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, c.Stop()) })
		return c
	}
	first, second := start(), start()
	entries, err := os.ReadDir(cache)
	require.NoError(t, err)
	require.Len(t, entries, 1, "one pristine data directory, no leftover temporary ones")

	exec(t, first, "postgres", "CREATE TABLE only_in_first (x int)")
	require.Equal(t, 1, queryInt(t, first, "postgres", "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_first'"))
	require.Equal(t, 0, queryInt(t, second, "postgres", "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_first'"))

	fi, err := os.Stat(second.DataDir())
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
}

// TestPortInUse checks that a start failure explains itself with the
// server's log.
func TestPortInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	_, err = pgcluster.Start(testContext(t), pgcluster.Options{
		Dir: t.TempDir(), Port: port, InitdbCache: sharedInitdbCache(), Logf: t.Logf,
	})
	t.Log(err)
	require.ErrorContains(t, err, "could not bind")
}
