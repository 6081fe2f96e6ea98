package storetest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var exists bool
	require.NoError(t, pool.QueryRow(testContext(t), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&exists))
	return exists
}

// TestIsolation runs two parallel tests that each create a table in their
// own database. Each waits until the other has created its table before
// looking for it, so the check cannot pass by mere timing.
func TestIsolation(t *testing.T) {
	t.Parallel()
	var bothCreated sync.WaitGroup
	bothCreated.Add(2)
	check := func(mine, theirs string) func(*testing.T) {
		return func(t *testing.T) {
			t.Parallel()
			pool := storetest.NewPool(t)
			_, err := pool.Exec(testContext(t), "CREATE TABLE "+mine+" (x int)")
			bothCreated.Done()
			require.NoError(t, err)

			waited := make(chan struct{})
			go func() { bothCreated.Wait(); close(waited) }()
			select {
			case <-waited:
			case <-time.After(30 * time.Second):
				t.Fatal("the other test never created its table")
			}
			require.True(t, tableExists(t, pool, mine))
			require.False(t, tableExists(t, pool, theirs), "a test database must not see another test's tables")
		}
	}
	t.Run("a", check("only_in_a", "only_in_b"))
	t.Run("b", check("only_in_b", "only_in_a"))
}

// TestClonesAreMigrated checks that a clone starts at the latest schema
// version, migrated cleanly.
func TestClonesAreMigrated(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	latest, err := migrations.Latest()
	require.NoError(t, err)
	var version uint
	var dirty bool
	require.NoError(t, pool.QueryRow(testContext(t), "SELECT version, dirty FROM schema_migrations").Scan(&version, &dirty))
	require.Equal(t, latest, version)
	require.False(t, dirty)
}

// TestManyParallelClones exercises the clone lock: parallel tests clone at
// once, and each drop at cleanup must succeed.
func TestManyParallelClones(t *testing.T) {
	t.Parallel()
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			url := storetest.NewDatabase(t)
			ctx := testContext(t)
			conn, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			// Left open on purpose: the drop at cleanup must cope.
			t.Cleanup(func() { _ = conn.Close(context.Background()) })
			var db string
			require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&db))
			require.Regexp(t, `^test_\d+_[0-9a-f]{8}$`, db)
		})
	}
}

// TestSurvivesRestart is what fault tests do: crash PostgreSQL through
// storetest.Cluster and carry on with the same pool. Not parallel, so the
// crash cannot hit other tests (parallel tests run after sequential ones).
func TestSurvivesRestart(t *testing.T) {
	pool := storetest.NewPool(t)
	ctx := testContext(t)
	require.NoError(t, pool.Ping(ctx))

	require.NoError(t, storetest.Cluster().Restart(ctx, "immediate"))
	// The pool's old connections are dead; the pool replaces them, though a
	// query on a dead connection may fail once.
	require.Eventually(t, func() bool {
		var one int
		return pool.QueryRow(ctx, "SELECT 1").Scan(&one) == nil && one == 1
	}, 10*time.Second, 20*time.Millisecond)
}
