// Package storetest provides real-PostgreSQL helpers for tests: one private
// cluster per test binary, a template database migrated once, a fresh clone
// per test.
//
// A package that uses it calls Main from TestMain:
//
//	func TestMain(m *testing.M) { storetest.Main(m) }
//
// and each test takes its own database with NewDatabase or NewPool, so tests
// may run in parallel without seeing each other's rows. Cloning the migrated
// template is much cheaper than migrating each database.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/worker-gateway/gateway/internal/pgcluster"
	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store"
)

// TemplateDatabase is the migrated database every test database is cloned
// from.
const TemplateDatabase = "template_gateway"

const (
	// dirPrefix names the temporary cluster directories, so that those
	// left by killed test binaries can be found and cleaned up.
	dirPrefix = "gateway-storetest-"
	// ownerFile in a cluster directory holds the PID of the test binary
	// that owns it.
	ownerFile = "owner.pid"
	// minShmFree is the free space /dev/shm needs for clusters to live
	// there: a cluster with its clones and WAL takes a few hundred MB, and
	// containers often mount a tiny /dev/shm.
	minShmFree = 2 << 30
	// setupTimeout bounds starting the cluster and migrating the template;
	// installing PostgreSQL on a fresh machine is the slow case.
	setupTimeout = 5 * time.Minute
	// cloneRetry bounds the retries of a clone refused because the template
	// is still in use.
	cloneRetry = 10 * time.Second
	// sqlstateObjectInUse is PostgreSQL's "source database is being accessed
	// by other users" when cloning a template that has open connections.
	sqlstateObjectInUse = "55006"
)

var (
	// cluster is the binary's cluster, set by Main.
	cluster *pgcluster.Cluster
	// cloneMu serialises clones: PostgreSQL refuses to copy a template
	// while another CREATE DATABASE is copying it.
	cloneMu sync.Mutex
	// cloneCount numbers the test databases.
	cloneCount atomic.Uint64
)

// Main runs a test binary's tests with a private cluster and exits with
// their result; call it from TestMain. It starts the cluster in a new
// temporary directory, creates and migrates the template database, runs the
// tests, checks for leaked goroutines when they passed, then stops the
// cluster and removes its directory.
func Main(m TestRunner) {
	os.Exit(run(m))
}

// TestRunner is what Main runs: a *testing.M, or a wrapper that adds its
// own setup and teardown around it.
type TestRunner interface{ Run() int }

func run(m TestRunner) (code int) {
	// Parse now so that testing.Verbose can decide whether to show the
	// cluster's progress; m.Run does not parse again.
	flag.Parse()
	logf := func(format string, args ...any) {
		if testing.Verbose() {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		}
	}
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "storetest: %v\n", err)
		return 1
	}

	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	reapStale(ctx, logf)

	dir, err := os.MkdirTemp(clusterParent(), dirPrefix)
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fail(err)
	}

	c, err := pgcluster.Start(ctx, pgcluster.Options{
		Dir:  dir,
		Logf: logf,
		// Shared by all test binaries of this user, so that only the
		// first one on a machine pays for initdb.
		InitdbCache: filepath.Join(os.TempDir(), fmt.Sprintf("gateway-initdb-cache-%d", os.Geteuid())),
	})
	if err != nil {
		return fail(err)
	}
	defer func() {
		if err := c.Stop(); err != nil && code == 0 {
			code = fail(err)
		}
	}()
	if err := createTemplate(ctx, c); err != nil {
		return fail(err)
	}
	cluster = c

	stopSignals := cleanupOnSignal(c, dir)
	code = m.Run()
	stopSignals()

	// Only a passing run is checked: after a failure, goroutines stuck in
	// the failed test would bury the real error under leak reports.
	if code == 0 {
		if err := goleak.Find(
			// A pool closed at the very end of a test stops its health
			// check goroutine asynchronously.
			goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		); err != nil {
			return fail(fmt.Errorf("goroutines leaked by the tests: %w", err))
		}
	}
	return code
}

// createTemplate creates and migrates the template database, then locks it
// down as a template: no connection may stay open on it (cloning would fail)
// and none may be opened later.
func createTemplate(ctx context.Context, c *pgcluster.Cluster) error {
	if err := c.CreateDatabase(ctx, TemplateDatabase, ""); err != nil {
		return err
	}
	if err := migrations.UpAll(ctx, c.URL(TemplateDatabase)); err != nil {
		return fmt.Errorf("migrate %s: %w", TemplateDatabase, err)
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{TemplateDatabase}.Sanitize()
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("mark %s as template: %w", TemplateDatabase, err)
	}
	// Backends of connections the migrator just closed may still be
	// exiting; this makes them go now rather than delay the first clone.
	if _, err := conn.Exec(ctx,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", TemplateDatabase); err != nil {
		return fmt.Errorf("disconnect from %s: %w", TemplateDatabase, err)
	}
	return nil
}

// NewDatabase creates a database cloned from the migrated template, drops it
// when the test ends, and returns its connection URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "test_", clone)
}

// NewEmptyDatabase creates a database without any migration applied,
// drops it when the test ends, and returns its connection URL: for tests
// that migrate step by step.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "empty_", func(ctx context.Context, c *pgcluster.Cluster, name string) error {
		return c.CreateDatabase(ctx, name, "")
	})
}

// newDatabase creates a database of a new name starting with prefix,
// dropped when the test ends, and returns its connection URL.
func newDatabase(t testing.TB, prefix string, create func(ctx context.Context, c *pgcluster.Cluster, name string) error) string {
	t.Helper()
	c := mustCluster(t)
	name := prefix + strconv.FormatUint(cloneCount.Add(1), 10) + "_" + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := create(ctx, c, name); err != nil {
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dropDatabase(ctx, c, name); err != nil {
			t.Errorf("storetest: %v", err)
		}
	})
	return c.URL(name)
}

// NewPool returns a pool on a fresh database cloned from the template; the
// pool is closed, then the database dropped, when the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := NewDatabase(t)
	pool, err := store.OpenPool(context.Background(), url)
	if err != nil {
		t.Fatalf("storetest: open pool: %v", err)
	}
	// Registered after NewDatabase's cleanup, so it runs before the drop.
	t.Cleanup(pool.Close)
	return pool
}

// Cluster returns the binary's running cluster, for fault tests that stop or
// restart PostgreSQL. It panics outside a binary run by Main.
func Cluster() *pgcluster.Cluster {
	if cluster == nil {
		panic("storetest: Cluster needs TestMain to call storetest.Main")
	}
	return cluster
}

func mustCluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	if cluster == nil {
		t.Fatal("storetest: needs TestMain to call storetest.Main")
	}
	return cluster
}

// clone creates database name from the template. It retries while
// PostgreSQL reports the template busy: a backend of a connection closed
// moments ago can still be exiting.
func clone(ctx context.Context, c *pgcluster.Cluster, name string) error {
	cloneMu.Lock()
	defer cloneMu.Unlock()
	deadline := time.Now().Add(cloneRetry)
	for {
		err := c.CreateDatabase(ctx, name, TemplateDatabase)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != sqlstateObjectInUse || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dropDatabase drops a test database. FORCE disconnects whatever the test
// left connected (a pool it forgot to close), which would otherwise make the
// drop fail.
func dropDatabase(ctx context.Context, c *pgcluster.Cluster, name string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// randomSuffix makes database names unique even across clusters sharing a
// log, which eases reading interleaved output.
func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
}

// cleanupOnSignal stops the cluster and removes its directory if the test
// binary is interrupted (Ctrl-C, or SIGTERM from a CI runner): the server
// runs detached from us and would otherwise outlive the binary. The returned
// function ends the watch; it must be called before the goroutine leak check.
func cleanupOnSignal(c *pgcluster.Cluster, dir string) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case sig := <-sigs:
			fmt.Fprintf(os.Stderr, "storetest: %v: stopping PostgreSQL\n", sig)
			_ = c.StopImmediate()
			_ = os.RemoveAll(dir)
			os.Exit(1)
		case <-done:
		}
	})
	return func() {
		signal.Stop(sigs)
		close(done)
		wg.Wait()
	}
}

// reapStale stops the clusters of test binaries that died without cleaning
// up (a test timeout panics past deferred calls, SIGKILL skips everything)
// and removes their directories. Directories of live binaries are left
// alone, as are those not yet claimed by an owner.
func reapStale(ctx context.Context, logf func(string, ...any)) {
	var dirs []string
	for _, parent := range []string{shmDir, os.TempDir()} {
		found, _ := filepath.Glob(filepath.Join(parent, dirPrefix+"*"))
		dirs = append(dirs, found...)
	}
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || processAlive(pid) {
			continue
		}
		logf("storetest: cleaning up %s left by dead test binary %d", dir, pid)
		if err := pgcluster.StopStale(ctx, dir, logf); err != nil {
			logf("storetest: %v", err)
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// shmDir is the usual tmpfs mount.
const shmDir = "/dev/shm"

// clusterParent picks where the cluster directory goes: /dev/shm when it is
// a roomy tmpfs, else the temporary directory. Even with fsync off,
// PostgreSQL on a disk file system takes about ten times as long to clone a
// database (some 250 ms against 25 ms here), and every test clones one.
func clusterParent() string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(shmDir, &st); err != nil {
		return ""
	}
	const tmpfsMagic = 0x01021994
	if st.Type != tmpfsMagic || st.Bavail*uint64(st.Bsize) < minShmFree || syscall.Access(shmDir, 0o2 /* W_OK */) != nil {
		return ""
	}
	return shmDir
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// EditTasks runs an UPDATE of worker_tasks (without RETURNING) that stands
// in for time passing or a state a test needs, then makes the edited tasks'
// queue rows follow (store.ResyncQueueSQL), as the gateway's own
// statements do. It returns the edited tasks' ids.
func EditTasks(t testing.TB, pool *pgxpool.Pool, update string, args ...any) []uuid.UUID {
	t.Helper()
	rows, err := pool.Query(context.Background(), update+" RETURNING id", args...)
	if err != nil {
		t.Fatalf("edit tasks: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatalf("edit tasks: %v", err)
	}
	if _, err := pool.Exec(context.Background(), store.ResyncQueueSQL, ids); err != nil {
		t.Fatalf("resync the edited tasks' queue rows: %v", err)
	}
	return ids
}
