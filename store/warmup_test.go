package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/store/storetest"
)

// planCounts are how often one prepared statement ran on a generic and on
// a custom plan.
type planCounts struct{ generic, custom int64 }

// preparedPlans reads, for one connection of a one-connection pool, the
// planCounts of each prepared statement.
func preparedPlans(t *testing.T, pool *pgxpool.Pool) map[string]planCounts {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement NOT LIKE '%pg_prepared_statements%'`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]planCounts{}
	for rows.Next() {
		var sql string
		var c planCounts
		require.NoError(t, rows.Scan(&sql, &c.generic, &c.custom))
		out[sql] = c
	}
	require.NoError(t, rows.Err())
	return out
}

// TestWarmConnectionsPlansTheHotPathAhead: a warmed connection has the hot
// statements prepared and their generic plans made before it serves
// anything, and a lease and its completion then run on exactly those plans —
// nothing is prepared or planned anew on the request's time.
func TestWarmConnectionsPlansTheHotPathAhead(t *testing.T) {
	_, b := setupStore(t)
	pool, err := store.OpenPool(context.Background(), b.pool.Config().ConnString(), func(c *pgxpool.Config) {
		c.MaxConns = 1
		store.WarmConnections(c)
	})
	require.NoError(t, err)
	defer pool.Close()

	warmed := preparedPlans(t, pool)
	planned := 0
	for sql, c := range warmed {
		require.Zero(t, c.custom, "custom plan during the warm-up: %s", sql)
		if c.generic > 0 {
			require.EqualValues(t, 1, c.generic, sql)
			planned++
		}
	}
	// touch, replay, lock assignments, lease alone, candidates, grant,
	// fenced lock, move: each planned once.
	require.Equal(t, 8, planned, "hot statements with a generic plan after the warm-up")

	s := store.New(pool)
	org := b.org.ID
	createTask(t, s, org, store.CreateTaskParams{})
	l := acquireOne(t, s, b.worker.ID)
	complete(t, s, refOf(b.worker.ID, l), store.AttemptSucceeded, false)

	after := preparedPlans(t, pool)
	for sql, c := range warmed {
		if c.generic == 0 {
			continue
		}
		require.Zero(t, after[sql].custom, "custom plan after the warm-up: %s", sql)
	}
	used := 0
	for sql, c := range after {
		if warmed[sql].generic > 0 && c.generic > warmed[sql].generic {
			used++
		}
	}
	// The lone poll (touch, lock assignments, lease alone) and the
	// completion (fenced lock, move) ran on the warm-up's plans.
	require.Equal(t, 5, used, "warm-up plans the lease and its completion used")
}

// TestWarmConnectionsToleratesAnotherSchema: on a database whose schema the
// warm-up's statements do not fit (here: none at all), connections still
// open and serve; readiness, not the pool, reports the mismatch.
func TestWarmConnectionsToleratesAnotherSchema(t *testing.T) {
	pool, err := store.OpenPool(context.Background(), storetest.NewEmptyDatabase(t), func(c *pgxpool.Config) {
		c.MaxConns = 1
		store.WarmConnections(c)
	})
	require.NoError(t, err)
	defer pool.Close()
	var one int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)
}
